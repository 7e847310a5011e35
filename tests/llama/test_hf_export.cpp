// SPDX-License-Identifier: Apache-2.0
// test_hf_export: model/hf_export (Serial.llama.HfExport.*): config.json's token ids round trip,
// --export-dtype values, a bf16 export bit for bit equal to LibTorch's to(kBFloat16) (ties to
// even included), generation_config.json (ids, sampling, a source's fields kept), --tokenizer
// paths. With real tokenizers end to end: tests/ckpt/export_tests.py (App.ckpt_export_*,
// App.sft_export).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "model/hf_config.hpp"
#include "model/hf_export.hpp"
#include "model/llama.hpp"
#include "model/safetensors.hpp"

namespace fs = std::filesystem;
using namespace tagflow::model;

namespace {

fs::path scratch(const std::string& name) {
    fs::path p = fs::temp_directory_path() / ("tagflow_hf_export_" + std::to_string(::getpid()) + "_" + name);
    fs::remove_all(p);
    return p;
}

HfConfig tiny_config() {
    HfConfig c;
    c.hidden_size = 16;
    c.intermediate_size = 32;
    c.num_hidden_layers = 1;
    c.num_attention_heads = 2;
    c.num_key_value_heads = 1;
    c.head_dim = 8;
    c.vocab_size = 20;
    c.max_position_embeddings = 32;
    return c;
}

nlohmann::json read_json(const fs::path& p) {
    std::ifstream in(p);
    return nlohmann::json::parse(in);
}

std::string error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const tagflow::ConfigError& e) {
        return e.what();
    }
    return "(no ConfigError)";
}

}  // namespace

TEST(HfExport, ConfigTokenIdsRoundTrip) {
    const std::string base = R"({"model_type":"llama","hidden_size":16,"intermediate_size":32,"num_hidden_layers":1,
        "num_attention_heads":2,"vocab_size":20,"rms_norm_eps":1e-6,)";
    const HfConfig c = parse_hf_config(base + R"("bos_token_id":1,"eos_token_id":[2,7],"pad_token_id":null})");
    EXPECT_EQ(c.bos_token_id, std::optional<int64_t>(1));
    EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{2, 7}));
    EXPECT_FALSE(c.pad_token_id);
    const HfConfig back = parse_hf_config(to_hf_json(c));
    EXPECT_EQ(back.bos_token_id, c.bos_token_id);
    EXPECT_EQ(back.eos_token_ids, c.eos_token_ids);
    EXPECT_EQ(parse_hf_config(base + R"("eos_token_id":5})").eos_token_ids, (std::vector<int64_t>{5}));
    EXPECT_NE(error_of([&] { parse_hf_config(base + R"("eos_token_id":"x"})"); }).find("key 'eos_token_id'"),
              std::string::npos);
    EXPECT_NE(error_of([&] { parse_hf_config(base + R"("bos_token_id":[1]})"); }).find("key 'bos_token_id'"),
              std::string::npos);
}

TEST(HfExport, ExportDtypeValues) {
    EXPECT_EQ(parse_export_dtype("bf16", ""), st::DType::BF16);
    EXPECT_EQ(parse_export_dtype("fp32", "bfloat16"), st::DType::F32);
    EXPECT_EQ(parse_export_dtype("auto", "bfloat16"), st::DType::BF16);
    EXPECT_EQ(parse_export_dtype("", "bfloat16"), st::DType::BF16);
    EXPECT_EQ(parse_export_dtype("auto", "float16"), st::DType::F32);
    EXPECT_EQ(parse_export_dtype("auto", ""), st::DType::F32);
    const std::string e = error_of([] { parse_export_dtype("fp16", ""); });
    EXPECT_EQ(e.rfind("--export-dtype fp16: expected bf16, fp32 or auto", 0), 0u) << e;
}

TEST(HfExport, Bf16IsTorchRoundingBitForBit) {
    LlamaModel m(tiny_config(), 3);
    // model.norm.weight gets the hard cases: 1 + 2^-8 is halfway between bf16 1 and 1 + 2^-7 (to
    // even: 0x3F80), 1 + 3*2^-8 halfway between 1 + 2^-7 and 1 + 2^-6 (to even: 0x3F82), just above
    // a tie rounds up (0x3F81), -0 stays -0 (0x8000), a subnormal, the largest float (overflows to
    // +inf, as torch does: 0x7F80); the rest are random.
    const std::vector<float> hard = {1.0f + std::ldexp(1.0f, -8),
                                     1.0f + 3 * std::ldexp(1.0f, -8),
                                     1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20),
                                     -0.0f,
                                     std::ldexp(1.0f, -130),
                                     3.4028235e38f};
    const std::vector<uint16_t> want = {0x3F80, 0x3F82, 0x3F81, 0x8000, 0x0008, 0x7F80};
    {
        torch::NoGradGuard ng;
        for (auto& [name, t] : m->hf_state_dict())
            if (name == "model.norm.weight")
                for (std::size_t i = 0; i < hard.size(); ++i) t[static_cast<int64_t>(i)].fill_(hard[i]);
    }
    const fs::path dir = scratch("bf16");
    HfExport e;
    e.dtype = st::DType::BF16;
    const auto names = write_hf_dir(*m, dir.string(), e);
    EXPECT_EQ(names, (std::vector<std::string>{"config.json", "model.safetensors", "generation_config.json"}));
    EXPECT_EQ(read_json(dir / "config.json")["torch_dtype"], "bfloat16");
    st::Reader r((dir / "model.safetensors").string());
    std::size_t checked = 0;
    for (const auto& [name, t] : m->hf_state_dict()) {
        const st::TensorInfo* info = r.header().find(name);
        ASSERT_NE(info, nullptr) << name;
        ASSERT_EQ(info->dtype, st::DType::BF16) << name;
        std::vector<uint16_t> got(info->numel());
        r.read(*info, got.data());
        const torch::Tensor ref = t.detach().contiguous().to(torch::kBFloat16);
        ASSERT_EQ(0, std::memcmp(got.data(), ref.data_ptr(), got.size() * 2)) << name;
        if (name == "model.norm.weight") {
            for (std::size_t i = 0; i < want.size(); ++i) EXPECT_EQ(got[i], want[i]) << "value " << hard[i];
        }
        checked += got.size();
    }
    EXPECT_GT(checked, 1000u);
    fs::remove_all(dir);
}

TEST(HfExport, GenerationConfigAndSourceFields) {
    HfConfig c = tiny_config();
    c.eos_token_ids = {4};
    HfExport e;
    e.stop_ids = {12};
    // Ids from config.json; no tokenizer, so stop_ids only when config.json has no eos.
    nlohmann::json g = nlohmann::json::parse(generation_config_json(c, e));
    EXPECT_EQ(g["eos_token_id"], 4);
    EXPECT_FALSE(g.contains("temperature"));
    c.eos_token_ids.clear();
    g = nlohmann::json::parse(generation_config_json(c, e));
    EXPECT_EQ(g["eos_token_id"], 12);
    EXPECT_FALSE(g.contains("bos_token_id"));
    e.sampling = true;
    e.temperature = 0.7;
    e.top_k = 0;
    e.max_new_tokens = 9;
    g = nlohmann::json::parse(generation_config_json(c, e));
    EXPECT_EQ(g["do_sample"], true);
    EXPECT_DOUBLE_EQ(g["temperature"].get<double>(), 0.7);
    EXPECT_EQ(g["top_k"], 0);
    EXPECT_EQ(g["max_new_tokens"], 9);
    // A source generation_config.json keeps every field it has; missing ones are added.
    const fs::path src = scratch("src");
    fs::create_directories(src);
    std::ofstream(src / "generation_config.json") << R"({"temperature": 0.3, "eos_token_id": [1, 2], "custom": "x"})";
    e.source_dir = src.string();
    g = nlohmann::json::parse(generation_config_json(c, e));
    EXPECT_DOUBLE_EQ(g["temperature"].get<double>(), 0.3);
    EXPECT_EQ(g["eos_token_id"], nlohmann::json::parse("[1, 2]"));
    EXPECT_EQ(g["custom"], "x");
    EXPECT_EQ(g["max_new_tokens"], 9);
    std::ofstream(src / "generation_config.json") << "{not json";
    EXPECT_NE(error_of([&] { generation_config_json(c, e); }).find("generation_config.json: not valid JSON"),
              std::string::npos);
    fs::remove_all(src);
}

TEST(HfExport, TokenizerPaths) {
    const fs::path d = scratch("tok");
    fs::create_directories(d);
    EXPECT_NE(error_of([&] { resolve_tokenizer_json(d.string()); }).find("no tokenizer.json in this directory"),
              std::string::npos);
    EXPECT_NE(error_of([&] { resolve_tokenizer_json((d / "x.json").string()); }).find("--tokenizer"),
              std::string::npos);
    std::ofstream(d / "tokenizer.json") << "{}";
    EXPECT_EQ(resolve_tokenizer_json(d.string()), (d / "tokenizer.json").string());
    EXPECT_EQ(export_tokenizer("", d.string()), (d / "tokenizer.json").string());
    EXPECT_EQ(export_tokenizer("", ""), "");
    fs::remove_all(d);
}
