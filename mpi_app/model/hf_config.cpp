// SPDX-License-Identifier: Apache-2.0
// hf_config: config.json parsing and writing (see hf_config.hpp).
#include "model/hf_config.hpp"

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace tagflow::model {
namespace {

using nlohmann::json;

[[noreturn]] void fail(const std::string& src, const std::string& what) { throw ConfigError(src + ": " + what); }

// The value of `key`, or nullptr when it is absent or null (an error when `required`).
const json* lookup(const json& j, const std::string& src, const char* key, bool required) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) {
        if (required) fail(src, std::string("missing required key '") + key + "'");
        return nullptr;
    }
    return &*it;
}

int64_t get_int(const json& j, const std::string& src, const char* key, bool required, int64_t def) {
    const json* p = lookup(j, src, key, required);
    if (!p) return def;
    const json& v = *p;
    if (!v.is_number_integer()) fail(src, std::string("key '") + key + "' must be an integer, got " + v.dump());
    const int64_t x = v.get<int64_t>();
    if (x <= 0) fail(src, std::string("key '") + key + "' must be positive, got " + v.dump());
    return x;
}

double get_num(const json& j, const std::string& src, const char* key, bool required, double def) {
    const json* p = lookup(j, src, key, required);
    if (!p) return def;
    const json& v = *p;
    if (!v.is_number()) fail(src, std::string("key '") + key + "' must be a number, got " + v.dump());
    const double x = v.get<double>();
    if (!(x > 0)) fail(src, std::string("key '") + key + "' must be positive, got " + v.dump());
    return x;
}

bool get_bool(const json& j, const std::string& src, const char* key, bool def) {
    const json* v = lookup(j, src, key, false);
    if (!v) return def;
    if (!v->is_boolean()) fail(src, std::string("key '") + key + "' must be true/false, got " + v->dump());
    return v->get<bool>();
}

std::string get_str(const json& j, const std::string& src, const char* key, bool required, const std::string& def) {
    const json* v = lookup(j, src, key, required);
    if (!v) return def;
    if (!v->is_string()) fail(src, std::string("key '") + key + "' must be a string, got " + v->dump());
    return v->get<std::string>();
}

// A token id key: absent/null = none, else an integer >= 0 (`list_ok`: or a list of them).
std::vector<int64_t> get_ids(const json& j, const std::string& src, const char* key, bool list_ok) {
    std::vector<int64_t> out;
    const json* v = lookup(j, src, key, false);
    if (!v) return out;
    const auto take = [&](const json& x) {
        if (!x.is_number_integer() || x.get<int64_t>() < 0)
            fail(src, std::string("key '") + key + "' must be a token id" + (list_ok ? " or a list of them" : "") +
                          ", got " + v->dump());
        out.push_back(x.get<int64_t>());
    };
    if (v->is_array() && list_ok) {
        for (const json& x : *v) take(x);
    } else {
        take(*v);
    }
    return out;
}

bool known_model_type(const std::string& t) { return t == "llama" || t == "qwen2" || t == "qwen3"; }

// rope_scaling (or transformers 5's rope_parameters) object `r` -> c's rope_* fields; `key`
// names it in messages. The type is "rope_type", or the older "type".
void parse_rope(const json& r, const std::string& src, const std::string& key, HfConfig& c) {
    if (!r.is_object()) fail(src, "'" + key + "' must be an object or null, got " + r.dump());
    const std::string where = src + ": " + key;
    const json* t = lookup(r, where, "rope_type", false);
    if (t == nullptr) t = lookup(r, where, "type", false);
    if (t == nullptr) fail(src, "'" + key + "' has no 'rope_type'");
    if (!t->is_string()) fail(src, "'" + key + "'.rope_type must be a string, got " + t->dump());
    const std::string type = t->get<std::string>();
    if (type == "default") {
        c.rope_type = "default";
        return;
    }
    if (type != "llama3") fail(src, key + " type '" + type + "' is not supported (default, llama3)");
    c.rope_type = "llama3";
    c.rope_factor = get_num(r, where, "factor", true, 0);
    c.rope_low_freq_factor = get_num(r, where, "low_freq_factor", true, 0);
    c.rope_high_freq_factor = get_num(r, where, "high_freq_factor", true, 0);
    c.rope_original_max_position_embeddings = get_int(r, where, "original_max_position_embeddings", true, 0);
}

}  // namespace

void HfConfig::validate(const std::string& src) const {
    if (!known_model_type(model_type))
        fail(src, "model_type '" + model_type + "' is not supported (llama, qwen2, qwen3)");
    if (hidden_size <= 0 || intermediate_size <= 0 || num_hidden_layers <= 0 || num_attention_heads <= 0 ||
        num_key_value_heads <= 0 || head_dim <= 0 || vocab_size <= 0 || max_position_embeddings <= 0)
        fail(src, "sizes must be positive");
    if (num_attention_heads % num_key_value_heads != 0)
        fail(src, "num_attention_heads (" + std::to_string(num_attention_heads) +
                      ") must be a multiple of num_key_value_heads (" + std::to_string(num_key_value_heads) + ")");
    if (head_dim % 2 != 0) fail(src, "head_dim (" + std::to_string(head_dim) + ") must be even for RoPE");
    if (!(rms_norm_eps > 0) || !(rope_theta > 0)) fail(src, "rms_norm_eps and rope_theta must be positive");
    if (torch_dtype != "float32" && torch_dtype != "float16" && torch_dtype != "bfloat16")
        fail(src, "torch_dtype '" + torch_dtype + "' is not supported (float32, float16, bfloat16)");
    if ((model_type == "qwen3") != qk_norm)
        fail(src, "qk_norm (q_norm/k_norm) goes with model_type qwen3 and only with it");
    if (rope_type == "llama3") {
        if (!(rope_factor > 0) || !(rope_low_freq_factor > 0) || rope_original_max_position_embeddings <= 0)
            fail(src,
                 "rope_scaling (llama3): factor, low_freq_factor and original_max_position_embeddings must be "
                 "positive");
        if (!(rope_high_freq_factor > rope_low_freq_factor))
            fail(src, "rope_scaling (llama3): high_freq_factor (" + std::to_string(rope_high_freq_factor) +
                          ") must be greater than low_freq_factor (" + std::to_string(rope_low_freq_factor) + ")");
    } else if (rope_type != "default") {
        fail(src, "rope_scaling type '" + rope_type + "' is not supported (default, llama3)");
    }
}

HfConfig parse_hf_config(const std::string& text, const std::string& src) {
    json j;
    try {
        j = json::parse(text);
    } catch (const json::exception& e) {
        fail(src, std::string("not valid JSON: ") + e.what());
    }
    if (!j.is_object()) fail(src, "top level must be a JSON object");
    HfConfig c;
    c.model_type = get_str(j, src, "model_type", true, "");
    if (!known_model_type(c.model_type))
        fail(src, "model_type '" + c.model_type + "' is not supported (llama, qwen2, qwen3)");
    c.hidden_size = get_int(j, src, "hidden_size", true, 0);
    c.intermediate_size = get_int(j, src, "intermediate_size", true, 0);
    c.num_hidden_layers = get_int(j, src, "num_hidden_layers", true, 0);
    c.num_attention_heads = get_int(j, src, "num_attention_heads", true, 0);
    c.vocab_size = get_int(j, src, "vocab_size", true, 0);
    c.num_key_value_heads = get_int(j, src, "num_key_value_heads", false, c.num_attention_heads);
    if ((!j.contains("head_dim") || j["head_dim"].is_null()) && c.model_type == "qwen3") {
        c.head_dim = 128;  // Qwen3Config's default, whatever hidden_size / num_attention_heads is
    } else if (!j.contains("head_dim") || j["head_dim"].is_null()) {
        if (c.hidden_size % c.num_attention_heads != 0)
            fail(src, "hidden_size must be a multiple of num_attention_heads when head_dim is absent");
        c.head_dim = c.hidden_size / c.num_attention_heads;
    } else {
        c.head_dim = get_int(j, src, "head_dim", true, 0);
    }
    c.max_position_embeddings = get_int(j, src, "max_position_embeddings", false, 2048);
    c.rms_norm_eps = get_num(j, src, "rms_norm_eps", true, 0);
    c.rope_theta = get_num(j, src, "rope_theta", false, 10000.0);
    c.tie_word_embeddings = get_bool(j, src, "tie_word_embeddings", false);
    c.abs_positions = get_bool(j, src, "tagflow_abs_positions", false);
    c.torch_dtype = get_str(j, src, "torch_dtype", false, "float32");
    const std::string act = get_str(j, src, "hidden_act", false, "silu");
    if (act != "silu") fail(src, "hidden_act '" + act + "' is not supported (silu)");
    // transformers 5 writes "rope_parameters" (rope_type, rope_theta, the scaling keys) where
    // older versions wrote "rope_theta" + "rope_scaling"; either is read, the newer first.
    if (const json* rp = lookup(j, src, "rope_parameters", false)) {
        parse_rope(*rp, src, "rope_parameters", c);
        c.rope_theta = get_num(*rp, src + ": rope_parameters", "rope_theta", false, c.rope_theta);
    } else if (const json* rs = lookup(j, src, "rope_scaling", false)) {
        parse_rope(*rs, src, "rope_scaling", c);
    }
    if (get_bool(j, src, "mlp_bias", false)) fail(src, "mlp_bias=true is not supported");
    if (get_bool(j, src, "use_sliding_window", false)) fail(src, "use_sliding_window=true is not supported");
    if (const json* lt = lookup(j, src, "layer_types", false)) {
        if (!lt->is_array()) fail(src, "key 'layer_types' must be a list, got " + lt->dump());
        for (const json& t : *lt)
            if (t != "full_attention")
                fail(src, "layer_types entry " + t.dump() + " is not supported (full_attention only)");
    }
    if (c.model_type == "qwen2") {
        c.qkv_bias = true;  // Qwen2Attention hard-codes bias on q/k/v, none on o
        c.o_bias = false;
    } else {  // LlamaAttention and Qwen3Attention: attention_bias on all four projections
        c.qkv_bias = c.o_bias = get_bool(j, src, "attention_bias", false);
    }
    c.qk_norm = c.model_type == "qwen3";
    if (auto b = get_ids(j, src, "bos_token_id", false); !b.empty()) c.bos_token_id = b[0];
    c.eos_token_ids = get_ids(j, src, "eos_token_id", true);
    if (auto p = get_ids(j, src, "pad_token_id", false); !p.empty()) c.pad_token_id = p[0];
    c.validate(src);
    return c;
}

HfConfig load_hf_config(const std::string& path) {
    std::ifstream in(path);
    if (!in) throw ConfigError(path + ": cannot open");
    std::stringstream ss;
    ss << in.rdbuf();
    return parse_hf_config(ss.str(), path);
}

std::string to_hf_json(const HfConfig& c) {
    json j;
    j["architectures"] = {c.model_type == "qwen2"   ? "Qwen2ForCausalLM"
                          : c.model_type == "qwen3" ? "Qwen3ForCausalLM"
                                                    : "LlamaForCausalLM"};
    j["model_type"] = c.model_type;
    j["hidden_size"] = c.hidden_size;
    j["intermediate_size"] = c.intermediate_size;
    j["num_hidden_layers"] = c.num_hidden_layers;
    j["num_attention_heads"] = c.num_attention_heads;
    j["num_key_value_heads"] = c.num_key_value_heads;
    j["head_dim"] = c.head_dim;
    j["vocab_size"] = c.vocab_size;
    j["max_position_embeddings"] = c.max_position_embeddings;
    j["rms_norm_eps"] = c.rms_norm_eps;
    j["rope_theta"] = c.rope_theta;
    if (c.rope_type == "llama3") {
        j["rope_scaling"] = {{"rope_type", "llama3"},
                             {"factor", c.rope_factor},
                             {"low_freq_factor", c.rope_low_freq_factor},
                             {"high_freq_factor", c.rope_high_freq_factor},
                             {"original_max_position_embeddings", c.rope_original_max_position_embeddings}};
    } else {
        j["rope_scaling"] = nullptr;
    }
    j["tie_word_embeddings"] = c.tie_word_embeddings;
    if (c.abs_positions) j["tagflow_abs_positions"] = true;  // only when used: plain HF configs stay plain
    j["torch_dtype"] = c.torch_dtype;
    j["hidden_act"] = "silu";
    if (c.model_type != "qwen2") j["attention_bias"] = c.qkv_bias;  // qwen2 has no such key (always q/k/v bias)
    if (c.bos_token_id) j["bos_token_id"] = *c.bos_token_id;
    if (c.eos_token_ids.size() == 1) j["eos_token_id"] = c.eos_token_ids[0];
    if (c.eos_token_ids.size() > 1) j["eos_token_id"] = c.eos_token_ids;
    if (c.pad_token_id) j["pad_token_id"] = *c.pad_token_id;
    return j.dump(2) + "\n";
}

}  // namespace tagflow::model
