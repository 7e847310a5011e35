// SPDX-License-Identifier: Apache-2.0
// test_safetensors (Serial.llama.Safetensors.*): the safetensors round trip in every dtype, empty and
// scalar tensors, and every malformed-header rejection naming the file; the writer's refusals. The
// config.json tests are test_hf_config.cpp, the model's test_llama.cpp.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "model/llama.hpp"
#include "model/safetensors.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using namespace tagflow::model;
using tagflow::model::test::scratch;

namespace {

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
