// SPDX-License-Identifier: Apache-2.0
// hf_tokenizer_impl: the internals of HfTokenizer shared by hf_tokenizer.cpp (encode, decode)
// and hf_tokenizer_load.cpp (tokenizer.json parsing). Not part of the library's interface.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "text/bpe.hpp"
#include "text/hf_tokenizer.hpp"
#include "text/normalizer.hpp"
#include "text/regex_split.hpp"

namespace tagflow::text {

struct AddedToken {
    int32_t id = 0;
    std::string content;
    bool single_word = false, lstrip = false, rstrip = false, normalized = true, special = false;
};

/// Byte trie over added-token contents: leftmost-longest, non-overlapping matches (the
/// MatchKind::LeftmostLongest Aho-Corasick of Hugging Face's AddedVocabulary).
class AddedTrie {
public:
    void add(const std::string& key, std::size_t token_index);
    bool empty() const { return nodes_.size() <= 1; }
    /// Longest key starting at s[pos]: its token index and length, or false.
    bool match_at(std::string_view s, std::size_t pos, std::size_t* token_index, std::size_t* len) const;
    bool first_byte(unsigned char c) const { return first_[c]; }

private:
    struct Node {
        std::unordered_map<unsigned char, uint32_t> next;
        int64_t token = -1;
    };
    std::vector<Node> nodes_ = std::vector<Node>(1);
    bool first_[256] = {};
};

struct PreTokStage {
    enum Kind { kSplit, kByteLevel } kind = kSplit;
    std::unique_ptr<Pattern> pattern;  // kSplit
    SplitBehavior behavior = SplitBehavior::Isolated;
    bool invert = false;
    bool add_prefix_space = false;  // kByteLevel
    bool use_regex = true;
};

struct HfTokenizer::Impl {
    std::string path;
    std::unique_ptr<BpeModel> model;
    Normalizer normalizer;
    std::vector<AddedToken> added;  // in file order
    AddedTrie raw_trie, norm_trie;  // normalized == false / true
    std::vector<PreTokStage> stages;
    std::unique_ptr<Pattern> gpt2;  // ByteLevel's own regex (use_regex)
    // post-processing with add_special_tokens: each template wraps the ids ($A = -1)
    std::vector<std::vector<int32_t>> templates;
    // decode
    bool byte_level_decoder = true;  // false: no decoder (tokens joined by " ")
    std::vector<std::string> token;  // per id
    std::vector<std::string> bytes;  // per id: what the ByteLevel decoder makes of it
    std::vector<uint8_t> exists, special;
    std::unordered_map<std::string, int32_t> token_ids;  // added tokens first, then the model's
    std::optional<int32_t> bos, eos, pad;

    void encode_into(std::string_view text, std::vector<int32_t>& out) const;
    void split_added(std::string_view s, const AddedTrie& trie, std::vector<int32_t>& out, bool normalized_pass) const;
    void pre_tokenize(std::size_t stage, std::string_view s, std::vector<int32_t>& out) const;
};

}  // namespace tagflow::text
