// SPDX-License-Identifier: Apache-2.0
// chat_template: a model's chat template, rendered as Hugging Face transformers'
// apply_chat_template(tokenize=False) renders it. Loaded from tokenizer_config.json
// (`chat_template` as a string, or the list of {name, template} where "default" is used and
// "tool_use" when tools are given) or from a template file (`--chat-template FILE`). The
// special tokens of the config (bos_token, eos_token, ...: plain strings or AddedToken dicts
// {"content": ...}) are template variables, as in transformers.
// Does NOT tokenize, add a BOS itself, or support continue_final_message / documents (passed
// as None). Errors are one line naming the file: TemplateError (a ConfigError).
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "text/jinja.hpp"

namespace tagflow::text {

/// Throws TemplateError("<what> nested more than <max_depth> levels") for deeper arrays/objects;
/// iterative, so it is safe on any input (copying or converting a deeper value would recurse).
void check_json_depth(const nlohmann::ordered_json& j, std::size_t max_depth, const std::string& what);

/// One conversation to render, as `tagflow tokenize --chat` and chat_render read it: a JSON object
/// {"messages": [...], "add_generation_prompt": bool (default false), "tools": [...]?}; any other
/// member is an extra template variable (e.g. enable_thinking). Throws ConfigError on a bad shape.
struct ChatRequest {
    nlohmann::ordered_json messages;
    bool add_generation_prompt = false;
    nlohmann::ordered_json tools = nullptr;
    nlohmann::ordered_json extra = nlohmann::ordered_json::object();
};
ChatRequest parse_chat_request(const nlohmann::ordered_json& line);

class ChatTemplate {
public:
    /// `chat_template` and the special tokens of a tokenizer_config.json (the file, a model
    /// directory, or a tokenizer.json beside it).
    static ChatTemplate from_tokenizer_config(const std::string& path);
    /// The template text of `template_path`; special tokens from `config_path` when not empty.
    static ChatTemplate from_file(const std::string& template_path, const std::string& config_path = "");
    /// A template given as text; `special_tokens` is a JSON object of name -> string.
    static ChatTemplate from_string(const std::string& source, nlohmann::ordered_json special_tokens = {},
                                    const std::string& origin = "chat template");

    /// The prompt for `messages` (a list of {role, content, ...} objects). `tools` (a list of
    /// JSON schemas, or null) and the members of `extra` (e.g. enable_thinking) are variables too.
    std::string render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                       const nlohmann::ordered_json& tools = nullptr,
                       const nlohmann::ordered_json& extra = nlohmann::ordered_json::object()) const;
    /// Same, with a plain nlohmann::json (object keys lose their order: tojson output sorts them).
    std::string render(const nlohmann::json& messages, bool add_generation_prompt,
                       const nlohmann::json& tools = nullptr,
                       const nlohmann::json& extra = nlohmann::json::object()) const;

    /// Template names ("default" for a single template).
    std::vector<std::string> names() const;

private:
    std::vector<std::pair<std::string, std::shared_ptr<JinjaTemplate>>> templates_;
    nlohmann::ordered_json special_ = nlohmann::ordered_json::object();
    std::string origin_;
};

}  // namespace tagflow::text
