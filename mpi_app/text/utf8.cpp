// SPDX-License-Identifier: Apache-2.0
// utf8: see utf8.hpp. The validity table is the one of the Unicode Standard, table 3-7
// (well-formed UTF-8 byte sequences); a "maximal subpart" is the longest prefix of a
// well-formed sequence, as in Unicode's U+FFFD substitution practice that Rust follows.
#include "text/utf8.hpp"

namespace tagflow::text {
namespace {

/// Length of the valid sequence starting at s[i] (1..4), or 0 when invalid; `*prefix` gets the
/// length of the maximal subpart (>= 1) for an invalid one.
std::size_t sequence_at(std::string_view s, std::size_t i, std::size_t* prefix) {
    const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
    const unsigned char c = b(i);
    *prefix = 1;
    if (c < 0x80) return 1;
    std::size_t need;
    unsigned char lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) {
        need = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;  // no surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
    } else {
        return 0;
    }
    for (std::size_t k = 1; k < need; ++k) {
        if (i + k >= s.size()) return 0;
        const unsigned char t = b(i + k);
        const bool ok = k == 1 ? (t >= lo && t <= hi) : (t >= 0x80 && t <= 0xBF);
        if (!ok) return 0;
        *prefix = k + 1;
    }
    return need;
}

}  // namespace

bool utf8_valid(std::string_view s, std::size_t* bad_offset) {
    std::size_t i = 0;
    const std::size_t n = s.size();
    while (i < n) {
        // ASCII fast path, 8 bytes at a time
        while (i + 8 <= n) {
            uint64_t w = 0;
            for (int k = 0; k < 8; ++k) w |= static_cast<uint64_t>(static_cast<unsigned char>(s[i + k])) << (8 * k);
            if (w & 0x8080808080808080ULL) break;
            i += 8;
        }
        if (i >= n) break;
        if (static_cast<unsigned char>(s[i]) < 0x80) {
            ++i;
            continue;
        }
        std::size_t prefix = 0;
        const std::size_t len = sequence_at(s, i, &prefix);
        if (len == 0) {
            if (bad_offset) *bad_offset = i;
            return false;
        }
        i += len;
    }
    return true;
}

char32_t utf8_decode(std::string_view s, std::size_t i, std::size_t* len) {
    const auto b = [&](std::size_t k) { return static_cast<char32_t>(static_cast<unsigned char>(s[k])); };
    const char32_t c = b(i);
    if (c < 0x80) {
        *len = 1;
        return c;
    }
    if (c < 0xE0) {
        *len = 2;
        return ((c & 0x1F) << 6) | (b(i + 1) & 0x3F);
    }
    if (c < 0xF0) {
        *len = 3;
        return ((c & 0x0F) << 12) | ((b(i + 1) & 0x3F) << 6) | (b(i + 2) & 0x3F);
    }
    *len = 4;
    return ((c & 0x07) << 18) | ((b(i + 1) & 0x3F) << 12) | ((b(i + 2) & 0x3F) << 6) | (b(i + 3) & 0x3F);
}

void utf8_append(std::string& out, char32_t cp) {
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
        out += static_cast<char>(0xF0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    }
}

std::string utf8_lossy(std::string_view bytes) {
    std::size_t bad = 0;
    if (utf8_valid(bytes, &bad)) return std::string(bytes);
    std::string out(bytes.substr(0, bad));
    out.reserve(bytes.size() + 8);
    std::size_t i = bad;
    while (i < bytes.size()) {
        std::size_t prefix = 0;
        const std::size_t len = sequence_at(bytes, i, &prefix);
        if (len == 0) {
            out += "\xEF\xBF\xBD";  // U+FFFD
            i += prefix;
        } else {
            out.append(bytes.substr(i, len));
            i += len;
        }
    }
    return out;
}

}  // namespace tagflow::text
