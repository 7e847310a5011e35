// SPDX-License-Identifier: Apache-2.0
// utf8: validation, code point decoding and the lossy repair of byte strings (Rust's
// String::from_utf8_lossy rules: one U+FFFD per maximal invalid subpart), for the text library.
// Does not normalize (see normalizer.hpp) and does not classify characters.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tagflow::text {

/// True when `s` is well-formed UTF-8 (no overlongs, no surrogates, nothing above U+10FFFF).
/// On false, `*bad_offset` (when given) is the byte offset of the first invalid sequence.
bool utf8_valid(std::string_view s, std::size_t* bad_offset = nullptr);

/// Decodes the code point at `s[i]` of a string known to be valid UTF-8; sets `*len` to its size.
char32_t utf8_decode(std::string_view s, std::size_t i, std::size_t* len);

/// Appends the UTF-8 encoding of `cp` to `out`.
void utf8_append(std::string& out, char32_t cp);

/// `bytes` as valid UTF-8: each maximal invalid subpart becomes U+FFFD (as Rust's
/// String::from_utf8_lossy, which Hugging Face's byte-level decoder uses).
std::string utf8_lossy(std::string_view bytes);

}  // namespace tagflow::text
