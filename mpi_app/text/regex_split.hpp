// SPDX-License-Identifier: Apache-2.0
// regex_split: the `Split` pre-tokenizer of Hugging Face tokenizers — a pattern (a regex run by
// PCRE2 in UTF mode with JIT, or a literal string), its find_matches and the five split
// behaviours (Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous) with `invert`.
// Hugging Face compiles these regexes with Oniguruma; onig_to_pcre2() rewrites the escapes whose
// meaning differs (\s includes U+0085, \w is L|M|Nd|Pc, \h is a hex digit). No pcre2.h here.
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tagflow::text {

enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

/// Parses "Isolated" etc.; throws std::runtime_error naming an unknown one.
SplitBehavior parse_split_behavior(const std::string& name);

/// An Oniguruma pattern rewritten for PCRE2; throws std::runtime_error for an escape that has no
/// faithful rewrite (\S, \W, \H inside a character class).
std::string onig_to_pcre2(const std::string& pattern);

/// A compiled regex or a literal string. Matching is thread-safe (per-thread match data).
class Pattern {
public:
    /// Compiles `pattern` (Oniguruma syntax); throws std::runtime_error with PCRE2's message,
    /// the offset and the pattern when it does not compile.
    static std::unique_ptr<Pattern> regex(const std::string& pattern);
    static std::unique_ptr<Pattern> literal(const std::string& text);
    ~Pattern();

    /// Hugging Face's Pattern::find_matches: consecutive (start, end, is_match) pieces covering
    /// `s` (a valid UTF-8 string); an empty `s` gives one empty non-match.
    struct Piece {
        std::size_t start, end;
        bool match;
    };
    void find_matches(std::string_view s, std::vector<Piece>& out) const;
    /// The same pieces, streamed to `fn(Piece)` in order (no buffer: 10 MB inputs with
    /// millions of pieces stay cheap).
    template <class Fn>
    void for_each_piece(std::string_view s, Fn&& fn) const {
        scan(
            s, [](void* ctx, Piece p) { (*static_cast<Fn*>(ctx))(p); }, &fn);
    }

private:
    Pattern() = default;
    void scan(std::string_view s, void (*emit)(void*, Piece), void* ctx) const;
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

/// NormalizedString::split, streamed: `fn(start, end)` for each kept range of `s` in order (empty
/// ones included; callers drop them as PreTokenizedString::split does).
template <class Fn>
void for_each_split(std::string_view s, const Pattern& pattern, SplitBehavior behavior, bool invert, Fn&& fn) {
    // One pending range is enough for every behaviour (MergedWithNext is Hugging Face's reversed
    // fold read forwards: a match followed by a non-match joins it).
    bool have = false, pending_match = false, previous = false;
    std::size_t ps = 0, pe = 0;
    const auto flush = [&] {
        if (have) fn(ps, pe);
        have = false;
    };
    pattern.for_each_piece(s, [&](Pattern::Piece p) {
        if (invert) p.match = !p.match;
        switch (behavior) {
            case SplitBehavior::Isolated: fn(p.start, p.end); break;
            case SplitBehavior::Removed:
                if (!p.match) fn(p.start, p.end);
                break;
            case SplitBehavior::Contiguous:
                if (have && p.match == previous) {
                    pe = p.end;
                } else {
                    flush();
                    have = true, ps = p.start, pe = p.end;
                }
                break;
            case SplitBehavior::MergedWithPrevious:
                if (have && p.match && !previous) {
                    pe = p.end;
                } else {
                    flush();
                    have = true, ps = p.start, pe = p.end;
                }
                break;
            case SplitBehavior::MergedWithNext:
                if (have && pending_match && !p.match) {
                    fn(ps, p.end);
                    have = false;
                } else {
                    flush();
                    have = true, ps = p.start, pe = p.end, pending_match = p.match;
                }
                break;
        }
        previous = p.match;
    });
    flush();
}

/// for_each_split collected into `out` (tests).
void split_pieces(std::string_view s, const Pattern& pattern, SplitBehavior behavior, bool invert,
                  std::vector<std::pair<std::size_t, std::size_t>>& out);

}  // namespace tagflow::text
