// SPDX-License-Identifier: Apache-2.0
// fuzz_safetensors: libFuzzer target for the safetensors header (mpi_app/model/safetensors.cpp):
// the input is a whole file, read as st::Reader does (st::header_length, then st::parse_header)
// but from memory. Checks, beyond "no crash, no UB, no leak":
//   - only SafetensorsError escapes, with one printable line of bounded length naming the file;
//   - an accepted header: data_start = 8 + N; the tensors, sorted by offset, tile the data
//     section exactly; each spans numel * dtype size bytes (computed here without overflow);
//     names are unique and found by Header::find; the dtype name round-trips;
//   - every tensor's bytes lie inside the input (read here from an exactly sized buffer);
//   - the header written back as JSON (as write_file would) parses to the same header.
// Does not touch the file system or torch.
#include <cstdint>
#include <cstring>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "fuzz_check.h"
#include "model/safetensors.hpp"
#include "model/safetensors_header.hpp"

namespace st = tagflow::model::st;

namespace {

const std::string kFile = "fuzz.safetensors";

void check_message(const std::string& msg) {
    const std::string prefix = "safetensors: " + kFile + ": ";
    FUZZ_CHECK(msg.compare(0, prefix.size(), prefix) == 0, "message without file: %s", msg.c_str());
    FUZZ_CHECK(msg.size() <= 1024, "message of %zu bytes", msg.size());
    for (unsigned char c : msg) FUZZ_CHECK(c >= 0x20 && c != 0x7f, "control byte %#x in message", c);
}

void check_header(const st::Header& h, uint64_t n, const uint8_t* data, size_t size) {
    FUZZ_CHECK(h.data_start == 8 + n, "data_start %llu for N %llu", (unsigned long long)h.data_start,
               (unsigned long long)n);
    const uint64_t data_size = size - h.data_start;
    uint64_t pos = 0, sum = 0;
    std::map<std::string, const st::TensorInfo*> by_name;
    for (const auto& t : h.tensors) {
        FUZZ_CHECK(t.begin == pos && t.end >= t.begin && t.end <= data_size, "tensor '%s' [%llu,%llu) at %llu",
                   t.name.c_str(), (unsigned long long)t.begin, (unsigned long long)t.end, (unsigned long long)pos);
        pos = t.end;
        uint64_t numel = 1, bytes = 0;
        for (int64_t d : t.shape) {
            FUZZ_CHECK(d >= 0, "negative dimension in '%s'", t.name.c_str());
            FUZZ_CHECK(!__builtin_mul_overflow(numel, static_cast<uint64_t>(d), &numel), "numel overflow");
        }
        FUZZ_CHECK(!__builtin_mul_overflow(numel, static_cast<uint64_t>(st::dtype_size(t.dtype)), &bytes),
                   "byte size overflow");
        FUZZ_CHECK(t.numel() == numel && t.nbytes() == bytes, "'%s': %llu bytes for %llu elements", t.name.c_str(),
                   (unsigned long long)t.nbytes(), (unsigned long long)numel);
        FUZZ_CHECK(st::parse_dtype(st::dtype_name(t.dtype), kFile, t.name) == t.dtype, "dtype name");
        FUZZ_CHECK(t.name != "__metadata__" && by_name.emplace(t.name, &t).second, "name '%s' twice", t.name.c_str());
        FUZZ_CHECK(h.find(t.name) == &t, "find('%s')", t.name.c_str());
        for (uint64_t i = 0; i < t.nbytes(); ++i) sum += data[h.data_start + t.begin + i];
    }
    FUZZ_CHECK(pos == data_size, "tensors end at %llu of %llu", (unsigned long long)pos, (unsigned long long)data_size);
    (void)sum;

    // Written back as a header, it parses to the same thing.
    nlohmann::json j = nlohmann::json::object();
    if (!h.metadata.empty()) j["__metadata__"] = h.metadata;
    for (const auto& t : h.tensors)
        j[t.name] = {{"dtype", st::dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {t.begin, t.end}}};
    const std::string text = j.dump();
    st::Header again;
    try {
        again = st::parse_header(text, 8 + text.size() + data_size, kFile);
    } catch (const st::SafetensorsError& e) {
        FUZZ_CHECK(false, "written-back header rejected: %s", e.what());
    }
    FUZZ_CHECK(again.metadata == h.metadata && again.tensors.size() == h.tensors.size(), "written-back header differs");
    for (const auto& t : again.tensors) {
        auto it = by_name.find(t.name);
        FUZZ_CHECK(it != by_name.end() && it->second->dtype == t.dtype && it->second->shape == t.shape &&
                       it->second->begin == t.begin && it->second->end == t.end,
                   "written-back tensor '%s' differs", t.name.c_str());
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < 8) return 0;  // st::Reader refuses these before decoding a length
    uint64_t n = 0;
    try {
        n = st::header_length(data, size, kFile);
    } catch (const st::SafetensorsError& e) {
        check_message(e.what());
        return 0;
    }
    FUZZ_CHECK(n >= 2 && n <= st::kMaxHeaderBytes && 8 + n <= size, "header length %llu accepted",
               (unsigned long long)n);
    try {
        const st::Header h = st::parse_header(std::string(reinterpret_cast<const char*>(data) + 8, n), size, kFile);
        check_header(h, n, data, size);
    } catch (const st::SafetensorsError& e) {
        check_message(e.what());
    }
    return 0;
}
