// SPDX-License-Identifier: Apache-2.0
// normalizer: the Unicode normalizers of a tokenizer.json (NFC, NFD, NFKC, NFKD, and Sequences
// of them) through ICU's Normalizer2, plus the character classes the added-token matcher needs
// (\w and \s as Rust's regex crate defines them). Other normalizers are refused by the loader.
// No ICU header here.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace tagflow::text {

enum class NormalForm { NFC, NFD, NFKC, NFKD };

/// A chain of normal forms applied in order (empty: no normalizer).
class Normalizer {
public:
    Normalizer() = default;
    explicit Normalizer(std::vector<NormalForm> forms);
    bool empty() const { return forms_.empty(); }
    /// `s` normalized (valid UTF-8 in, valid UTF-8 out).
    std::string apply(std::string_view s) const;
    /// Like apply(), but false (and `out` untouched) when `s` is already normalized.
    bool apply_if_changed(std::string_view s, std::string& out) const;

private:
    std::vector<NormalForm> forms_;
    std::vector<const void*> icu_;  // icu::Normalizer2 instances, owned by ICU
};

/// Rust regex `\w`: Alphabetic, Mark, Decimal_Number, Connector_Punctuation or Join_Control.
bool is_word_char(char32_t c);
/// Rust regex `\s`: the White_Space property.
bool is_space_char(char32_t c);

}  // namespace tagflow::text
