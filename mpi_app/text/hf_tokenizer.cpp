// SPDX-License-Identifier: Apache-2.0
// hf_tokenizer: encode and decode of HfTokenizer (see hf_tokenizer.hpp); loading is in
// hf_tokenizer_load.cpp. The encode pipeline is Hugging Face's TokenizerImpl::encode for one
// sequence: AddedVocabulary::extract_and_normalize (added tokens matched on the raw text, the
// rest normalized, then normalized added tokens matched), the pre-tokenizer stages, the BPE model
// on each piece, then the post-processor when add_special_tokens is set.
#include "text/hf_tokenizer.hpp"

#include <algorithm>

#include "common/error.hpp"
#include "text/hf_tokenizer_impl.hpp"
#include "text/utf8.hpp"

namespace tagflow::text {

// ---- added-token trie ----

void AddedTrie::add(const std::string& key, std::size_t token_index) {
    if (key.empty()) return;
    uint32_t n = 0;
    for (unsigned char c : key) {
        auto it = nodes_[n].next.find(c);
        if (it == nodes_[n].next.end()) {
            nodes_.push_back(Node{});
            const auto child = static_cast<uint32_t>(nodes_.size() - 1);
            nodes_[n].next.emplace(c, child);
            n = child;
        } else {
            n = it->second;
        }
    }
    if (nodes_[n].token < 0) nodes_[n].token = static_cast<int64_t>(token_index);  // first of equal keys wins
    first_[static_cast<unsigned char>(key[0])] = true;
}

bool AddedTrie::match_at(std::string_view s, std::size_t pos, std::size_t* token_index, std::size_t* len) const {
    uint32_t n = 0;
    bool found = false;
    for (std::size_t i = pos; i < s.size(); ++i) {
        const auto it = nodes_[n].next.find(static_cast<unsigned char>(s[i]));
        if (it == nodes_[n].next.end()) break;
        n = it->second;
        if (nodes_[n].token >= 0) {
            *token_index = static_cast<std::size_t>(nodes_[n].token);
            *len = i + 1 - pos;
            found = true;
        }
    }
    return found;
}

namespace {

// The code point that ends s[0, end) (s valid UTF-8, end > 0).
char32_t char_before(std::string_view s, std::size_t end, std::size_t* start) {
    std::size_t i = end - 1;
    while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
    std::size_t len = 0;
    *start = i;
    return utf8_decode(s, i, &len);
}

}  // namespace

// AddedVocabulary::find_matches + split_with_indices for one piece of text.
void HfTokenizer::Impl::split_added(std::string_view s, const AddedTrie& trie, std::vector<int32_t>& out,
                                    bool normalized_pass) const {
    const auto gap = [&](std::size_t a, std::size_t b) {
        if (a >= b) return;
        const std::string_view piece = s.substr(a, b - a);
        if (normalized_pass) {
            pre_tokenize(0, piece, out);
        } else {
            std::string normalized;
            if (!normalizer.empty() && normalizer.apply_if_changed(piece, normalized)) {
                split_added(normalized, norm_trie, out, true);
            } else {
                split_added(piece, norm_trie, out, true);
            }
        }
    };
    if (trie.empty()) {
        gap(0, s.size());
        return;
    }
    const std::size_t n = s.size();
    std::size_t start_offset = 0, pos = 0;
    while (pos < n) {
        std::size_t ti = 0, len = 0, i = pos;
        for (; i < n; ++i)
            if (trie.first_byte(static_cast<unsigned char>(s[i])) && trie.match_at(s, i, &ti, &len)) break;
        if (i >= n) break;
        pos = i + len;  // the matcher's next search starts after this match, whatever we do with it
        const AddedToken& tok = added[ti];
        std::size_t start = i, stop = i + len;
        if (tok.single_word) {
            std::size_t tmp = 0, clen = 0;
            const bool start_space = start == 0 || !is_word_char(char_before(s, start, &tmp));
            const bool stop_space = stop == n || !is_word_char(utf8_decode(s, stop, &clen));
            if (!start_space || !stop_space) continue;
        }
        if (tok.lstrip) {
            std::size_t b = start;
            while (b > 0) {
                std::size_t cs = 0;
                if (!is_space_char(char_before(s, b, &cs))) break;
                b = cs;
            }
            start = std::max(b, start_offset);
        }
        if (tok.rstrip) {
            while (stop < n) {
                std::size_t clen = 0;
                if (!is_space_char(utf8_decode(s, stop, &clen))) break;
                stop += clen;
            }
        }
        if (start_offset < start) gap(start_offset, start);
        out.push_back(tok.id);
        start_offset = stop;
    }
    if (start_offset < n) gap(start_offset, n);
}

void HfTokenizer::Impl::pre_tokenize(std::size_t k, std::string_view s, std::vector<int32_t>& out) const {
    if (s.empty()) return;
    const PreTokStage& st = stages[k];
    if (st.kind == PreTokStage::kSplit) {
        for_each_split(s, *st.pattern, st.behavior, st.invert, [&](std::size_t a, std::size_t b) {
            if (b > a) pre_tokenize(k + 1, s.substr(a, b - a), out);
        });
        return;
    }
    // ByteLevel (always the last stage): optional prefix space, optional GPT-2 regex, then BPE.
    std::string prefixed;
    std::string_view v = s;
    if (st.add_prefix_space && s[0] != ' ') {
        prefixed.reserve(s.size() + 1);
        prefixed += ' ';
        prefixed.append(s);
        v = prefixed;
    }
    if (!st.use_regex) {
        model->encode_word(v, out);
        return;
    }
    gpt2->for_each_piece(v, [&](Pattern::Piece p) {
        if (p.end > p.start) model->encode_word(v.substr(p.start, p.end - p.start), out);
    });
}

void HfTokenizer::Impl::encode_into(std::string_view text, std::vector<int32_t>& out) const {
    split_added(text, raw_trie, out, false);
}

// ---- HfTokenizer ----

HfTokenizer::HfTokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HfTokenizer::HfTokenizer(HfTokenizer&&) noexcept = default;
HfTokenizer& HfTokenizer::operator=(HfTokenizer&&) noexcept = default;
HfTokenizer::~HfTokenizer() = default;

std::vector<int32_t> HfTokenizer::encode(std::string_view text, bool add_special_tokens) const {
    std::size_t bad = 0;
    if (!utf8_valid(text, &bad)) throw Error("text is not valid UTF-8 (byte offset " + std::to_string(bad) + ")");
    std::vector<int32_t> ids;
    ids.reserve(text.size() / 3 + 4);
    impl_->encode_into(text, ids);
    if (add_special_tokens) {
        for (const auto& tmpl : impl_->templates) {
            std::vector<int32_t> wrapped;
            wrapped.reserve(ids.size() + tmpl.size());
            for (int32_t t : tmpl) {
                if (t < 0) {
                    wrapped.insert(wrapped.end(), ids.begin(), ids.end());
                } else {
                    wrapped.push_back(t);
                }
            }
            ids = std::move(wrapped);
        }
    }
    return ids;
}

std::string HfTokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
    const Impl& m = *impl_;
    std::string bytes;
    bool first = true;
    for (int32_t id : ids) {
        if (id < 0 || id >= vocab_size() || !m.exists[static_cast<std::size_t>(id)])
            throw Error("token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                        std::to_string(vocab_size()) + ")");
        const auto i = static_cast<std::size_t>(id);
        if (skip_special_tokens && m.special[i]) continue;
        if (m.byte_level_decoder) {
            bytes += m.bytes[i];
        } else {
            if (!first) bytes += ' ';
            bytes += m.token[i];
        }
        first = false;
    }
    return utf8_lossy(bytes);
}

std::string HfTokenizer::token_bytes(int32_t id) const {
    const Impl& m = *impl_;
    if (id < 0 || id >= vocab_size() || !m.exists[static_cast<std::size_t>(id)])
        throw Error("token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                    std::to_string(vocab_size()) + ")");
    const auto i = static_cast<std::size_t>(id);
    return m.byte_level_decoder ? m.bytes[i] : m.token[i];
}

int32_t HfTokenizer::vocab_size() const { return static_cast<int32_t>(impl_->token.size()); }

std::optional<int32_t> HfTokenizer::token_to_id(std::string_view token) const {
    const auto it = impl_->token_ids.find(std::string(token));
    if (it == impl_->token_ids.end()) return std::nullopt;
    return it->second;
}

std::string HfTokenizer::id_to_token(int32_t id) const {
    if (id < 0 || id >= vocab_size()) return std::string();
    return impl_->token[static_cast<std::size_t>(id)];
}

bool HfTokenizer::is_special(int32_t id) const {
    return id >= 0 && id < vocab_size() && impl_->special[static_cast<std::size_t>(id)];
}

std::optional<int32_t> HfTokenizer::bos_id() const { return impl_->bos; }
std::optional<int32_t> HfTokenizer::eos_id() const { return impl_->eos; }
std::optional<int32_t> HfTokenizer::pad_id() const { return impl_->pad; }
const std::string& HfTokenizer::path() const { return impl_->path; }

}  // namespace tagflow::text
