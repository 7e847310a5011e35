// SPDX-License-Identifier: Apache-2.0
// tokenizer: the two Tokenizer implementations (a model's Hugging Face files; the byte-level
// tokenizer) and the loaders. See tokenizer.hpp.
#include "text/tokenizer.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/error.hpp"
#include "model/tokenizer.hpp"
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
            throw ConfigError(file.string() + ": eos_token_id " + v.dump() + " is not a token id of the vocabulary [0, " +
                              std::to_string(vocab) + ")");
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

class ByteTextTokenizer final : public Tokenizer {
public:
    std::string name() const override { return "byte-level"; }
    int32_t vocab_size() const override { return tok_.vocab_size(); }
    std::vector<int32_t> encode(std::string_view text, bool) const override {
        std::size_t off = 0;
        if (!utf8_valid(text, &off)) throw Error("text is not valid UTF-8 (byte offset " + std::to_string(off) + ")");
        return tok_.encode(text);
    }
    std::string decode(const std::vector<int32_t>& ids, bool skip_special) const override {
        return utf8_lossy(tok_.decode(ids, skip_special));
    }
    std::string token_bytes(int32_t id) const override { return tok_.token_text(id); }
    bool is_special(int32_t id) const override { return tok_.is_special(id); }
    /// ChatML with the special ids: <|im_start|>role\ncontent<|im_end|>\n per message (content a
    /// string or null), then <|im_start|>assistant\n when add_generation_prompt.
    std::vector<int32_t> chat_prompt(const ojson& messages, bool add_generation_prompt, const ojson&,
                                     const ojson&) const override {
        if (!messages.is_array()) throw ConfigError("messages must be a list of {role, content} objects");
        std::vector<std::pair<std::string, std::string>> msgs;
        for (const auto& m : messages) {
            if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
                throw ConfigError("each message must be an object with a string 'role'");
            const auto c = m.find("content");
            if (c != m.end() && !c->is_null() && !c->is_string())
                throw ConfigError("the byte-level chat format takes string contents only");
            msgs.emplace_back(m["role"].get<std::string>(), c == m.end() || c->is_null() ? "" : c->get<std::string>());
        }
        for (const auto& [role, content] : msgs) {
            std::size_t off = 0;
            if (!utf8_valid(role, &off) || !utf8_valid(content, &off))
                throw Error("message text is not valid UTF-8 (byte offset " + std::to_string(off) + ")");
        }
        std::vector<int32_t> ids = tok_.apply_chat_template(msgs);  // ends with the generation prompt
        if (!add_generation_prompt) ids.resize(ids.size() - (1 + std::string("assistant\n").size()));
        return ids;
    }
    std::vector<int32_t> stop_ids() const override { return {model::Tokenizer::kEos}; }
    std::vector<int32_t> chat_stop_ids() const override { return tok_.chat_stop_ids(); }
    std::optional<int32_t> bos_id() const override { return model::Tokenizer::kBos; }

private:
    model::Tokenizer tok_;
};

}  // namespace

std::shared_ptr<const Tokenizer> byte_level_tokenizer() {
    static const auto tok = std::make_shared<const ByteTextTokenizer>();
    return tok;
}

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
        else
            no_chat = config.string() + " has no chat_template: give one with --chat-template FILE";
    } else {
        no_chat = "no tokenizer_config.json beside " + tok.path() + ", so no chat template: give one with --chat-template FILE";
    }
    return std::make_shared<const HfTextTokenizer>(std::move(tok), std::move(chat), std::move(stops), std::move(no_chat));
}

std::shared_ptr<const Tokenizer> tokenizer_for_model(const std::string& model_dir, const std::string& chat_template_file) {
    if (has_hf_tokenizer(model_dir)) return load_tokenizer(model_dir, chat_template_file);
    if (!chat_template_file.empty())
        throw ConfigError(model_dir + ": no tokenizer.json, so --chat-template cannot be used (the byte-level "
                          "tokenizer has its own ChatML format)");
    return byte_level_tokenizer();
}

}  // namespace tagflow::text
