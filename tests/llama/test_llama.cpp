// SPDX-License-Identifier: Apache-2.0
// test_llama: safetensors round trip and every malformed-header rejection, config.json
// parsing (qwen3 keys, llama3 rope_scaling, each refusal in one line) and its round trip, the
// llama3 RoPE frequencies, HF parameter names (q/k norms), KV-cache and slot decoder vs full
// forward, tied embeddings in every family, sharded and bf16 checkpoint round trips. The cross-check against an independent Python forward
// is reference_forward.py (see CMakeLists.txt).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "model/hf_config.hpp"
#include "model/llama.hpp"
#include "model/safetensors.hpp"
#include "fixtures.hpp"

namespace fs = std::filesystem;
using namespace tagflow::model;

namespace {

fs::path scratch(const std::string& name) {
    fs::path p = fs::temp_directory_path() / ("tagflow_llama_" + std::to_string(::getpid()) + "_" + name);
    fs::remove_all(p);
    return p;
}

void write_raw(const fs::path& p, uint64_t header_len, const std::string& header, const std::string& data) {
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    for (int i = 0; i < 8; ++i) out.put(static_cast<char>((header_len >> (8 * i)) & 0xff));
    out << header << data;
}

/// Writes a file with an honest header length and expects st::Reader to reject it with a
/// message containing the file name and every string in `needles`.
void expect_reject(const std::string& tag, const std::string& header, std::size_t data_bytes,
                   const std::vector<std::string>& needles) {
    const fs::path p = scratch(tag + ".safetensors");
    write_raw(p, header.size(), header, std::string(data_bytes, '\0'));
    try {
        st::Reader r(p.string());
        ADD_FAILURE() << tag << ": accepted " << header;
    } catch (const st::SafetensorsError& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find(p.string()), std::string::npos) << tag << ": " << msg;
        for (const auto& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << tag << ": " << msg;
    }
    fs::remove(p);
}

using fixtures::llama3_config;
using fixtures::llama_tied_config;
using fixtures::qwen2_config;
using fixtures::qwen3_config;

torch::Tensor some_tokens(int64_t vocab) {
    return torch::arange(0, 2 * 13, torch::kLong).mul(37).remainder(vocab).view({2, 13});
}

double max_diff(const torch::Tensor& a, const torch::Tensor& b) { return (a - b).abs().max().item<double>(); }

const char* kQwenJson = R"({"model_type":"qwen2","hidden_size":64,"intermediate_size":128,
  "num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"vocab_size":97,
  "rms_norm_eps":1e-6,"rope_theta":1000000.0,"max_position_embeddings":128,
  "tie_word_embeddings":false,"torch_dtype":"bfloat16","hidden_act":"silu"})";

}  // namespace

// ---------------- safetensors ----------------

TEST(Safetensors, RoundTripAllDtypes) {
    const fs::path p = scratch("rt.safetensors");
    torch::manual_seed(0);
    const torch::Tensor a = torch::randn({3, 5}), b = torch::randn({7}), c = torch::randn({2, 2, 2});
    for (st::DType d : {st::DType::F32, st::DType::F16, st::DType::BF16}) {
        save_safetensors(p.string(), {{"a", a}, {"b", b}, {"c.x", c}}, d, {{"format", "pt"}});
        st::Reader r(p.string());
        EXPECT_EQ(r.header().metadata.at("format"), "pt");
        ASSERT_EQ(r.header().tensors.size(), 3u);
        EXPECT_EQ(r.header().data_start % 8, 0u);
        EXPECT_EQ(r.header().find("a")->dtype, d);
        auto m = load_safetensors(p.string());
        const auto td = d == st::DType::F32 ? torch::kFloat : d == st::DType::F16 ? torch::kHalf : torch::kBFloat16;
        for (auto [name, t] : std::vector<std::pair<std::string, torch::Tensor>>{{"a", a}, {"b", b}, {"c.x", c}}) {
            ASSERT_TRUE(m.count(name));
            EXPECT_EQ(m[name].scalar_type(), torch::kFloat);
            EXPECT_EQ(m[name].sizes(), t.sizes());
            EXPECT_TRUE(torch::equal(m[name], t.to(td).to(torch::kFloat))) << name << " " << st::dtype_name(d);
        }
    }
    fs::remove(p);
}

TEST(Safetensors, EmptyAndScalarTensors) {
    const fs::path p = scratch("empty.safetensors");
    save_safetensors(p.string(), {{"e", torch::zeros({0, 4})}, {"s", torch::tensor(2.5f)}});
    auto m = load_safetensors(p.string());
    EXPECT_EQ(m["e"].sizes(), torch::IntArrayRef({0, 4}));
    EXPECT_EQ(m["s"].dim(), 0);
    EXPECT_EQ(m["s"].item<float>(), 2.5f);
    fs::remove(p);
}

TEST(Safetensors, RejectsBadHeaderLength) {
    const fs::path p = scratch("len.safetensors");
    {  // shorter than the 8-byte length field
        std::ofstream(p, std::ios::binary) << "abc";
        EXPECT_THROW(st::Reader{p.string()}, st::SafetensorsError);
    }
    write_raw(p, 0, "", "");
    try {
        st::Reader r(p.string());
        ADD_FAILURE();
    } catch (const st::SafetensorsError& e) {
        EXPECT_NE(std::string(e.what()).find("bad header length"), std::string::npos) << e.what();
    }
    write_raw(p, st::kMaxHeaderBytes + 1, "{}", "");
    EXPECT_THROW(st::Reader{p.string()}, st::SafetensorsError);
    write_raw(p, 1000, "{}", "");  // header larger than the file
    try {
        st::Reader r(p.string());
        ADD_FAILURE();
    } catch (const st::SafetensorsError& e) {
        const std::string m = e.what();
        EXPECT_NE(m.find("larger than the file"), std::string::npos) << m;
        EXPECT_NE(m.find(p.string()), std::string::npos) << m;
    }
    fs::remove(p);
}

TEST(Safetensors, RejectsMalformedHeaders) {
    expect_reject("nonjson", "{\"a\": [1, 2", 0, {"not valid JSON"});
    expect_reject("notobject", "[1, 2, 3]", 0, {"must be a JSON object"});
    expect_reject("unknown_dtype", R"({"w":{"dtype":"Q4","shape":[2],"data_offsets":[0,2]}})", 2,
                  {"'w'", "unknown or unsupported dtype 'Q4'"});
    expect_reject("i64_dtype", R"({"w":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})", 8, {"'w'", "'I64'"});
    expect_reject("mismatch", R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})", 20,
                  {"'w'", "shape/offset mismatch"});
    expect_reject("out_of_range", R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8,
                  {"'w'", "out of range"});
    expect_reject("overlap",
                  R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},
                      "b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                  12, {"'b'", "overlap"});
    expect_reject("gap", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8, {"'a'", "gap"});
    expect_reject("trailing", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 12, {"trailing bytes"});
    expect_reject("reversed", R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[4,0]}})", 4,
                  {"'a'", "end 0 < begin 4"});
    expect_reject("negative_shape", R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4,
                  {"'a'", "non-negative"});
    expect_reject("missing_field", R"({"a":{"dtype":"F32","shape":[1]}})", 4, {"'a'", "data_offsets"});
    expect_reject("extra_field", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1}})", 4,
                  {"'a'", "unexpected field 'x'"});
    expect_reject("bad_metadata", R"({"__metadata__":{"k":1}})", 0, {"__metadata__"});
    expect_reject("duplicate",
                  R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},
                      "a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                  8, {"'a'", "appears twice"});
    expect_reject("entry_not_object", R"({"a":5})", 0, {"'a'", "must be an object"});
}

TEST(Safetensors, WriterRejectsBadInput) {
    const fs::path p = scratch("w.safetensors");
    const float x[2] = {1, 2};
    EXPECT_THROW(st::write_file(p.string(), {{"a", st::DType::F32, {3}, x, 8}}), st::SafetensorsError);
    EXPECT_THROW(st::write_file(p.string(), {{"a", st::DType::F32, {2}, x, 8}, {"a", st::DType::F32, {2}, x, 8}}),
                 st::SafetensorsError);
    EXPECT_FALSE(fs::exists(p));
}

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

// ---------------- model ----------------

TEST(Llama, HuggingFaceParameterNames) {
    LlamaModel m(qwen2_config(), 1);
    std::set<std::string> names;
    for (const auto& [n, t] : m->hf_state_dict()) names.insert(n);
    for (const char* n : {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight",
                          "model.layers.1.input_layernorm.weight", "model.layers.1.post_attention_layernorm.weight",
                          "model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.q_proj.bias",
                          "model.layers.0.self_attn.k_proj.bias", "model.layers.0.self_attn.v_proj.bias",
                          "model.layers.0.self_attn.o_proj.weight", "model.layers.1.mlp.gate_proj.weight",
                          "model.layers.1.mlp.up_proj.weight", "model.layers.1.mlp.down_proj.weight"})
        EXPECT_TRUE(names.count(n)) << n;
    EXPECT_FALSE(names.count("model.layers.0.self_attn.o_proj.bias"));
    EXPECT_EQ(names.size(), 3u + 2u * 12u);
    EXPECT_EQ(m->model->layers[0]->as<LlamaDecoderLayerImpl>()->self_attn->k_proj->weight.sizes(),
              torch::IntArrayRef({2 * 16, 64}));
}

TEST(Llama, KVCacheMatchesFullForward) {
    for (const HfConfig& c : {qwen2_config(), llama_tied_config(), qwen3_config(), llama3_config(false)}) {
        LlamaModel m(c, 0);
        m->reset_parameters(7, 0.1);
        torch::NoGradGuard ng;
        const torch::Tensor tok = some_tokens(c.vocab_size);
        const torch::Tensor full = m->forward(tok);
        EXPECT_EQ(full.sizes(), torch::IntArrayRef({2, 13, c.vocab_size}));
        auto cache = m->make_cache();
        std::vector<torch::Tensor> parts;
        int64_t pos = 0;
        for (int64_t n : {4, 1, 1, 3, 1, 2, 1}) {
            parts.push_back(m->forward_cached(tok.narrow(1, pos, n), cache));
            pos += n;
        }
        EXPECT_EQ(cache.len, 13);
        EXPECT_EQ(cache.k[0].sizes(), torch::IntArrayRef({2, c.num_key_value_heads, 13, c.head_dim}));
        const double d = max_diff(torch::cat(parts, 1), full);
        EXPECT_LT(d, 1e-4) << c.model_type;
        // Causality: a prefix's logits do not depend on later tokens.
        EXPECT_LT(max_diff(m->forward(tok.narrow(1, 0, 6)), full.narrow(1, 0, 6)), 1e-4);
    }
}

TEST(Llama, TiedEmbeddings) {
    const HfConfig c = llama_tied_config();
    LlamaModel m(c, 3);
    EXPECT_TRUE(m->lm_head.is_empty());
    for (const auto& [n, t] : m->hf_state_dict()) EXPECT_NE(n, "lm_head.weight");
    const fs::path dir = scratch("tied");
    m->save_pretrained(dir.string());
    st::Reader r((dir / "model.safetensors").string());
    EXPECT_EQ(r.header().find("lm_head.weight"), nullptr);
    auto back = LlamaModelImpl::from_pretrained(dir.string());
    torch::NoGradGuard ng;
    const torch::Tensor tok = some_tokens(c.vocab_size);
    EXPECT_TRUE(torch::equal(back->forward(tok), m->forward(tok)));
    // The output projection really is the embedding: changing one changes the other.
    const torch::Tensor before = back->forward(tok);
    back->model->embed_tokens->weight[5].add_(1.0);
    const torch::Tensor after = back->forward(tok);
    EXPECT_GT(max_diff(after.select(2, 5), before.select(2, 5)), 1e-3);
    fs::remove_all(dir);
}

TEST(Llama, ShardedSaveLoadRoundTrip) {
    const HfConfig c = qwen2_config();
    LlamaModel m(c, 11);
    const fs::path dir = scratch("sharded");
    m->save_pretrained(dir.string(), /*shard_bytes=*/30000);
    ASSERT_TRUE(fs::exists(dir / "model.safetensors.index.json"));
    EXPECT_FALSE(fs::exists(dir / "model.safetensors"));
    std::ifstream in(dir / "model.safetensors.index.json");
    const nlohmann::json idx = nlohmann::json::parse(in);
    std::set<std::string> shard_files;
    for (auto it = idx["weight_map"].begin(); it != idx["weight_map"].end(); ++it)
        shard_files.insert(it.value().get<std::string>());
    EXPECT_GT(shard_files.size(), 2u);
    char first[64];
    std::snprintf(first, sizeof first, "model-00001-of-%05zu.safetensors", shard_files.size());
    EXPECT_TRUE(shard_files.count(first)) << first;
    EXPECT_EQ(idx["weight_map"].size(), m->hf_state_dict().size());
    uint64_t total = 0;
    for (const auto& [n, t] : m->hf_state_dict()) total += static_cast<uint64_t>(t.numel()) * 4;
    EXPECT_EQ(idx["metadata"]["total_size"].get<uint64_t>(), total);

    auto back = LlamaModelImpl::from_pretrained(dir.string());
    const auto a = m->hf_state_dict(), b = back->hf_state_dict();
    ASSERT_EQ(a.size(), b.size());
    for (std::size_t i = 0; i < a.size(); ++i) {
        EXPECT_EQ(a[i].first, b[i].first);
        EXPECT_TRUE(torch::equal(a[i].second, b[i].second)) << a[i].first;
    }
    // Re-saving as one file replaces the index.
    back->save_pretrained(dir.string());
    EXPECT_FALSE(fs::exists(dir / "model.safetensors.index.json"));
    EXPECT_TRUE(fs::exists(dir / "model.safetensors"));
    auto again = LlamaModelImpl::from_pretrained(dir.string());
    torch::NoGradGuard ng;
    EXPECT_TRUE(torch::equal(again->forward(some_tokens(c.vocab_size)), m->forward(some_tokens(c.vocab_size))));
    fs::remove_all(dir);
}

TEST(Llama, Bf16CheckpointLoadsAsFp32) {
    const HfConfig c = qwen2_config();
    LlamaModel m(c, 5);
    const fs::path dir = scratch("bf16");
    m->save_pretrained(dir.string(), 0, st::DType::BF16);
    EXPECT_EQ(load_hf_config((dir / "config.json").string()).torch_dtype, "bfloat16");
    st::Reader r((dir / "model.safetensors").string());
    EXPECT_EQ(r.header().find("model.norm.weight")->dtype, st::DType::BF16);
    auto back = LlamaModelImpl::from_pretrained(dir.string());
    for (const auto& [n, t] : back->hf_state_dict()) EXPECT_EQ(t.scalar_type(), torch::kFloat) << n;
    const auto a = m->hf_state_dict(), b = back->hf_state_dict();
    for (std::size_t i = 0; i < a.size(); ++i)
        EXPECT_TRUE(torch::equal(b[i].second, a[i].second.to(torch::kBFloat16).to(torch::kFloat))) << a[i].first;
    fs::remove_all(dir);
}

TEST(Llama, LoadErrors) {
    const HfConfig c = qwen2_config();
    LlamaModel m(c, 2);
    const fs::path dir = scratch("errs");
    EXPECT_THROW(LlamaModelImpl::from_pretrained(dir.string()), tagflow::ConfigError);  // no config.json
    m->save_pretrained(dir.string());
    auto sd = m->hf_state_dict();
    // Missing tensor.
    std::vector<std::pair<std::string, torch::Tensor>> missing(sd.begin() + 1, sd.end());
    save_safetensors((dir / "model.safetensors").string(), missing);
    try {
        LlamaModelImpl::from_pretrained(dir.string());
        ADD_FAILURE();
    } catch (const tagflow::Error& e) {
        EXPECT_NE(std::string(e.what()).find(sd.front().first), std::string::npos) << e.what();
    }
    // Unexpected tensor.
    auto extra = sd;
    extra.emplace_back("model.layers.9.mlp.up_proj.weight", torch::zeros({2}));
    save_safetensors((dir / "model.safetensors").string(), extra);
    EXPECT_THROW(LlamaModelImpl::from_pretrained(dir.string()), tagflow::Error);
    // Wrong shape.
    auto bad = sd;
    bad[0].second = torch::zeros({3, 3});
    save_safetensors((dir / "model.safetensors").string(), bad);
    EXPECT_THROW(LlamaModelImpl::from_pretrained(dir.string()), tagflow::Error);
    // No weights at all.
    fs::remove(dir / "model.safetensors");
    EXPECT_THROW(LlamaModelImpl::from_pretrained(dir.string()), tagflow::Error);
    fs::remove_all(dir);
}

TEST(Llama, Llama3RopeFrequencies) {
    // Llama 3.1 8B's numbers: head_dim 128, theta 5e5, factor 8, low 1, high 4, original 8192.
    HfConfig c = llama3_config(false);
    c.head_dim = 128;
    c.hidden_size = 512;
    c.rope_theta = 500000.0;
    c.rope_original_max_position_embeddings = 8192;
    const torch::Tensor got = rope_inv_freq(c).to(torch::kDouble);
    ASSERT_EQ(got.sizes(), torch::IntArrayRef({64}));
    int kept = 0, divided = 0, blended = 0;
    for (int64_t i = 0; i < 64; ++i) {
        // Meta's apply_scaling (llama3 reference code), in double.
        const double f = 1.0 / std::pow(500000.0, 2.0 * static_cast<double>(i) / 128.0);
        const double wavelen = 2 * M_PI / f;
        double want;
        if (wavelen < 8192.0 / 4.0) {
            want = f;
            ++kept;
        } else if (wavelen > 8192.0 / 1.0) {
            want = f / 8.0;
            ++divided;
        } else {
            const double smooth = (8192.0 / wavelen - 1.0) / (4.0 - 1.0);
            want = (1 - smooth) * f / 8.0 + smooth * f;
            ++blended;
        }
        EXPECT_NEAR(got[i].item<double>() / want, 1.0, 1e-6) << "frequency " << i;
    }
    EXPECT_GT(kept, 0);  // all three bands occur
    EXPECT_GT(divided, 0);
    EXPECT_GT(blended, 0);
    // Without rope_scaling: the plain frequencies.
    c.rope_type = "default";
    const torch::Tensor plain = rope_inv_freq(c).to(torch::kDouble);
    for (int64_t i = 0; i < 64; ++i)
        EXPECT_NEAR(plain[i].item<double>() * std::pow(500000.0, 2.0 * static_cast<double>(i) / 128.0), 1.0, 1e-6);
}

TEST(Llama, Qwen3ParameterNamesAndShapes) {
    for (bool bias : {false, true}) {
        HfConfig c = qwen3_config();
        c.qkv_bias = c.o_bias = bias;
        LlamaModel m(c, 1);
        std::map<std::string, std::vector<int64_t>> shapes;
        for (const auto& [n, t] : m->hf_state_dict()) shapes[n] = t.sizes().vec();
        const int64_t D = c.head_dim;
        EXPECT_EQ(shapes.at("model.layers.1.self_attn.q_norm.weight"), std::vector<int64_t>({D}));
        EXPECT_EQ(shapes.at("model.layers.1.self_attn.k_norm.weight"), std::vector<int64_t>({D}));
        EXPECT_EQ(shapes.at("model.layers.0.self_attn.q_proj.weight"), std::vector<int64_t>({4 * D, 48}));
        EXPECT_EQ(shapes.at("model.layers.0.self_attn.k_proj.weight"), std::vector<int64_t>({2 * D, 48}));
        EXPECT_EQ(shapes.at("model.layers.0.self_attn.o_proj.weight"), std::vector<int64_t>({48, 4 * D}));
        EXPECT_EQ(shapes.count("model.layers.0.self_attn.q_proj.bias"), bias ? 1u : 0u);
        EXPECT_EQ(shapes.count("model.layers.0.self_attn.o_proj.bias"), bias ? 1u : 0u);
        EXPECT_EQ(shapes.count("lm_head.weight"), 0u);  // tied
        EXPECT_EQ(shapes.size(), 2u + 2u * (11u + (bias ? 4u : 0u)));
        // The q/k norms take part: changing one changes the logits.
        torch::NoGradGuard ng;
        const torch::Tensor tok = some_tokens(c.vocab_size);
        const torch::Tensor before = m->forward(tok);
        m->model->layers[0]->as<LlamaDecoderLayerImpl>()->self_attn->k_norm->weight.mul_(3.0);
        EXPECT_GT(max_diff(m->forward(tok), before), 1e-3);
    }
}

TEST(Llama, SlotDecoderMatchesFullForward) {
    // fp32 on CPU runs the loop kernels, bf16 the tensor-op path (as on a GPU).
    for (const HfConfig& c : {qwen3_config(), llama3_config(true), llama3_config(false)}) {
        LlamaModel m(c, 0);
        m->reset_parameters(13, 0.1);
        const int64_t T = c.max_position_embeddings;
        const torch::Tensor tok =
            torch::arange(0, 2 * T, torch::kLong).mul(29).add(5).remainder(c.vocab_size).view({2, T});
        torch::Tensor full;
        {
            torch::NoGradGuard ng;
            full = m->forward(tok);
        }
        for (bool bf16 : {false, true}) {
            LlamaSlotDecoder dec(m, 2, T, bf16);
            auto ids = [&](int64_t row, int64_t n) {
                std::vector<int32_t> v;
                for (int64_t t = 0; t < n; ++t) v.push_back(static_cast<int32_t>(tok[row][t].item<int64_t>()));
                return v;
            };
            const int64_t p = T / 2 - 1;
            const torch::Tensor pre = dec.prefill({0, 1}, {ids(0, p), ids(1, p + 1)});
            double d = std::max(max_diff(pre[0], full[0][p - 1]), max_diff(pre[1], full[1][p]));
            for (int64_t pos = p; pos < T; ++pos) {  // row 1 one position ahead of row 0
                std::vector<int64_t> t{tok[0][pos].item<int64_t>()}, ps{pos};
                if (pos + 1 < T) {
                    t.push_back(tok[1][pos + 1].item<int64_t>());
                    ps.push_back(pos + 1);
                }
                const torch::Tensor l = dec.decode(t, ps);
                d = std::max(d, max_diff(l[0], full[0][pos]));
                if (pos + 1 < T) d = std::max(d, max_diff(l[1], full[1][pos + 1]));
            }
            // bf16: ~1% of the logits' scale; a missing q/k norm or scaling costs O(1) (see reference_forward.py).
            const double tol = bf16 ? 0.05 * full.abs().max().item<double>() : 1e-4;
            EXPECT_LT(d, tol) << c.model_type << " tied " << c.tie_word_embeddings << " bf16 " << bf16;
            if (bf16) {
                EXPECT_GT(d, 0.0);
            }
        }
    }
}

TEST(Llama, TiedEmbeddingsInEveryFamily) {
    HfConfig q2 = qwen2_config(), l3 = llama3_config(true);
    q2.tie_word_embeddings = true;
    for (const HfConfig& c : {q2, llama_tied_config(), qwen3_config(), l3}) {
        LlamaModel m(c, 3);
        EXPECT_TRUE(m->lm_head.is_empty()) << c.model_type;
        const fs::path dir = scratch("tied_" + c.model_type);
        m->save_pretrained(dir.string());
        // What Hugging Face's save_pretrained writes for a tied model: no lm_head.weight, and
        // tie_word_embeddings true in config.json.
        st::Reader r((dir / "model.safetensors").string());
        EXPECT_EQ(r.header().find("lm_head.weight"), nullptr) << c.model_type;
        std::ifstream in(dir / "config.json");
        const nlohmann::json j = nlohmann::json::parse(in);
        EXPECT_EQ(j["tie_word_embeddings"], true);
        const HfConfig back_cfg = load_hf_config((dir / "config.json").string());
        EXPECT_EQ(back_cfg.model_type, c.model_type);
        EXPECT_EQ(back_cfg.qk_norm, c.qk_norm);
        EXPECT_EQ(back_cfg.rope_type, c.rope_type);
        EXPECT_EQ(back_cfg.head_dim, c.head_dim);
        auto back = LlamaModelImpl::from_pretrained(dir.string());
        torch::NoGradGuard ng;
        const torch::Tensor tok = some_tokens(c.vocab_size);
        EXPECT_TRUE(torch::equal(back->forward(tok), m->forward(tok))) << c.model_type;
        // A redundant lm_head.weight (some exporters write both) is ignored: the embedding is the head.
        auto sd = m->hf_state_dict();
        sd.emplace_back("lm_head.weight", torch::zeros({c.vocab_size, c.hidden_size}));
        save_safetensors((dir / "model.safetensors").string(), sd);
        auto again = LlamaModelImpl::from_pretrained(dir.string());
        EXPECT_TRUE(torch::equal(again->forward(tok), m->forward(tok))) << c.model_type;
        // The same weights under an untied config.json: lm_head.weight is missing, and the
        // message says why.
        HfConfig untied = c;
        untied.tie_word_embeddings = false;
        {
            std::ofstream out(dir / "config.json", std::ios::trunc);
            out << to_hf_json(untied);
        }
        save_safetensors((dir / "model.safetensors").string(), m->hf_state_dict());
        try {
            LlamaModelImpl::from_pretrained(dir.string());
            ADD_FAILURE() << c.model_type << ": loaded an untied config without lm_head.weight";
        } catch (const tagflow::Error& e) {
            const std::string msg = e.what();
            EXPECT_NE(msg.find("lm_head.weight"), std::string::npos) << msg;
            EXPECT_NE(msg.find("tie_word_embeddings=false"), std::string::npos) << msg;
        }
        fs::remove_all(dir);
    }
}
