// SPDX-License-Identifier: Apache-2.0
// Serial.pretrained_check.*: model::check_pretrained (mpi_app/model/pretrained_check.hpp), the
// header-only validation `tagflow train --model` and `tagflow sft --init` run before they write
// anything. Checks that llama_param_shapes() matches the parameters LlamaModelImpl really has
// for every config variant, that good checkpoints (single file, sharded, bf16, tied) pass and
// that bad ones (truncated, wrong shape, missing or extra tensor, missing shard, lying index)
// give one ConfigError line naming the file. The end-to-end behaviour (no run directory left,
// exit 2 on every rank) is Hostile.model (hostile_tests.py).
#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "model/llama.hpp"
#include "model/pretrained_check.hpp"
#include "model/safetensors.hpp"

namespace fs = std::filesystem;
using namespace tagflow;
using namespace tagflow::model;

namespace {

HfConfig base() {
    HfConfig c;
    c.hidden_size = 16;
    c.intermediate_size = 24;
    c.num_hidden_layers = 2;
    c.num_attention_heads = 4;
    c.num_key_value_heads = 2;
    c.head_dim = 4;
    c.vocab_size = 20;
    c.max_position_embeddings = 32;
    return c;
}

std::vector<HfConfig> variants() {
    std::vector<HfConfig> v;
    v.push_back(base());
    HfConfig t = base();
    t.tie_word_embeddings = true;
    v.push_back(t);
    HfConfig q = base();
    q.model_type = "qwen2";
    q.qkv_bias = true;
    v.push_back(q);
    HfConfig o = base();
    o.qkv_bias = o.o_bias = true;
    v.push_back(o);
    HfConfig a = base();
    a.abs_positions = true;
    a.head_dim = 8;  // head_dim * heads != hidden_size
    v.push_back(a);
    HfConfig q3 = base();  // per-head q/k norms, tied, llama3 rope_scaling (no extra tensors)
    q3.model_type = "qwen3";
    q3.qk_norm = true;
    q3.head_dim = 6;
    q3.tie_word_embeddings = true;
    q3.rope_type = "llama3";
    q3.rope_factor = 8.0;
    q3.rope_original_max_position_embeddings = 16;
    v.push_back(q3);
    return v;
}

struct TempDir {
    fs::path path;
    TempDir() {
        path = fs::temp_directory_path() / ("tagflow_pretrained_check_" + std::to_string(::getpid()) + "_" +
                                            ::testing::UnitTest::GetInstance()->current_test_info()->name());
        fs::remove_all(path);
        fs::create_directories(path);
    }
    ~TempDir() { fs::remove_all(path); }
};

// The ConfigError text of check_pretrained(dir), or "" when it passes.
std::string problem(const fs::path& dir) {
    try {
        (void)check_pretrained(dir.string());
    } catch (const ConfigError& e) {
        return e.what();
    }
    return "";
}

nlohmann::json read_header(const fs::path& f, std::string* body) {
    std::ifstream in(f, std::ios::binary);
    std::string all((std::istreambuf_iterator<char>(in)), {});
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(all[static_cast<size_t>(i)]);
    *body = all.substr(8 + n);
    return nlohmann::json::parse(all.substr(8, n));
}

void write_header(const fs::path& f, const nlohmann::json& h, const std::string& body) {
    std::string text = h.dump();
    text.append((8 - text.size() % 8) % 8, ' ');
    std::ofstream out(f, std::ios::binary | std::ios::trunc);
    for (int i = 0; i < 8; ++i) out.put(static_cast<char>((text.size() >> (8 * i)) & 0xff));
    out << text << body;
}

}  // namespace

TEST(PretrainedCheck, ShapesMatchTheModel) {
    for (const HfConfig& c : variants()) {
        LlamaModelImpl m(c, 1);
        std::map<std::string, std::vector<int64_t>> have;
        for (const auto& [name, t] : m.hf_state_dict()) have[name] = t.sizes().vec();
        EXPECT_EQ(llama_param_shapes(c), have) << "tie " << c.tie_word_embeddings << " qkv_bias " << c.qkv_bias
                                               << " o_bias " << c.o_bias << " abs " << c.abs_positions;
    }
}

TEST(PretrainedCheck, GoodCheckpointsPass) {
    TempDir d;
    int k = 0;
    for (const HfConfig& c : variants()) {
        LlamaModelImpl m(c, 2);
        const fs::path one = d.path / ("one" + std::to_string(k)), shards = d.path / ("shards" + std::to_string(k++));
        m.save_pretrained(one.string());
        m.save_pretrained(shards.string(), /*shard_bytes=*/2000, st::DType::BF16);
        ASSERT_TRUE(fs::exists(shards / "model.safetensors.index.json"));
        EXPECT_EQ(problem(one), "");
        EXPECT_EQ(problem(shards), "");
        EXPECT_EQ(check_pretrained(one.string()).hidden_size, c.hidden_size);
        EXPECT_NO_THROW(LlamaModelImpl::from_pretrained(shards.string()));  // the loader agrees
    }
}

TEST(PretrainedCheck, BadCheckpointsFailWithOneLine) {
    TempDir d;
    LlamaModelImpl m(base(), 3);
    const fs::path good = d.path / "good";
    m.save_pretrained(good.string());
    auto copy = [&](const std::string& name) {
        const fs::path v = d.path / name;
        fs::copy(good, v, fs::copy_options::recursive);
        return v;
    };
    auto expect_bad = [&](const fs::path& v, const std::vector<std::string>& needles) {
        const std::string e = problem(v);
        EXPECT_NE(e, "") << v;
        EXPECT_EQ(e.find('\n'), std::string::npos) << e;
        EXPECT_NE(e.find("--model " + v.string() + ": "), std::string::npos) << e;
        for (const auto& n : needles) EXPECT_NE(e.find(n), std::string::npos) << "'" << n << "' not in: " << e;
        EXPECT_ANY_THROW(LlamaModelImpl::from_pretrained(v.string()));  // nothing the loader would accept
    };
    std::string body;
    const fs::path st = "model.safetensors";
    const nlohmann::json hdr = read_header(good / st, &body);

    fs::path v = copy("truncated");
    fs::resize_file(v / st, fs::file_size(v / st) - 100);
    expect_bad(v, {"model.safetensors", "out of range"});

    v = copy("transposed");
    nlohmann::json h = hdr;
    h["model.layers.0.mlp.up_proj.weight"]["shape"] = {16, 24};
    write_header(v / st, h, body);
    expect_bad(v, {"model.safetensors", "model.layers.0.mlp.up_proj.weight", "[16, 24]", "[24, 16]"});

    v = copy("renamed");
    h = hdr;
    h["model.norm.weightx"] = h["model.norm.weight"];
    h.erase("model.norm.weight");
    write_header(v / st, h, body);
    expect_bad(v, {"model.norm.weightx"});

    v = copy("config_bigger");
    {
        std::ifstream in(v / "config.json");
        nlohmann::json c = nlohmann::json::parse(in);
        c["num_hidden_layers"] = 3;
        std::ofstream(v / "config.json", std::ios::trunc) << c.dump();
    }
    expect_bad(v, {"no tensor 'model.layers.2."});

    v = copy("no_weights");
    fs::remove(v / st);
    expect_bad(v, {"neither model.safetensors"});

    v = copy("config_garbage");
    std::ofstream(v / "config.json", std::ios::trunc) << "\x01{nope";
    expect_bad(v, {"config.json"});

    // sharded: a missing shard, and an index that places a tensor in the wrong shard
    const fs::path sharded = d.path / "sharded";
    m.save_pretrained(sharded.string(), /*shard_bytes=*/3000);
    std::ifstream in(sharded / "model.safetensors.index.json");
    const nlohmann::json index = nlohmann::json::parse(in);
    const std::string first = index["weight_map"].begin().value().get<std::string>();
    std::string other;
    for (const auto& [name, f] : index["weight_map"].items())
        if (f != first) other = f.get<std::string>();
    ASSERT_FALSE(other.empty());
    v = d.path / "missing_shard";
    fs::copy(sharded, v, fs::copy_options::recursive);
    fs::remove(v / first);
    expect_bad(v, {first, "missing"});
    v = d.path / "lying_index";
    fs::copy(sharded, v, fs::copy_options::recursive);
    nlohmann::json li = index;
    li["weight_map"][index["weight_map"].begin().key()] = other;
    std::ofstream(v / "model.safetensors.index.json", std::ios::trunc) << li.dump();
    expect_bad(v, {"model.safetensors.index.json", index["weight_map"].begin().key()});
}
