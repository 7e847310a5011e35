// SPDX-License-Identifier: Apache-2.0
// pretrained_check: header-only validation of a checkpoint directory (see pretrained_check.hpp).
#include "model/pretrained_check.hpp"

#include <filesystem>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "model/safetensors.hpp"

namespace tagflow::model {
namespace {

namespace fs = std::filesystem;

std::string shape_text(const std::vector<int64_t>& s) {
    std::string t = "[";
    for (size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
    return t + "]";
}

bool ends_with(const std::string& s, const std::string& tail) {
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// The first line of an exception's message (safetensors messages are one line already).
std::string first_line(const std::exception& e) {
    std::string w = e.what();
    return w.substr(0, w.find('\n'));
}

}  // namespace

std::map<std::string, std::vector<int64_t>> llama_param_shapes(const HfConfig& c) {
    const int64_t H = c.hidden_size, q = c.num_attention_heads * c.head_dim, kv = c.num_key_value_heads * c.head_dim;
    std::map<std::string, std::vector<int64_t>> s;
    s["model.embed_tokens.weight"] = {c.vocab_size, H};
    if (c.abs_positions) s["model.embed_positions.weight"] = {c.max_position_embeddings, H};
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".";
        s[p + "input_layernorm.weight"] = {H};
        s[p + "post_attention_layernorm.weight"] = {H};
        s[p + "self_attn.q_proj.weight"] = {q, H};
        s[p + "self_attn.k_proj.weight"] = {kv, H};
        s[p + "self_attn.v_proj.weight"] = {kv, H};
        s[p + "self_attn.o_proj.weight"] = {H, q};
        if (c.qkv_bias) {
            s[p + "self_attn.q_proj.bias"] = {q};
            s[p + "self_attn.k_proj.bias"] = {kv};
            s[p + "self_attn.v_proj.bias"] = {kv};
        }
        if (c.o_bias) s[p + "self_attn.o_proj.bias"] = {H};
        if (c.qk_norm) {
            s[p + "self_attn.q_norm.weight"] = {c.head_dim};
            s[p + "self_attn.k_norm.weight"] = {c.head_dim};
        }
        s[p + "mlp.gate_proj.weight"] = {c.intermediate_size, H};
        s[p + "mlp.up_proj.weight"] = {c.intermediate_size, H};
        s[p + "mlp.down_proj.weight"] = {H, c.intermediate_size};
    }
    s["model.norm.weight"] = {H};
    if (!c.tie_word_embeddings) s["lm_head.weight"] = {c.vocab_size, H};
    return s;
}

HfConfig check_pretrained(const std::string& dir_str, const std::string& option) {
    const std::string who = option + " " + dir_str + ": ";
    const fs::path dir(dir_str);
    HfConfig cfg;
    try {
        cfg = load_hf_config((dir / "config.json").string());
        cfg.validate((dir / "config.json").string());
    } catch (const Error& e) {
        throw ConfigError(who + first_line(e));
    }
    const auto want = llama_param_shapes(cfg);

    // tensor -> the file it is in, and its header entry
    std::map<std::string, std::string> where;
    std::map<std::string, st::TensorInfo> found;
    auto read_header = [&](const std::string& file) {
        std::error_code ec;
        if (!fs::is_regular_file(dir / file, ec))
            throw ConfigError(who + (dir / file).string() + ": missing or not a regular file");
        try {
            st::Reader r((dir / file).string());
            for (const auto& t : r.header().tensors) {
                if (found.count(t.name))
                    throw ConfigError(who + (dir / file).string() + ": tensor '" + t.name + "' also in " +
                                      where[t.name]);
                found[t.name] = t;
                where[t.name] = file;
            }
        } catch (const ConfigError&) {
            throw;
        } catch (const Error& e) {
            throw ConfigError(who + first_line(e));
        }
    };

    const fs::path index = dir / "model.safetensors.index.json";
    std::error_code ec;
    if (fs::exists(index, ec)) {
        nlohmann::json j;
        try {
            std::ifstream in(index);
            j = nlohmann::json::parse(in);
        } catch (const nlohmann::json::exception& e) {
            throw ConfigError(who + index.string() + ": not valid JSON: " + first_line(e));
        }
        if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
            throw ConfigError(who + index.string() + ": missing object 'weight_map'");
        std::map<std::string, std::string> listed;
        std::set<std::string> files;
        for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
            if (!it.value().is_string())
                throw ConfigError(who + index.string() + ": weight_map['" + it.key() + "'] is not a string");
            const std::string f = it.value().get<std::string>();
            if (f.empty() || f.find('/') != std::string::npos || f.find("..") != std::string::npos)
                throw ConfigError(who + index.string() + ": shard name '" + f + "' must be a plain file name");
            listed[it.key()] = f;
            files.insert(f);
        }
        for (const auto& f : files) read_header(f);
        for (const auto& [name, f] : where) {
            auto l = listed.find(name);
            if (l == listed.end() || l->second != f)
                throw ConfigError(who + index.string() + ": tensor '" + name + "' found in " + f + " but the index " +
                                  (l == listed.end() ? "does not list it" : "places it in " + l->second));
        }
        for (const auto& [name, f] : listed)
            if (!found.count(name))
                throw ConfigError(who + index.string() + ": tensor '" + name + "' not found in " + f);
    } else if (fs::exists(dir / "model.safetensors", ec)) {
        read_header("model.safetensors");
    } else {
        throw ConfigError(who + "neither model.safetensors nor model.safetensors.index.json found");
    }

    // Names and shapes, by the rules of LlamaModelImpl::load_hf_state_dict (strict).
    for (const auto& [name, t] : found) {
        if (ends_with(name, "rotary_emb.inv_freq")) continue;
        if (name == "lm_head.weight" && cfg.tie_word_embeddings) continue;
        auto w = want.find(name);
        const std::string file = (dir / where[name]).string();
        if (w == want.end())
            throw ConfigError(who + file + ": unexpected tensor '" + name +
                              "' (not a parameter of the model config.json describes)");
        if (t.shape != w->second)
            throw ConfigError(who + file + ": tensor '" + name + "' has shape " + shape_text(t.shape) +
                              ", config.json needs " + shape_text(w->second));
    }
    for (const auto& [name, shape] : want)
        if (!found.count(name))
            throw ConfigError(who + "no tensor '" + name + "' " + shape_text(shape) + " in the safetensors of " +
                              dir_str +
                              (name == "lm_head.weight" ? " (config.json has tie_word_embeddings=false)" : ""));
    return cfg;
}

}  // namespace tagflow::model
