// SPDX-License-Identifier: Apache-2.0
// tokenizer: the byte-level tokenizer of the gateway and the toy tasks. Ids 0..255 are the
// bytes of the UTF-8 text; a few special tokens follow (<|bos|>, <|eos|>, <|pad|>,
// <|im_start|>, <|im_end|>), so vocab_size() is 261 and a model needs at least that many rows.
// encode() never produces a special token from text (a prompt containing the characters
// "<|im_end|>" stays bytes, so users cannot inject control tokens); decode() writes special
// tokens as their names or skips them. Also the chat template the gateway renders messages with.
// Torch-free and MPI-free. Does not load Hugging Face BPE tokenizers (yet).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tagflow::model {

class Tokenizer {
public:
    static constexpr int32_t kBos = 256;
    static constexpr int32_t kEos = 257;
    static constexpr int32_t kPad = 258;
    static constexpr int32_t kImStart = 259;
    static constexpr int32_t kImEnd = 260;

    /// The byte-level tokenizer (the only kind so far).
    Tokenizer() = default;

    int32_t vocab_size() const { return 261; }
    /// The UTF-8 bytes of `text`, one id each (no special tokens, no BOS).
    std::vector<int32_t> encode(std::string_view text) const;
    /// Bytes of the ids; special tokens as their names ("<|eos|>") unless `skip_special`.
    /// Throws tagflow::Error on an id outside [0, vocab_size()).
    std::string decode(const std::vector<int32_t>& ids, bool skip_special = true) const;
    /// One token's text (bytes may be an incomplete UTF-8 sequence).
    std::string token_text(int32_t id) const;
    bool is_special(int32_t id) const { return id >= 256 && id < vocab_size(); }
    /// "<|eos|>" etc.; -1 for an unknown name.
    int32_t special_id(std::string_view name) const;

    /// Chat template (ChatML with special tokens): for each message
    ///   <|im_start|> role "\n" content <|im_end|> "\n"
    /// then <|im_start|> "assistant\n" (the generation prompt). Roles and contents are
    /// encoded as bytes; <|im_start|>/<|im_end|> are the special ids.
    std::vector<int32_t> apply_chat_template(const std::vector<std::pair<std::string, std::string>>& messages) const;
    /// Stop ids of a chat turn: <|im_end|> and <|eos|>.
    std::vector<int32_t> chat_stop_ids() const { return {kImEnd, kEos}; }
};

/// Length of the longest prefix of `bytes` that does not end inside a UTF-8 sequence (a
/// streamed text holds back the tail until its sequence is complete). Invalid bytes count
/// as complete (they are replaced later), so at most 3 bytes are ever held back.
std::size_t utf8_complete_prefix(std::string_view bytes);

}  // namespace tagflow::model
