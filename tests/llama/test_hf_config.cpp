// SPDX-License-Identifier: Apache-2.0
// test_hf_config (Serial.llama.HfConfig.*): config.json parsing (qwen2, llama defaults, qwen3 keys,
// llama3 rope_scaling in its three spellings), each refusal in one line naming the file, and the
// round trip through the config.json tagflow writes. No model is built here (test_llama.cpp).
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "fixtures.hpp"
#include "model/hf_config.hpp"

using namespace tagflow::model;
using fixtures::qwen2_config;
using fixtures::qwen3_config;

namespace {

const char* kQwenJson = R"({"model_type":"qwen2","hidden_size":64,"intermediate_size":128,
  "num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"vocab_size":97,
  "rms_norm_eps":1e-6,"rope_theta":1000000.0,"max_position_embeddings":128,
  "tie_word_embeddings":false,"torch_dtype":"bfloat16","hidden_act":"silu"})";

}  // namespace

// ---------------- config.json ----------------

TEST(HfConfig, ParsesQwen2) {
    const HfConfig c = parse_hf_config(kQwenJson);
    EXPECT_EQ(c.model_type, "qwen2");
    EXPECT_EQ(c.head_dim, 16);
    EXPECT_EQ(c.num_key_value_heads, 2);
    EXPECT_TRUE(c.qkv_bias);
    EXPECT_FALSE(c.o_bias);
    EXPECT_DOUBLE_EQ(c.rope_theta, 1e6);
    EXPECT_EQ(c.torch_dtype, "bfloat16");
    const HfConfig back = parse_hf_config(to_hf_json(c));
    EXPECT_EQ(back.hidden_size, c.hidden_size);
    EXPECT_EQ(back.num_key_value_heads, c.num_key_value_heads);
    EXPECT_DOUBLE_EQ(back.rms_norm_eps, c.rms_norm_eps);
    EXPECT_EQ(back.qkv_bias, c.qkv_bias);
}

TEST(HfConfig, DefaultsForLlama) {
    const HfConfig c = parse_hf_config(R"({"model_type":"llama","hidden_size":32,"intermediate_size":64,
        "num_hidden_layers":1,"num_attention_heads":4,"vocab_size":10,"rms_norm_eps":1e-5})");
    EXPECT_EQ(c.num_key_value_heads, 4);
    EXPECT_EQ(c.head_dim, 8);
    EXPECT_DOUBLE_EQ(c.rope_theta, 10000.0);
    EXPECT_FALSE(c.tie_word_embeddings);
    EXPECT_FALSE(c.qkv_bias);
}

TEST(HfConfig, Errors) {
    auto with = [](const std::string& key, const nlohmann::json& v) {
        nlohmann::json j = nlohmann::json::parse(kQwenJson);
        if (v.is_discarded()) j.erase(key);
        else j[key] = v;
        return j.dump();
    };
    const nlohmann::json erase = nlohmann::json(nlohmann::json::value_t::discarded);
    struct Case {
        std::string text, needle;
    };
    const std::vector<Case> cases = {
        {"{not json", "not valid JSON"},
        {"[1]", "JSON object"},
        {with("hidden_size", erase), "missing required key 'hidden_size'"},
        {with("vocab_size", erase), "missing required key 'vocab_size'"},
        {with("rms_norm_eps", erase), "missing required key 'rms_norm_eps'"},
        {with("model_type", erase), "missing required key 'model_type'"},
        {with("hidden_size", "64"), "'hidden_size' must be an integer"},
        {with("num_hidden_layers", 0), "'num_hidden_layers' must be positive"},
        {with("rms_norm_eps", -1.0), "'rms_norm_eps' must be positive"},
        {with("tie_word_embeddings", "yes"), "'tie_word_embeddings' must be true/false"},
        {with("num_key_value_heads", 3), "multiple of num_key_value_heads"},
        {with("model_type", "gpt2"), "model_type 'gpt2' is not supported"},
        {with("head_dim", 15), "must be even"},
        {with("rope_scaling", nlohmann::json{{"type", "linear"}}), "rope_scaling"},
        {with("hidden_act", "gelu"), "hidden_act"},
        {with("torch_dtype", "int8"), "torch_dtype"},
    };
    for (const auto& c : cases) {
        try {
            parse_hf_config(c.text, "cfg.json");
            ADD_FAILURE() << "accepted: " << c.text;
        } catch (const tagflow::ConfigError& e) {
            const std::string m = e.what();
            EXPECT_NE(m.find("cfg.json"), std::string::npos) << m;
            EXPECT_NE(m.find(c.needle), std::string::npos) << m;
        }
    }
    EXPECT_THROW(load_hf_config("/nonexistent/config.json"), tagflow::ConfigError);
}

namespace {

// A Qwen3-0.6B-style config.json (the keys Hugging Face writes), shrunk.
const char* kQwen3Json = R"({"architectures":["Qwen3ForCausalLM"],"attention_bias":false,"attention_dropout":0.0,
  "bos_token_id":151643,"eos_token_id":151645,"head_dim":16,"hidden_act":"silu","hidden_size":48,
  "initializer_range":0.02,"intermediate_size":96,"max_position_embeddings":40960,"max_window_layers":28,
  "model_type":"qwen3","num_attention_heads":4,"num_hidden_layers":2,"num_key_value_heads":2,"rms_norm_eps":1e-06,
  "rope_scaling":null,"rope_theta":1000000,"sliding_window":null,"tie_word_embeddings":true,
  "torch_dtype":"bfloat16","transformers_version":"4.51.0","use_cache":true,"use_sliding_window":false,
  "vocab_size":151936,"layer_types":["full_attention","full_attention"]})";

// A Llama-3.2-1B-style config.json, shrunk.
const char* kLlama32Json = R"({"architectures":["LlamaForCausalLM"],"attention_bias":false,"attention_dropout":0.0,
  "bos_token_id":128000,"eos_token_id":128001,"head_dim":16,"hidden_act":"silu","hidden_size":64,
  "initializer_range":0.02,"intermediate_size":128,"max_position_embeddings":131072,"mlp_bias":false,
  "model_type":"llama","num_attention_heads":4,"num_hidden_layers":2,"num_key_value_heads":2,
  "pretraining_tp":1,"rms_norm_eps":1e-05,"rope_scaling":{"factor":32.0,"high_freq_factor":4.0,
  "low_freq_factor":1.0,"original_max_position_embeddings":8192,"rope_type":"llama3"},"rope_theta":500000.0,
  "tie_word_embeddings":true,"torch_dtype":"bfloat16","use_cache":true,"vocab_size":128256})";

/// Expects parse_hf_config(text) to fail with one line naming cfg.json and containing `needle`.
void expect_config_error(const std::string& text, const std::string& needle) {
    try {
        parse_hf_config(text, "cfg.json");
        ADD_FAILURE() << "accepted: " << text;
    } catch (const tagflow::ConfigError& e) {
        const std::string m = e.what();
        EXPECT_EQ(m.rfind("cfg.json: ", 0), 0u) << m;
        EXPECT_NE(m.find(needle), std::string::npos) << "want '" << needle << "' in: " << m;
        EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    }
}

std::string edit(const char* base, const std::string& key, const nlohmann::json& v) {
    nlohmann::json j = nlohmann::json::parse(base);
    if (v.is_discarded()) j.erase(key);
    else j[key] = v;
    return j.dump();
}

}  // namespace

TEST(HfConfig, ParsesQwen3) {
    const HfConfig c = parse_hf_config(kQwen3Json);
    EXPECT_EQ(c.model_type, "qwen3");
    EXPECT_TRUE(c.qk_norm);
    EXPECT_EQ(c.head_dim, 16);  // explicit, != hidden_size / num_attention_heads (12)
    EXPECT_EQ(c.num_key_value_heads, 2);
    EXPECT_FALSE(c.qkv_bias);
    EXPECT_FALSE(c.o_bias);
    EXPECT_TRUE(c.tie_word_embeddings);
    EXPECT_EQ(c.rope_type, "default");
    EXPECT_DOUBLE_EQ(c.rope_theta, 1e6);
    // attention_bias: biases on q, k, v and o (Qwen3Attention), unlike qwen2's q/k/v only.
    const HfConfig b = parse_hf_config(edit(kQwen3Json, "attention_bias", true));
    EXPECT_TRUE(b.qkv_bias);
    EXPECT_TRUE(b.o_bias);
    // No head_dim: Qwen3Config's default 128, not hidden_size / heads.
    EXPECT_EQ(parse_hf_config(edit(kQwen3Json, "head_dim", nullptr)).head_dim, 128);
    // Defaults: tie_word_embeddings false, no biases.
    const HfConfig d = parse_hf_config(
        edit(edit(kQwen3Json, "tie_word_embeddings", nlohmann::json(nlohmann::json::value_t::discarded)).c_str(),
             "attention_bias", nlohmann::json(nlohmann::json::value_t::discarded)));
    EXPECT_FALSE(d.tie_word_embeddings);
    EXPECT_FALSE(d.qkv_bias);
    // Round trip through the config.json tagflow writes.
    for (const HfConfig& x : {c, b}) {
        const std::string text = to_hf_json(x);
        const nlohmann::json j = nlohmann::json::parse(text);
        EXPECT_EQ(j["architectures"][0], "Qwen3ForCausalLM");
        EXPECT_EQ(j["head_dim"], 16);
        EXPECT_EQ(j["attention_bias"], x.qkv_bias);
        EXPECT_TRUE(j["rope_scaling"].is_null());
        const HfConfig back = parse_hf_config(text);
        EXPECT_EQ(back.model_type, "qwen3");
        EXPECT_TRUE(back.qk_norm);
        EXPECT_EQ(back.head_dim, x.head_dim);
        EXPECT_EQ(back.qkv_bias, x.qkv_bias);
        EXPECT_EQ(back.o_bias, x.o_bias);
        EXPECT_EQ(back.tie_word_embeddings, x.tie_word_embeddings);
    }
}

TEST(HfConfig, ParsesLlama3RopeScaling) {
    const HfConfig c = parse_hf_config(kLlama32Json);
    EXPECT_EQ(c.rope_type, "llama3");
    EXPECT_DOUBLE_EQ(c.rope_factor, 32.0);
    EXPECT_DOUBLE_EQ(c.rope_low_freq_factor, 1.0);
    EXPECT_DOUBLE_EQ(c.rope_high_freq_factor, 4.0);
    EXPECT_EQ(c.rope_original_max_position_embeddings, 8192);
    EXPECT_DOUBLE_EQ(c.rope_theta, 500000.0);
    EXPECT_TRUE(c.tie_word_embeddings);
    EXPECT_FALSE(c.qk_norm);
    // The older spelling "type", and transformers 5's "rope_parameters" (with rope_theta inside).
    const nlohmann::json rs = nlohmann::json::parse(kLlama32Json)["rope_scaling"];
    nlohmann::json old = rs;
    old.erase("rope_type");
    old["type"] = "llama3";
    nlohmann::json v5 = rs;
    v5["rope_theta"] = 250000.0;
    const HfConfig a = parse_hf_config(edit(kLlama32Json, "rope_scaling", old));
    const HfConfig b =
        parse_hf_config(edit(edit(kLlama32Json, "rope_scaling", nullptr).c_str(), "rope_parameters", v5));
    EXPECT_EQ(a.rope_type, "llama3");
    EXPECT_DOUBLE_EQ(a.rope_factor, 32.0);
    EXPECT_EQ(b.rope_type, "llama3");
    EXPECT_EQ(b.rope_original_max_position_embeddings, 8192);
    EXPECT_DOUBLE_EQ(b.rope_theta, 250000.0);
    // null and {"rope_type": "default"} mean no scaling, in every family.
    for (const char* base : {kLlama32Json, kQwen3Json, kQwenJson}) {
        EXPECT_EQ(parse_hf_config(edit(base, "rope_scaling", nullptr)).rope_type, "default");
        EXPECT_EQ(parse_hf_config(edit(base, "rope_scaling", {{"rope_type", "default"}})).rope_type, "default");
        EXPECT_EQ(parse_hf_config(edit(base, "rope_scaling", rs)).rope_type, "llama3") << base;
    }
    // Round trip: the rope_scaling object is written back in full.
    const std::string text = to_hf_json(c);
    const nlohmann::json j = nlohmann::json::parse(text);
    EXPECT_EQ(j["rope_scaling"]["rope_type"], "llama3");
    EXPECT_EQ(j["rope_scaling"]["original_max_position_embeddings"], 8192);
    const HfConfig back = parse_hf_config(text);
    EXPECT_EQ(back.rope_type, "llama3");
    EXPECT_DOUBLE_EQ(back.rope_factor, c.rope_factor);
    EXPECT_DOUBLE_EQ(back.rope_low_freq_factor, c.rope_low_freq_factor);
    EXPECT_DOUBLE_EQ(back.rope_high_freq_factor, c.rope_high_freq_factor);
    EXPECT_EQ(back.rope_original_max_position_embeddings, c.rope_original_max_position_embeddings);
    EXPECT_DOUBLE_EQ(back.rope_theta, c.rope_theta);
    EXPECT_EQ(back.tie_word_embeddings, true);
}

TEST(HfConfig, RefusesUnsupportedInOneLine) {
    const nlohmann::json erase = nlohmann::json(nlohmann::json::value_t::discarded);
    const nlohmann::json rs = nlohmann::json::parse(kLlama32Json)["rope_scaling"];
    auto rope = [&](const std::string& key, const nlohmann::json& v) {
        nlohmann::json r = rs;
        if (v.is_discarded()) r.erase(key);
        else r[key] = v;
        return edit(kLlama32Json, "rope_scaling", r);
    };
    for (const char* type : {"linear", "dynamic", "yarn", "longrope", "ntk", "mrope"}) {
        expect_config_error(edit(kLlama32Json, "rope_scaling", {{"rope_type", type}, {"factor", 2.0}}),
                            std::string("rope_scaling type '") + type + "' is not supported");
        expect_config_error(edit(kQwen3Json, "rope_scaling", {{"type", type}, {"factor", 2.0}}),
                            std::string("rope_scaling type '") + type + "' is not supported");
        expect_config_error(edit(kQwen3Json, "rope_parameters", {{"rope_type", type}, {"rope_theta", 1e6}}),
                            std::string("rope_parameters type '") + type + "' is not supported");
    }
    expect_config_error(rope("factor", erase), "missing required key 'factor'");
    expect_config_error(rope("low_freq_factor", erase), "missing required key 'low_freq_factor'");
    expect_config_error(rope("high_freq_factor", erase), "missing required key 'high_freq_factor'");
    expect_config_error(rope("original_max_position_embeddings", erase),
                        "missing required key 'original_max_position_embeddings'");
    expect_config_error(rope("original_max_position_embeddings", 8192.5), "must be an integer");
    expect_config_error(rope("factor", "8"), "'factor' must be a number");
    expect_config_error(rope("factor", -8.0), "'factor' must be positive");
    expect_config_error(rope("high_freq_factor", 1.0),
                        "high_freq_factor (1.000000) must be greater than low_freq_factor");
    expect_config_error(rope("rope_type", erase), "'rope_scaling' has no 'rope_type'");
    expect_config_error(rope("rope_type", 3), "rope_type must be a string");
    expect_config_error(edit(kLlama32Json, "rope_scaling", "llama3"), "'rope_scaling' must be an object or null");
    expect_config_error(edit(kQwen3Json, "use_sliding_window", true), "use_sliding_window=true is not supported");
    expect_config_error(edit(kQwen3Json, "layer_types", {"full_attention", "sliding_attention"}),
                        "layer_types entry \"sliding_attention\" is not supported");
    expect_config_error(edit(kQwen3Json, "layer_types", "full_attention"), "'layer_types' must be a list");
    expect_config_error(edit(kQwen3Json, "attention_bias", "no"), "'attention_bias' must be true/false");
    expect_config_error(edit(kQwen3Json, "head_dim", 15), "head_dim (15) must be even");
    expect_config_error(edit(kQwen3Json, "model_type", "qwen3_moe"), "model_type 'qwen3_moe' is not supported");
    // A config built in code must keep q/k norms and qwen3 together (to_hf_json could not say otherwise).
    HfConfig bad = qwen2_config();
    bad.qk_norm = true;
    EXPECT_THROW(bad.validate(), tagflow::ConfigError);
    HfConfig q3 = qwen3_config();
    q3.qk_norm = false;
    EXPECT_THROW(q3.validate(), tagflow::ConfigError);
}
