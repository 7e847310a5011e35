// SPDX-License-Identifier: Apache-2.0
// safetensors: a strict, torch-free reader and writer of the safetensors format
// (8-byte little-endian header length N, N bytes of JSON header, then the raw data).
// Validates everything before any data is used: header length, JSON, dtype, shape vs.
// byte size, offsets in range, no overlaps or gaps. Supports F32, F16 and BF16 only.
// Does not convert dtypes or know about torch (see llama.hpp for the torch glue).
#pragma once
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "common/error.hpp"

namespace tagflow::model::st {

/// Any malformed or unreadable safetensors file; the message names the file (and tensor).
struct SafetensorsError : Error {
    using Error::Error;
};

enum class DType { F32, F16, BF16 };
std::size_t dtype_size(DType d);
const char* dtype_name(DType d);
/// "F32"/"F16"/"BF16" -> DType; throws SafetensorsError naming `file` and `tensor` otherwise.
DType parse_dtype(const std::string& s, const std::string& file, const std::string& tensor);

struct TensorInfo {
    std::string name;
    DType dtype = DType::F32;
    std::vector<int64_t> shape;
    uint64_t begin = 0, end = 0;  ///< byte offsets relative to the start of the data section
    uint64_t numel() const;
    uint64_t nbytes() const { return end - begin; }
};

struct Header {
    std::vector<TensorInfo> tensors;              ///< sorted by data offset
    std::map<std::string, std::string> metadata;  ///< the optional "__metadata__" object
    uint64_t data_start = 0;                      ///< absolute file offset of the data section (8 + N)
    const TensorInfo* find(const std::string& name) const;
};

/// Largest header accepted (the reference implementation's limit).
constexpr uint64_t kMaxHeaderBytes = 100u * 1024u * 1024u;

/// Parses and validates a header. `json` is the N header bytes, `file_size` the size of the
/// whole file; `file` is only used in messages.
Header parse_header(const std::string& json, uint64_t file_size, const std::string& file);

/// Opens a file, validates its header and reads tensor data on demand.
class Reader {
public:
    explicit Reader(const std::string& path);
    const Header& header() const { return header_; }
    const std::string& path() const { return path_; }
    /// Copies the raw bytes of `t` (little-endian, row-major) into `dst` (t.nbytes() bytes).
    void read(const TensorInfo& t, void* dst);

private:
    std::string path_;
    std::ifstream in_;
    Header header_;
};

/// One tensor to write: raw little-endian row-major bytes owned by the caller.
struct TensorView {
    std::string name;
    DType dtype = DType::F32;
    std::vector<int64_t> shape;
    const void* data = nullptr;
    std::size_t nbytes = 0;
};

/// Writes a safetensors file (data in the given order, header padded to 8 bytes). Writes to
/// `path + ".tmp"` then renames. Throws SafetensorsError on bad input or I/O failure.
void write_file(const std::string& path, const std::vector<TensorView>& tensors,
                const std::map<std::string, std::string>& metadata = {});

}  // namespace tagflow::model::st
