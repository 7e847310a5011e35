// SPDX-License-Identifier: Apache-2.0
// hf_tokenizer: a Hugging Face `tokenizer.json` tokenizer — byte-level BPE as GPT-2, Llama 3.x
// and Qwen2/2.5/3 use — with ids and decodes equal to Hugging Face `tokenizers` (checked in
// tests/text). Supports the NFC/NFD/NFKC/NFKD normalizers and Sequences of them, the Split and
// ByteLevel pre-tokenizers (and Sequences of them, ByteLevel last), added tokens with their
// lstrip/rstrip/single_word/normalized flags, the ByteLevel/TemplateProcessing post-processors
// and the ByteLevel decoder. Anything else (Unigram, WordPiece, WordLevel, a SentencePiece
// .model, another normalizer or pre-tokenizer) is refused at load with one line naming it.
// Never truncates or pads (a file's truncation/padding settings are ignored).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tagflow::text {

class HfTokenizer {
public:
    /// `path`: a tokenizer.json file, or a model directory holding one. tokenizer_config.json
    /// beside it (when present) names the bos/eos/pad tokens. Throws tagflow::ConfigError with
    /// one line naming the file and the problem.
    static HfTokenizer load(const std::string& path);

    HfTokenizer(HfTokenizer&&) noexcept;
    HfTokenizer& operator=(HfTokenizer&&) noexcept;
    ~HfTokenizer();

    /// Token ids of `text` (valid UTF-8, else tagflow::Error naming the byte offset). With
    /// `add_special_tokens`, the post-processor's template (e.g. a leading BOS) is applied.
    /// Thread-safe.
    std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = false) const;
    /// Text of `ids` (byte-level decode; invalid UTF-8 becomes U+FFFD as in Hugging Face).
    /// An id outside the vocabulary throws tagflow::Error.
    std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = true) const;

    /// The bytes one token stands for (byte-level: possibly part of a UTF-8 character; a streamed
    /// text holds such a tail back). An id outside the vocabulary throws tagflow::Error.
    std::string token_bytes(int32_t id) const;

    /// Largest id + 1, added tokens included.
    int32_t vocab_size() const;
    std::optional<int32_t> token_to_id(std::string_view token) const;
    /// The token's string as in the file ("" for an id that no token has).
    std::string id_to_token(int32_t id) const;
    /// True for the added tokens marked special (they are skipped by decode(ids, true)).
    bool is_special(int32_t id) const;
    std::optional<int32_t> bos_id() const;
    std::optional<int32_t> eos_id() const;
    std::optional<int32_t> pad_id() const;
    /// The tokenizer.json this was loaded from.
    const std::string& path() const;

    struct Impl;

private:
    explicit HfTokenizer(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

}  // namespace tagflow::text
