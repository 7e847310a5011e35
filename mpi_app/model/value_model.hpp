// SPDX-License-Identifier: Apache-2.0
// value_model: the PPO critic — the Llama/Qwen2 decoder backbone (HF names "model.*", same
// layers as model/llama.hpp) with a scalar head "score" (Linear(hidden, 1) with bias, as HF's
// *ForTokenClassification with num_labels = 1 that veRL loads as its critic). forward(tokens
// [B,T]) -> values [B,T] fp32: the value of the state after reading tokens 0..t.
// Does not train (train/workers.hpp) and has no KV-cache path (critics score whole sequences).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include "model/llama.hpp"

namespace tagflow::model {

class ValueModelImpl : public torch::nn::Module {
public:
    /// Random backbone weights from `seed` (as LlamaModelImpl::reset_parameters) and a zero
    /// head (the critic starts by predicting 0 everywhere).
    explicit ValueModelImpl(const HfConfig& cfg, uint64_t seed = 0);

    /// tokens [B,T] int64 (positions 0..T-1) -> values [B,T] fp32.
    torch::Tensor forward(const torch::Tensor& tokens);
    /// Packed rows (model/llama.hpp's packed_hidden_states) -> values [B,T] fp32.
    torch::Tensor forward_packed(const torch::Tensor& tokens, const torch::Tensor& positions,
                                 const torch::Tensor& segments);
    /// The backbone's final hidden states [B,T,hidden] (after the last norm).
    torch::Tensor hidden_states(const torch::Tensor& tokens);

    /// Copies the backbone ("model.*") from a policy of the same shape — veRL initialises the
    /// critic from the actor's weights. The head is left as it is.
    void init_from_policy(const LlamaModelImpl& policy);

    /// Parameters under HF names ("model.layers.0...", "score.weight", "score.bias").
    std::vector<std::pair<std::string, torch::Tensor>> hf_state_dict() const;
    /// Copies named tensors in; unknown names or wrong shapes throw tagflow::Error, and so
    /// do missing ones with `strict`. "lm_head.weight" (a policy checkpoint) is ignored.
    void load_hf_state_dict(const std::map<std::string, torch::Tensor>& tensors, bool strict = true);

    const HfConfig& config() const { return cfg_; }
    LlamaBackbone model{nullptr};
    torch::nn::Linear score{nullptr};

private:
    HfConfig cfg_;
    torch::Tensor inv_freq_;  ///< RoPE frequencies (a buffer, as in LlamaModelImpl)
};
TORCH_MODULE(ValueModel);

}  // namespace tagflow::model
