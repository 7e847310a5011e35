// SPDX-License-Identifier: Apache-2.0
// chat_template: loading tokenizer_config.json's chat template(s) and rendering a conversation
// with the variables transformers passes (messages, tools, documents=None,
// add_generation_prompt, the special tokens map, extra keyword arguments).
#include "text/chat_template.hpp"

#include <fstream>
#include <sstream>
#include <sys/stat.h>

namespace tagflow::text {
namespace {

std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw TemplateError(path + ": cannot open");
    std::ostringstream ss;
    ss << in.rdbuf();
    if (in.bad()) throw TemplateError(path + ": read error");
    return ss.str();
}

// A model directory or a tokenizer.json name the tokenizer_config.json beside them.
std::string config_path_of(const std::string& path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return path + "/tokenizer_config.json";
    const std::string tj = "tokenizer.json";
    if (path.size() >= tj.size() && path.compare(path.size() - tj.size(), tj.size(), tj) == 0 &&
        (path.size() == tj.size() || path[path.size() - tj.size() - 1] == '/'))
        return path.substr(0, path.size() - tj.size()) + "tokenizer_config.json";
    return path;
}

nlohmann::ordered_json parse_config(const std::string& path) {
    nlohmann::ordered_json cfg;
    try {
        cfg = nlohmann::ordered_json::parse(read_file(path));
    } catch (const nlohmann::json::exception& e) {
        throw TemplateError(path + ": not valid JSON: " + e.what());
    }
    if (!cfg.is_object()) throw TemplateError(path + ": expected a JSON object");
    return cfg;
}

// transformers' special_tokens_map: the special-token attributes that are set, as strings.
nlohmann::ordered_json special_tokens(const nlohmann::ordered_json& cfg, const std::string& path) {
    auto token = [&](const nlohmann::ordered_json& v, const std::string& key) -> nlohmann::ordered_json {
        if (v.is_string()) return v;
        if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"];
        throw TemplateError(path + ": " + key + " must be a string or {\"content\": string}");
    };
    nlohmann::ordered_json out = nlohmann::ordered_json::object();
    for (const char* key :
         {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}) {
        auto it = cfg.find(key);
        if (it != cfg.end() && !it->is_null()) out[key] = token(*it, key);
    }
    auto it = cfg.find("additional_special_tokens");
    if (it != cfg.end() && it->is_array()) {
        nlohmann::ordered_json list = nlohmann::ordered_json::array();
        for (const auto& t : *it) list.push_back(token(t, "additional_special_tokens"));
        out["additional_special_tokens"] = list;
    }
    return out;
}

std::shared_ptr<JinjaTemplate> compile(const std::string& source, const std::string& origin) {
    try {
        return std::make_shared<JinjaTemplate>(source);
    } catch (const TemplateError& e) {
        throw TemplateError(origin + ": " + e.what());
    }
}

}  // namespace

void check_json_depth(const nlohmann::ordered_json& j, std::size_t max_depth, const std::string& what) {
    std::vector<std::pair<const nlohmann::ordered_json*, std::size_t>> stack{{&j, 0}};
    while (!stack.empty()) {
        auto [v, depth] = stack.back();
        stack.pop_back();
        if (!v->is_structured()) continue;
        if (depth >= max_depth)
            throw TemplateError(what + " nested more than " + std::to_string(max_depth) + " levels");
        for (const auto& x : *v) stack.emplace_back(&x, depth + 1);
    }
}

ChatRequest parse_chat_request(const nlohmann::ordered_json& in) {
    check_json_depth(in, 512, "JSON value");
    if (!in.is_object() || !in.contains("messages")) throw ConfigError("expected an object with \"messages\"");
    ChatRequest r;
    for (auto it = in.begin(); it != in.end(); ++it) {
        if (it.key() == "messages") {
            r.messages = *it;
        } else if (it.key() == "add_generation_prompt") {
            if (!it->is_boolean()) throw ConfigError("add_generation_prompt must be true or false");
            r.add_generation_prompt = it->get<bool>();
        } else if (it.key() == "tools") {
            r.tools = *it;
        } else {
            r.extra[it.key()] = *it;
        }
    }
    return r;
}

ChatTemplate ChatTemplate::from_tokenizer_config(const std::string& path_in) {
    std::string path = config_path_of(path_in);
    nlohmann::ordered_json cfg = parse_config(path);
    ChatTemplate t;
    t.origin_ = path;
    t.special_ = special_tokens(cfg, path);
    auto it = cfg.find("chat_template");
    if (it == cfg.end() || it->is_null())
        throw TemplateError(path + ": no chat_template (give one with --chat-template FILE)");
    if (it->is_string()) {
        t.templates_.emplace_back("default", compile(it->get<std::string>(), path));
    } else if (it->is_array()) {
        for (const auto& e : *it) {
            if (!e.is_object() || !e.contains("name") || !e["name"].is_string() || !e.contains("template") ||
                !e["template"].is_string())
                throw TemplateError(path +
                                    ": chat_template list entries must be {\"name\": string, \"template\": string}");
            std::string name = e["name"].get<std::string>();
            t.templates_.emplace_back(name,
                                      compile(e["template"].get<std::string>(), path + " (template '" + name + "')"));
        }
    } else {
        throw TemplateError(path + ": chat_template must be a string or a list of {name, template}");
    }
    return t;
}

ChatTemplate ChatTemplate::from_file(const std::string& template_path, const std::string& config_path) {
    nlohmann::ordered_json special = nlohmann::ordered_json::object();
    if (!config_path.empty()) {
        std::string cfg_path = config_path_of(config_path);
        special = special_tokens(parse_config(cfg_path), cfg_path);
    }
    return from_string(read_file(template_path), special, template_path);
}

ChatTemplate ChatTemplate::from_string(const std::string& source, nlohmann::ordered_json special_tokens,
                                       const std::string& origin) {
    ChatTemplate t;
    t.origin_ = origin;
    t.special_ = special_tokens.is_object() ? std::move(special_tokens) : nlohmann::ordered_json::object();
    t.templates_.emplace_back("default", compile(source, origin));
    return t;
}

std::vector<std::string> ChatTemplate::names() const {
    std::vector<std::string> out;
    for (const auto& kv : templates_) out.push_back(kv.first);
    return out;
}

std::string ChatTemplate::render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                 const nlohmann::ordered_json& tools, const nlohmann::ordered_json& extra) const {
    check_json_depth(messages, 256, "chat template: messages");
    check_json_depth(tools, 256, "chat template: tools");
    check_json_depth(extra, 256, "chat template: extra variables");
    if (!messages.is_array())
        throw TemplateError("chat template: messages must be a list, got " + std::string(messages.type_name()));
    for (std::size_t k = 0; k < messages.size(); ++k)
        if (!messages[k].is_object())
            throw TemplateError("chat template: messages[" + std::to_string(k) + "] must be an object, got " +
                                messages[k].type_name());
    if (!tools.is_null() && !tools.is_array())
        throw TemplateError("chat template: tools must be a list, got " + std::string(tools.type_name()));
    if (!extra.is_null() && !extra.is_object()) throw TemplateError("chat template: extra variables must be an object");
    const JinjaTemplate* chosen = nullptr;
    std::string chosen_name;
    if (templates_.size() == 1 && templates_[0].first == "default") {
        chosen = templates_[0].second.get();
        chosen_name = "default";
    } else {
        for (const auto& kv : templates_)
            if (!tools.is_null() && kv.first == "tool_use") chosen = kv.second.get(), chosen_name = kv.first;
        if (!chosen)
            for (const auto& kv : templates_)
                if (kv.first == "default") chosen = kv.second.get(), chosen_name = kv.first;
        if (!chosen) throw TemplateError(origin_ + ": several chat templates and none is named 'default'");
    }
    nlohmann::ordered_json vars = nlohmann::ordered_json::object();
    vars["messages"] = messages;
    vars["tools"] = tools;
    vars["documents"] = nullptr;
    vars["add_generation_prompt"] = add_generation_prompt;
    for (auto it = special_.begin(); it != special_.end(); ++it) vars[it.key()] = it.value();
    if (extra.is_object())
        for (auto it = extra.begin(); it != extra.end(); ++it) {
            const std::string& k = it.key();
            if (k == "messages" || k == "tools" || k == "documents" || k == "add_generation_prompt")
                throw TemplateError("chat template: extra variable '" + k + "' clashes with a fixed one");
            vars[k] = it.value();
        }
    try {
        return chosen->render(vars);
    } catch (const TemplateError& e) {
        std::string where = templates_.size() > 1 ? origin_ + " (template '" + chosen_name + "')" : origin_;
        throw TemplateError(where + ": " + e.what());
    }
}

std::string ChatTemplate::render(const nlohmann::json& messages, bool add_generation_prompt,
                                 const nlohmann::json& tools, const nlohmann::json& extra) const {
    return render(nlohmann::ordered_json::parse(messages.dump()), add_generation_prompt,
                  nlohmann::ordered_json::parse(tools.dump()), nlohmann::ordered_json::parse(extra.dump()));
}

}  // namespace tagflow::text
