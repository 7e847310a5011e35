// SPDX-License-Identifier: Apache-2.0
// pretrained_check: validates a Hugging Face checkpoint directory (config.json plus
// model.safetensors, or the shards of model.safetensors.index.json) from the headers alone,
// before a command writes anything: config.json, every safetensors header (sizes, offsets,
// dtype; a truncated file fails here), the index, and every tensor's name and shape against
// the decoder that config.json describes (the rules of LlamaModelImpl::from_pretrained).
// Reads no tensor data and needs no torch; does not check the values (NaN weights load).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "model/hf_config.hpp"

namespace tagflow::model {

/// The parameters LlamaModelImpl(c) has, by Hugging Face name, with their shapes
/// (tests/hostile/test_pretrained_check.cpp keeps this in step with llama.cpp).
std::map<std::string, std::vector<int64_t>> llama_param_shapes(const HfConfig& c);

/// Checks checkpoint directory `dir` as described above and returns its config. Throws
/// ConfigError, one line "<option> <dir>: <file>: <problem>", on anything
/// from_pretrained(dir) would reject while reading headers (missing files, bad JSON, bad or
/// truncated safetensors, missing/unexpected tensors, wrong shapes).
HfConfig check_pretrained(const std::string& dir, const std::string& option = "--model");

}  // namespace tagflow::model
