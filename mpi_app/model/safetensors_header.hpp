// SPDX-License-Identifier: Apache-2.0
// safetensors_header: the in-memory first step of reading a safetensors file, shared by
// st::Reader (safetensors.cpp) and tests/fuzz: decoding and checking the 8-byte header length.
// The JSON header itself is parsed by st::parse_header (safetensors.hpp). No I/O, no torch.
#pragma once
#include <cstdint>
#include <string>

#include "model/safetensors.hpp"

namespace tagflow::model::st {

/// Decodes the little-endian header length N from the first 8 bytes of a file of `file_size`
/// bytes (file_size >= 8) and checks 2 <= N <= kMaxHeaderBytes and 8 + N <= file_size.
/// Throws SafetensorsError naming `file` otherwise.
uint64_t header_length(const unsigned char* first8, uint64_t file_size, const std::string& file);

}  // namespace tagflow::model::st
