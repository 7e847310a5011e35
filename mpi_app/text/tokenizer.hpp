// SPDX-License-Identifier: Apache-2.0
// tokenizer: what the rest of tagflow needs of a tokenizer — text to ids, ids to text, a chat
// prompt for a conversation, the ids that end a generation — behind one interface with two
// implementations: a model's own files (tokenizer.json through HfTokenizer, the chat template of
// tokenizer_config.json through ChatTemplate, the stop ids of generation_config.json), and the
// 261-id byte-level tokenizer of the built-in tasks (model::Tokenizer, ChatML with its special
// ids) for models that have no tokenizer.json. Loading errors are one line naming the file
// (tagflow::ConfigError). Thread-safe after construction. No MPI, no LibTorch.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace tagflow::text {

class Tokenizer {
public:
    virtual ~Tokenizer() = default;

    /// "byte-level", or the tokenizer.json path.
    virtual std::string name() const = 0;
    virtual int32_t vocab_size() const = 0;
    /// Ids of `text` (valid UTF-8, else tagflow::Error). `add_special_tokens`: what Hugging Face's
    /// `tokenizer(text)` adds (e.g. Llama 3's BOS); the byte-level tokenizer adds nothing.
    virtual std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = false) const = 0;
    /// Valid UTF-8 text of `ids`; special tokens skipped or written as their names.
    virtual std::string decode(const std::vector<int32_t>& ids, bool skip_special = true) const = 0;
    /// The bytes of one token (possibly part of a UTF-8 character).
    virtual std::string token_bytes(int32_t id) const = 0;
    virtual bool is_special(int32_t id) const = 0;
    /// The ids of the prompt for `messages` ([{role, content, ...}]) as the model's chat template
    /// renders it (Hugging Face: apply_chat_template, then encoded with special tokens matched,
    /// none added). tagflow::ConfigError for a conversation the template refuses.
    virtual std::vector<int32_t> chat_prompt(
        const nlohmann::ordered_json& messages, bool add_generation_prompt = true,
        const nlohmann::ordered_json& tools = nullptr,
        const nlohmann::ordered_json& extra = nlohmann::ordered_json::object()) const = 0;
    /// Ids that end a completion / an assistant turn (generation_config.json's eos_token_id and the
    /// tokenizer's eos token; byte-level: <|eos|>, and <|im_end|> for chat).
    virtual std::vector<int32_t> stop_ids() const = 0;
    virtual std::vector<int32_t> chat_stop_ids() const = 0;
    /// The BOS id, if the tokenizer has one.
    virtual std::optional<int32_t> bos_id() const = 0;
};

/// The byte-level tokenizer (one shared instance).
std::shared_ptr<const Tokenizer> byte_level_tokenizer();

/// True when `model_dir` holds a tokenizer.json.
bool has_hf_tokenizer(const std::string& model_dir);

/// A model's tokenizer: `path` is a model directory or a tokenizer.json; tokenizer_config.json and
/// generation_config.json are read from beside it when present. `chat_template_file` (not empty)
/// replaces tokenizer_config.json's chat template. A tokenizer without a chat template still loads;
/// chat_prompt() then throws a ConfigError saying to give one (--chat-template FILE).
std::shared_ptr<const Tokenizer> load_tokenizer(const std::string& path, const std::string& chat_template_file = "");

/// The tokenizer for a model directory: its own (load_tokenizer) when it holds a tokenizer.json,
/// else the byte-level one (tagflow's models of the built-in tasks).
std::shared_ptr<const Tokenizer> tokenizer_for_model(const std::string& model_dir,
                                                     const std::string& chat_template_file = "");

}  // namespace tagflow::text
