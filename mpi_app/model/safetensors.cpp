// SPDX-License-Identifier: Apache-2.0
// safetensors: header parsing/validation and writing (no torch; see safetensors.hpp).
// Assumes a little-endian host, as the format's data is little-endian.
#include "model/safetensors.hpp"

#include "model/safetensors_header.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <set>

#include <nlohmann/json.hpp>

#include "common/error.hpp"
#include "common/safe_file.hpp"

namespace tagflow::model::st {
namespace {

using nlohmann::json;

/// Text from the file as messages show it: control bytes as \xNN, at most about `max` bytes
/// (cut at a UTF-8 character boundary, then "..."), so that an error stays one short line.
std::string shown(const std::string& s, std::size_t max = 100) {
    std::string out;
    for (unsigned char c : s) {
        if (out.size() >= max && (c & 0xC0) != 0x80) return out + "...";
        if (c < 0x20 || c == 0x7f) {
            char b[8];
            std::snprintf(b, sizeof(b), "\\x%02x", c);
            out += b;
        } else {
            out += static_cast<char>(c);
        }
    }
    return out;
}

[[noreturn]] void fail(const std::string& file, const std::string& what) {
    throw SafetensorsError("safetensors: " + file + ": " + what);
}
[[noreturn]] void fail_tensor(const std::string& file, const std::string& tensor, const std::string& what) {
    fail(file, "tensor '" + shown(tensor) + "': " + what);
}

uint64_t read_u64_le(const unsigned char* p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
    return v;
}

uint64_t as_u64(const json& j, const std::string& file, const std::string& tensor, const char* field) {
    if (!j.is_number_unsigned() && !(j.is_number_integer() && j.get<int64_t>() >= 0))
        // not j.dump() of the whole value: a deeply nested array would recurse off the stack
        fail_tensor(file, tensor,
                    std::string(field) + " must hold non-negative integers, got " +
                        (j.is_primitive() ? shown(j.dump(), 40) : j.type_name()));
    return j.get<uint64_t>();
}

}  // namespace

std::size_t dtype_size(DType d) {
    switch (d) {
        case DType::F32: return 4;
        case DType::F16: return 2;
        case DType::BF16: return 2;
    }
    return 0;
}

const char* dtype_name(DType d) {
    switch (d) {
        case DType::F32: return "F32";
        case DType::F16: return "F16";
        case DType::BF16: return "BF16";
    }
    return "?";
}

DType parse_dtype(const std::string& s, const std::string& file, const std::string& tensor) {
    if (s == "F32") return DType::F32;
    if (s == "F16") return DType::F16;
    if (s == "BF16") return DType::BF16;
    fail_tensor(file, tensor, "unknown or unsupported dtype '" + shown(s, 40) + "' (supported: F32, F16, BF16)");
}

uint64_t TensorInfo::numel() const {
    uint64_t n = 1;
    for (int64_t d : shape) n *= static_cast<uint64_t>(d);
    return n;
}

const TensorInfo* Header::find(const std::string& name) const {
    for (const auto& t : tensors)
        if (t.name == name) return &t;
    return nullptr;
}

uint64_t header_length(const unsigned char* first8, uint64_t file_size, const std::string& file) {
    if (file_size < 8) fail(file, "file too short (" + std::to_string(file_size) + " bytes) for a header length");
    const uint64_t n = read_u64_le(first8);
    if (n < 2 || n > kMaxHeaderBytes)
        fail(file, "bad header length " + std::to_string(n) + " (must be 2.." + std::to_string(kMaxHeaderBytes) + ")");
    if (n > file_size - 8)
        fail(file,
             "header length " + std::to_string(n) + " larger than the file (" + std::to_string(file_size) + " bytes)");
    return n;
}

Header parse_header(const std::string& text, uint64_t file_size, const std::string& file) {
    if (file_size < 8 || text.size() > file_size - 8)
        fail(file, "header (" + std::to_string(text.size()) + " bytes) larger than the file (" +
                       std::to_string(file_size) + " bytes)");
    json j;
    std::string duplicate;
    std::set<std::string> seen;  // top-level keys, to reject duplicates (JSON keeps the last)
    try {
        j = json::parse(text, [&](int depth, json::parse_event_t ev, json& parsed) {
            if (depth == 1 && ev == json::parse_event_t::key) {
                const std::string k = parsed.get<std::string>();
                if (!seen.insert(k).second && duplicate.empty()) duplicate = k;
            }
            return true;
        });
    } catch (const json::exception& e) {
        fail(file, "header is not valid JSON: " + shown(e.what(), 300));
    }
    if (!duplicate.empty()) fail_tensor(file, duplicate, "appears twice in the header");
    if (!j.is_object()) fail(file, "header must be a JSON object, got " + std::string(j.type_name()));

    Header h;
    h.data_start = 8 + text.size();
    const uint64_t data_size = file_size - h.data_start;
    for (auto it = j.begin(); it != j.end(); ++it) {
        const std::string& name = it.key();
        const json& v = it.value();
        if (name == "__metadata__") {
            if (!v.is_object()) fail(file, "__metadata__ must be an object of strings");
            for (auto m = v.begin(); m != v.end(); ++m) {
                if (!m.value().is_string())
                    fail(file, "__metadata__ value of '" + shown(m.key()) + "' is not a string");
                h.metadata[m.key()] = m.value().get<std::string>();
            }
            continue;
        }
        if (!v.is_object()) fail_tensor(file, name, "entry must be an object");
        for (auto f = v.begin(); f != v.end(); ++f)
            if (f.key() != "dtype" && f.key() != "shape" && f.key() != "data_offsets")
                fail_tensor(file, name, "unexpected field '" + shown(f.key(), 40) + "'");
        if (!v.contains("dtype") || !v["dtype"].is_string()) fail_tensor(file, name, "missing or non-string 'dtype'");
        if (!v.contains("shape") || !v["shape"].is_array()) fail_tensor(file, name, "missing or non-array 'shape'");
        if (!v.contains("data_offsets") || !v["data_offsets"].is_array() || v["data_offsets"].size() != 2)
            fail_tensor(file, name, "'data_offsets' must be an array [begin, end]");

        TensorInfo t;
        t.name = name;
        t.dtype = parse_dtype(v["dtype"].get<std::string>(), file, name);
        uint64_t numel = 1;
        for (const json& d : v["shape"]) {
            const uint64_t n = as_u64(d, file, name, "shape");
            if (n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
                (n != 0 && numel > std::numeric_limits<uint64_t>::max() / 8 / n))
                fail_tensor(file, name, "shape too large");
            numel *= n;
            t.shape.push_back(static_cast<int64_t>(n));
        }
        t.begin = as_u64(v["data_offsets"][0], file, name, "data_offsets");
        t.end = as_u64(v["data_offsets"][1], file, name, "data_offsets");
        if (t.end < t.begin)
            fail_tensor(file, name,
                        "data_offsets end " + std::to_string(t.end) + " < begin " + std::to_string(t.begin));
        if (t.end > data_size)
            fail_tensor(file, name,
                        "data_offsets [" + std::to_string(t.begin) + ", " + std::to_string(t.end) +
                            ") out of range: data section has " + std::to_string(data_size) + " bytes");
        const uint64_t want = numel * dtype_size(t.dtype);
        if (t.end - t.begin != want)
            fail_tensor(file, name,
                        "shape/offset mismatch: shape needs " + std::to_string(want) + " bytes of " +
                            dtype_name(t.dtype) + ", data_offsets span " + std::to_string(t.end - t.begin));
        h.tensors.push_back(std::move(t));
    }
    std::sort(h.tensors.begin(), h.tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
        return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
    });
    // Like the reference implementation: tensors tile the data section exactly.
    uint64_t pos = 0;
    for (const auto& t : h.tensors) {
        if (t.begin < pos)
            fail_tensor(file, t.name,
                        "data_offsets [" + std::to_string(t.begin) + ", " + std::to_string(t.end) +
                            ") overlap the previous tensor");
        if (t.begin > pos)
            fail_tensor(file, t.name,
                        "gap of " + std::to_string(t.begin - pos) + " unused bytes before this tensor's data");
        pos = t.end;
    }
    if (pos != data_size) fail(file, std::to_string(data_size - pos) + " trailing bytes after the last tensor");
    return h;
}

Reader::Reader(const std::string& path) : path_(path) {
    in_.open(path, std::ios::binary);
    if (!in_) fail(path, "cannot open for reading");
    in_.seekg(0, std::ios::end);
    const auto size = static_cast<uint64_t>(in_.tellg());
    in_.seekg(0);
    if (size < 8) fail(path, "file too short (" + std::to_string(size) + " bytes) for a header length");
    unsigned char len_bytes[8];
    in_.read(reinterpret_cast<char*>(len_bytes), 8);
    const uint64_t n = header_length(len_bytes, size, path);
    std::string text(n, '\0');
    in_.read(text.data(), static_cast<std::streamsize>(n));
    if (!in_) fail(path, "short read of the header");
    header_ = parse_header(text, size, path);
}

void Reader::read(const TensorInfo& t, void* dst) {
    in_.clear();
    in_.seekg(static_cast<std::streamoff>(header_.data_start + t.begin));
    in_.read(static_cast<char*>(dst), static_cast<std::streamsize>(t.nbytes()));
    if (!in_) fail_tensor(path_, t.name, "short read of the data");
}

void write_file(const std::string& path, const std::vector<TensorView>& tensors,
                const std::map<std::string, std::string>& metadata) {
    json h = json::object();
    if (!metadata.empty()) h["__metadata__"] = metadata;
    uint64_t pos = 0;
    for (const auto& t : tensors) {
        if (t.name.empty() || t.name == "__metadata__") fail(path, "bad tensor name '" + t.name + "'");
        if (h.contains(t.name)) fail_tensor(path, t.name, "duplicate tensor name");
        uint64_t numel = 1;
        for (int64_t d : t.shape) {
            if (d < 0) fail_tensor(path, t.name, "negative dimension");
            numel *= static_cast<uint64_t>(d);
        }
        if (numel * dtype_size(t.dtype) != t.nbytes)
            fail_tensor(path, t.name, "byte count " + std::to_string(t.nbytes) + " does not match shape");
        h[t.name] = {{"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {pos, pos + t.nbytes}}};
        pos += t.nbytes;
    }
    std::string text = h.dump();
    text.append((8 - text.size() % 8) % 8, ' ');
    // The temporary is created exclusively and never through a link (a stale one, or a link
    // planted at its name, is removed first: unlink removes the link, not its target).
    const std::string tmp = path + ".tmp";
    ::unlink(tmp.c_str());
    int fd = -1;
    try {
        fd = create_new_file(tmp);
        unsigned char len[8];
        uint64_t n = text.size();
        for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>((n >> (8 * i)) & 0xff);
        write_all(fd, std::string_view(reinterpret_cast<const char*>(len), 8), tmp);
        write_all(fd, text, tmp);
        for (const auto& t : tensors) write_all(fd, std::string_view(static_cast<const char*>(t.data), t.nbytes), tmp);
        const int rc = ::close(fd);
        fd = -1;
        if (rc != 0) throw Error(tmp + ": " + std::strerror(errno));
    } catch (const Error& e) {
        if (fd >= 0) ::close(fd);
        ::unlink(tmp.c_str());
        fail(tmp, std::string("write failed: ") + e.what());
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) fail(path, "cannot rename " + tmp + " into place");
}

}  // namespace tagflow::model::st
