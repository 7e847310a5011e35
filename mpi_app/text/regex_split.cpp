// SPDX-License-Identifier: Apache-2.0
// regex_split: see regex_split.hpp. The split logic follows Hugging Face's
// tokenizer/normalizer.rs (NormalizedString::split) and tokenizer/pattern.rs; the iteration over
// matches follows the onig crate's FindMatches (an empty match right after the previous match is
// skipped by one character). Matching passes PCRE2_NO_UTF_CHECK: text is validated once by the
// caller, so long inputs stay linear.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "text/regex_split.hpp"

#include <pcre2.h>

#include <algorithm>
#include <stdexcept>

namespace tagflow::text {

SplitBehavior parse_split_behavior(const std::string& name) {
    if (name == "Removed") return SplitBehavior::Removed;
    if (name == "Isolated") return SplitBehavior::Isolated;
    if (name == "MergedWithPrevious") return SplitBehavior::MergedWithPrevious;
    if (name == "MergedWithNext") return SplitBehavior::MergedWithNext;
    if (name == "Contiguous") return SplitBehavior::Contiguous;
    throw std::runtime_error("unknown Split behavior \"" + name + "\"");
}

std::string onig_to_pcre2(const std::string& p) {
    static const char kSpace[] = "\\s\\x{85}";
    static const char kWord[] = "\\p{L}\\p{M}\\p{Nd}\\p{Pc}";
    static const char kHex[] = "0-9a-fA-F";
    std::string out;
    out.reserve(p.size() + 16);
    bool in_class = false;
    std::size_t class_start = 0;  // index in p just after "[" or "[^"
    for (std::size_t i = 0; i < p.size(); ++i) {
        const char c = p[i];
        if (c == '\\' && i + 1 < p.size()) {
            const char e = p[++i];
            const char* body = e == 's' || e == 'S'   ? kSpace
                               : e == 'w' || e == 'W' ? kWord
                               : e == 'h' || e == 'H' ? kHex
                                                      : nullptr;
            if (!body) {
                out += c;
                out += e;
            } else if (!in_class) {
                out += (e >= 'a') ? "[" : "[^";
                out += body;
                out += ']';
            } else if (e >= 'a') {
                out += body;
            } else {
                throw std::runtime_error(std::string("\\") + e + " inside a character class is not supported");
            }
            continue;
        }
        if (!in_class && c == '[') {
            in_class = true;
            out += c;
            if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
            class_start = i + 1;
            continue;
        }
        if (in_class && c == '[' && i + 1 < p.size() && p[i + 1] == ':') {  // [:alpha:]
            const std::size_t end = p.find(":]", i + 2);
            if (end != std::string::npos) {
                out.append(p, i, end + 2 - i);
                i = end + 1;
                continue;
            }
        }
        if (in_class && c == ']' && i != class_start) in_class = false;
        out += c;
    }
    return out;
}

struct Pattern::Impl {
    pcre2_code* code = nullptr;
    bool jit = false;
    std::string literal;
    bool is_regex = false;
    ~Impl() {
        if (code) pcre2_code_free(code);
    }
};

namespace {

// Per-thread match data and JIT stack (a compiled pattern is shared between threads).
struct ThreadMatch {
    pcre2_match_data* md = nullptr;
    pcre2_match_context* mc = nullptr;
    pcre2_jit_stack* stack = nullptr;
    ThreadMatch() {
        md = pcre2_match_data_create(1, nullptr);
        mc = pcre2_match_context_create(nullptr);
        stack = pcre2_jit_stack_create(32 * 1024, 64 * 1024 * 1024, nullptr);
        if (!md || !mc || !stack) throw std::runtime_error("PCRE2: out of memory for match data");
        pcre2_jit_stack_assign(mc, nullptr, stack);
        // Long runs of one class (10 MB of '!') count one step per character: no step limit,
        // the input length bounds the work (the patterns of tokenizers do not backtrack badly).
        pcre2_set_match_limit(mc, 0xFFFFFFFFu);
        pcre2_set_depth_limit(mc, 0xFFFFFFFFu);
    }
    ~ThreadMatch() {
        pcre2_jit_stack_free(stack);
        pcre2_match_context_free(mc);
        pcre2_match_data_free(md);
    }
};

std::string pcre2_message(int rc) {
    PCRE2_UCHAR buf[256];
    pcre2_get_error_message(rc, buf, sizeof buf);
    return std::string(reinterpret_cast<const char*>(buf));
}

std::size_t utf8_char_len(unsigned char c) { return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4; }

}  // namespace

Pattern::~Pattern() = default;

std::unique_ptr<Pattern> Pattern::regex(const std::string& pattern) {
    std::unique_ptr<Pattern> p(new Pattern());
    p->impl_ = std::make_unique<Impl>();
    p->impl_->is_regex = true;
    std::string translated;
    try {
        translated = onig_to_pcre2(pattern);
    } catch (const std::runtime_error& e) {
        throw std::runtime_error(std::string("regex does not compile: ") + e.what() + " (pattern \"" + pattern + "\")");
    }
    int err = 0;
    PCRE2_SIZE off = 0;
    p->impl_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE, &err, &off, nullptr);
    if (!p->impl_->code)
        throw std::runtime_error("regex does not compile: " + pcre2_message(err) + " at offset " + std::to_string(off) +
                                 " (pattern \"" + pattern + "\")");
    p->impl_->jit = pcre2_jit_compile(p->impl_->code, PCRE2_JIT_COMPLETE) == 0;
    return p;
}

std::unique_ptr<Pattern> Pattern::literal(const std::string& text) {
    std::unique_ptr<Pattern> p(new Pattern());
    p->impl_ = std::make_unique<Impl>();
    p->impl_->literal = text;
    return p;
}

void Pattern::find_matches(std::string_view s, std::vector<Piece>& out) const {
    out.clear();
    for_each_piece(s, [&](Piece p) { out.push_back(p); });
}

void Pattern::scan(std::string_view s, void (*emit)(void*, Piece), void* ctx) const {
    if (s.empty()) {
        emit(ctx, {0, 0, false});
        return;
    }
    std::size_t prev = 0;
    const auto add = [&](std::size_t a, std::size_t b) {
        if (prev != a) emit(ctx, {prev, a, false});
        emit(ctx, {a, b, true});
        prev = b;
    };
    if (!impl_->is_regex) {
        const std::string& lit = impl_->literal;
        if (!lit.empty()) {
            for (std::size_t pos = s.find(lit); pos != std::string_view::npos; pos = s.find(lit, pos + lit.size()))
                add(pos, pos + lit.size());
        }
    } else {
        thread_local ThreadMatch tm;
        const auto subject = reinterpret_cast<PCRE2_SPTR>(s.data());
        std::size_t last_end = 0;
        bool have_last = false;
        std::size_t last_match_end = 0;
        while (last_end <= s.size()) {
            const int rc =
                impl_->jit ? pcre2_jit_match(impl_->code, subject, s.size(), last_end, PCRE2_NO_UTF_CHECK, tm.md, tm.mc)
                           : pcre2_match(impl_->code, subject, s.size(), last_end, PCRE2_NO_UTF_CHECK, tm.md, tm.mc);
            if (rc == PCRE2_ERROR_NOMATCH) break;
            if (rc < 0) throw std::runtime_error("regex match failed: " + pcre2_message(rc));
            const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(tm.md);
            const std::size_t a = ov[0], b = ov[1];
            if (a == b && have_last && last_match_end == b) {
                if (last_end >= s.size()) break;
                last_end += utf8_char_len(static_cast<unsigned char>(s[last_end]));
                continue;
            }
            last_end = b;
            last_match_end = b;
            have_last = true;
            add(a, b);
            if (a == b && b >= s.size()) break;
        }
    }
    if (prev != s.size()) emit(ctx, {prev, s.size(), false});
}

void split_pieces(std::string_view s, const Pattern& pattern, SplitBehavior behavior, bool invert,
                  std::vector<std::pair<std::size_t, std::size_t>>& out) {
    out.clear();
    for_each_split(s, pattern, behavior, invert, [&](std::size_t a, std::size_t b) { out.emplace_back(a, b); });
}

}  // namespace tagflow::text
