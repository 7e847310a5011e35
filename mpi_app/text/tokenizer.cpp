// SPDX-License-Identifier: Apache-2.0
// tokenizer: the Tokenizer of a model's Hugging Face files (tokenizer.json, tokenizer_config.json,
// generation_config.json) and the loaders. See tokenizer.hpp; the byte-level one is in
// byte_tokenizer.cpp.
#include "text/tokenizer.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/error.hpp"
#include "text/chat_template.hpp"
#include "text/hf_tokenizer.hpp"
#include "text/utf8.hpp"

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

namespace tagflow::text {
namespace {

void add_unique(std::vector<int32_t>* ids, int32_t id) {
    if (std::find(ids->begin(), ids->end(), id) == ids->end()) ids->push_back(id);
}

/// generation_config.json's eos_token_id (an id or a list of ids); none when the file is absent.
std::vector<int32_t> generation_eos_ids(const fs::path& file, int32_t vocab) {
    std::vector<int32_t> out;
    if (!fs::exists(file)) return out;
    std::ifstream in(file);
    std::stringstream ss;
    ss << in.rdbuf();
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(ss.str());
    } catch (const nlohmann::json::exception& e) {
        throw ConfigError(file.string() + ": not valid JSON (" + e.what() + ")");
    }
    if (!j.is_object()) throw ConfigError(file.string() + ": expected a JSON object");
    const auto it = j.find("eos_token_id");
    if (it == j.end() || it->is_null()) return out;
    const auto take = [&](const nlohmann::json& v) {
        if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= vocab)
            throw ConfigError(file.string() + ": eos_token_id " + v.dump() +
                              " is not a token id of the vocabulary [0, " + std::to_string(vocab) + ")");
        add_unique(&out, static_cast<int32_t>(v.get<int64_t>()));
    };
    if (it->is_array()) {
        for (const auto& v : *it) take(v);
    } else {
        take(*it);
    }
    return out;
}

class HfTextTokenizer final : public Tokenizer {
public:
    HfTextTokenizer(HfTokenizer tok, std::optional<ChatTemplate> chat, std::vector<int32_t> stops, std::string no_chat)
        : tok_(std::move(tok)), chat_(std::move(chat)), stops_(std::move(stops)), no_chat_(std::move(no_chat)) {}

    std::string name() const override { return tok_.path(); }
    int32_t vocab_size() const override { return tok_.vocab_size(); }
    std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const override {
        return tok_.encode(text, add_special_tokens);
    }
    std::string decode(const std::vector<int32_t>& ids, bool skip_special) const override {
        return tok_.decode(ids, skip_special);
    }
    std::string token_bytes(int32_t id) const override { return tok_.token_bytes(id); }
    bool is_special(int32_t id) const override { return tok_.is_special(id); }
    std::vector<int32_t> chat_prompt(const ojson& messages, bool add_generation_prompt, const ojson& tools,
                                     const ojson& extra) const override {
        if (!chat_) throw ConfigError(no_chat_);
        return tok_.encode(chat_->render(messages, add_generation_prompt, tools, extra), /*add_special_tokens=*/false);
    }
    std::vector<int32_t> stop_ids() const override { return stops_; }
    std::vector<int32_t> chat_stop_ids() const override { return stops_; }
    std::optional<int32_t> bos_id() const override { return tok_.bos_id(); }

private:
    HfTokenizer tok_;
    std::optional<ChatTemplate> chat_;
    std::vector<int32_t> stops_;
    std::string no_chat_;  // why chat_prompt() cannot work, when chat_ is empty
};

}  // namespace

bool has_hf_tokenizer(const std::string& model_dir) {
    std::error_code ec;
    return fs::is_regular_file(fs::path(model_dir) / "tokenizer.json", ec);
}

std::shared_ptr<const Tokenizer> load_tokenizer(const std::string& path, const std::string& chat_template_file) {
    HfTokenizer tok = HfTokenizer::load(path);  // ConfigError naming the file
    const fs::path dir = fs::path(tok.path()).parent_path();
    std::vector<int32_t> stops = generation_eos_ids(dir / "generation_config.json", tok.vocab_size());
    if (tok.eos_id()) add_unique(&stops, *tok.eos_id());
    std::optional<ChatTemplate> chat;
    std::string no_chat;
    const fs::path config = dir / "tokenizer_config.json";
    if (!chat_template_file.empty()) {
        chat = ChatTemplate::from_file(chat_template_file, fs::exists(config) ? config.string() : std::string());
    } else if (fs::exists(config)) {
        ojson cfg;
        try {
            std::ifstream in(config);
            std::stringstream ss;
            ss << in.rdbuf();
            cfg = ojson::parse(ss.str());
        } catch (const nlohmann::json::exception& e) {
            throw ConfigError(config.string() + ": not valid JSON (" + e.what() + ")");
        }
        if (cfg.is_object() && cfg.contains("chat_template") && !cfg["chat_template"].is_null())
            chat = ChatTemplate::from_tokenizer_config(config.string());
        else no_chat = config.string() + " has no chat_template: give one with --chat-template FILE";
    } else {
        no_chat = "no tokenizer_config.json beside " + tok.path() +
                  ", so no chat template: give one with --chat-template FILE";
    }
    return std::make_shared<const HfTextTokenizer>(std::move(tok), std::move(chat), std::move(stops),
                                                   std::move(no_chat));
}

std::shared_ptr<const Tokenizer> tokenizer_for_model(const std::string& model_dir,
                                                     const std::string& chat_template_file) {
    if (has_hf_tokenizer(model_dir)) return load_tokenizer(model_dir, chat_template_file);
    if (!chat_template_file.empty())
        throw ConfigError(model_dir +
                          ": no tokenizer.json, so --chat-template cannot be used (the byte-level "
                          "tokenizer has its own ChatML format)");
    return byte_level_tokenizer();
}

}  // namespace tagflow::text
