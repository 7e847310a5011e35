// SPDX-License-Identifier: Apache-2.0
// policy_dir: the policy part of a checkpoint. `policy/` is a complete Hugging Face directory
// (model/hf_export.hpp: weights in --export-dtype, tokenizer files, generation_config.json);
// when that dtype is not fp32, the exact fp32 weights also go to `policy_fp32.safetensors`
// beside it, so a resume continues from the weights the run had, not from rounded ones. Does
// not write the manifest or commit (checkpoint.hpp).
#pragma once
#include <string>
#include <vector>

#include "ckpt/checkpoint.hpp"
#include "model/hf_export.hpp"

namespace tagflow::model {
class LlamaModelImpl;
}

namespace tagflow::ckpt {

/// The fp32 copy of the weights written when policy/ holds another dtype.
inline constexpr const char* kPolicyFp32 = "policy_fp32.safetensors";

/// Writes `staging`/policy/ (and kPolicyFp32 when e.dtype is not F32), fsyncs every file, and
/// returns their manifest entries.
std::vector<FileEntry> write_policy(const std::string& staging, const model::LlamaModelImpl& m,
                                    const model::HfExport& e);

/// The file a resume loads the policy weights from: `dir`/kPolicyFp32 when the manifest lists
/// it, else `dir`/policy/model.safetensors.
std::string policy_weights_file(const Manifest& m, const std::string& dir);

}  // namespace tagflow::ckpt
