// SPDX-License-Identifier: Apache-2.0
// policy_dir: the checkpoint's policy/ directory and its exact fp32 weights (see policy_dir.hpp).
#include "ckpt/policy_dir.hpp"

#include <torch/torch.h>

#include "model/llama.hpp"

namespace tagflow::ckpt {

std::vector<FileEntry> write_policy(const std::string& staging, const model::LlamaModelImpl& m,
                                    const model::HfExport& e) {
    std::vector<FileEntry> files;
    for (const std::string& name : model::write_hf_dir(m, staging + "/policy", e))
        files.push_back(describe_file(staging, "policy/" + name));
    fsync_path(staging + "/policy");
    if (e.dtype != model::st::DType::F32) {
        model::save_safetensors(staging + "/" + kPolicyFp32, m.hf_state_dict(), model::st::DType::F32,
                                {{"format", "pt"}});
        files.push_back(describe_file(staging, kPolicyFp32));
    }
    return files;
}

std::string policy_weights_file(const Manifest& m, const std::string& dir) {
    return dir + "/" + (m.find_file(kPolicyFp32) ? std::string(kPolicyFp32) : std::string("policy/model.safetensors"));
}

}  // namespace tagflow::ckpt
