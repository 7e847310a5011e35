// SPDX-License-Identifier: Apache-2.0
// normalizer: see normalizer.hpp. ICU's Normalizer2 works on UTF-8 directly (normalizeUTF8);
// text whose code points are all below U+0300 is already NFC and skips ICU.
#include "text/normalizer.hpp"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>

#include <stdexcept>

namespace tagflow::text {

Normalizer::Normalizer(std::vector<NormalForm> forms) : forms_(std::move(forms)) {
    for (NormalForm f : forms_) {
        UErrorCode st = U_ZERO_ERROR;
        const icu::Normalizer2* n = nullptr;
        switch (f) {
            case NormalForm::NFC: n = icu::Normalizer2::getNFCInstance(st); break;
            case NormalForm::NFD: n = icu::Normalizer2::getNFDInstance(st); break;
            case NormalForm::NFKC: n = icu::Normalizer2::getNFKCInstance(st); break;
            case NormalForm::NFKD: n = icu::Normalizer2::getNFKDInstance(st); break;
        }
        if (U_FAILURE(st) || !n)
            throw std::runtime_error(std::string("ICU normalizer unavailable: ") + u_errorName(st));
        icu_.push_back(n);
    }
}

std::string Normalizer::apply(std::string_view s) const {
    std::string out;
    if (!apply_if_changed(s, out)) out.assign(s);
    return out;
}

bool Normalizer::apply_if_changed(std::string_view s, std::string& result) const {
    std::string cur;
    bool changed = false;
    for (std::size_t k = 0; k < forms_.size(); ++k) {
        const std::string_view in = changed ? std::string_view(cur) : s;
        if (forms_[k] == NormalForm::NFC) {
            bool low = true;  // every code point < U+0300 (lead bytes < 0xCC): already NFC
            for (unsigned char c : in)
                if (c >= 0xCC) {
                    low = false;
                    break;
                }
            if (low) continue;
        }
        const auto* n = static_cast<const icu::Normalizer2*>(icu_[k]);
        const icu::StringPiece piece(in.data(), static_cast<int32_t>(in.size()));
        UErrorCode st = U_ZERO_ERROR;
        if (n->isNormalizedUTF8(piece, st) && U_SUCCESS(st)) continue;
        st = U_ZERO_ERROR;
        std::string out;
        out.reserve(in.size() + in.size() / 4);
        icu::StringByteSink<std::string> sink(&out);
        n->normalizeUTF8(0, piece, sink, nullptr, st);
        if (U_FAILURE(st)) throw std::runtime_error(std::string("ICU normalization failed: ") + u_errorName(st));
        cur = std::move(out);
        changed = true;
    }
    if (changed) result = std::move(cur);
    return changed;
}

bool is_word_char(char32_t c) {
    const auto cp = static_cast<UChar32>(c);
    if (u_hasBinaryProperty(cp, UCHAR_ALPHABETIC) || u_hasBinaryProperty(cp, UCHAR_JOIN_CONTROL)) return true;
    const int32_t mask = U_GET_GC_MASK(cp);
    return (mask & (U_GC_M_MASK | U_GC_ND_MASK | U_GC_PC_MASK)) != 0;
}

bool is_space_char(char32_t c) { return u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_WHITE_SPACE); }

}  // namespace tagflow::text
