// SPDX-License-Identifier: Apache-2.0
// policy: a small decoder-only transformer LM (pre-LN, learned absolute positions, GELU
// MLP) with a full forward for training and a KV-cache incremental path for decoding.
// Does not sample or train (see rollout/generate.hpp, train/grpo.hpp).
#pragma once
#include <cstdint>
#include <vector>

#include <torch/nn/module.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/pimpl.h>

namespace tagflow::model {

/// Shape of the policy. Defaults are the tuned ones for the `reverse` task (5 digits).
struct PolicyConfig {
    int64_t vocab = 13;     ///< token ids are in [0, vocab)
    int64_t d_model = 64;
    int64_t n_layers = 2;
    int64_t n_heads = 2;
    int64_t d_ff = 256;
    int64_t max_seq = 32;   ///< longest prompt + response the position table covers
};

/// Per-layer key/value cache for incremental decoding. Built by PolicyImpl::make_cache();
/// rows may be left-padded: `pad[b]` leading slots of row b are padding that no real
/// token attends to, and positions are counted from the first real token.
struct KVCache {
    std::vector<torch::Tensor> k, v;  ///< per layer [B, H, max_seq, d_head]
    torch::Tensor pad;                ///< [B] int64 count of left-padding slots (undefined: none)
    torch::Tensor key_valid;          ///< [B, max_seq] bool, false on padding (undefined: none)
    int64_t len = 0;                  ///< slots filled so far
};

class PolicyImpl : public torch::nn::Module {
public:
    /// Builds the model and initialises it deterministically from `seed` (no global RNG).
    PolicyImpl(const PolicyConfig& cfg, uint64_t seed);

    /// Full causal forward: tokens [B, T] int64 -> logits [B, T, vocab] (fp32 unless
    /// autocast is on). Right padding is harmless: real tokens never see later slots.
    torch::Tensor forward(const torch::Tensor& tokens);

    /// An empty cache for `batch` rows. `pad` ([B] int64, optional) gives each row's
    /// count of left-padding slots that the first forward_cached() call will contain.
    KVCache make_cache(int64_t batch, const torch::Tensor& pad = torch::Tensor()) const;

    /// Appends tokens [B, t] to `cache` and returns their logits [B, t, vocab]. Same
    /// numbers as forward() on the whole sequence (within float rounding).
    torch::Tensor forward_cached(const torch::Tensor& tokens, KVCache& cache);

    /// Re-draws every parameter from `seed` (GPT-2 style: N(0, 0.02), residual
    /// projections scaled by 1/sqrt(2 n_layers), LayerNorm 1/0, biases 0).
    void reset_parameters(uint64_t seed);

    const PolicyConfig& config() const { return cfg_; }
    int64_t num_parameters() const;

private:
    struct Layer {
        torch::nn::LayerNorm ln1{nullptr}, ln2{nullptr};
        torch::nn::Linear qkv{nullptr}, proj{nullptr}, fc1{nullptr}, fc2{nullptr};
    };
    // Shared by both paths: `cache` null means a plain causal forward over `tokens`.
    torch::Tensor run(const torch::Tensor& tokens, KVCache* cache);

    PolicyConfig cfg_;
    torch::nn::Embedding tok_emb_{nullptr}, pos_emb_{nullptr};
    std::vector<Layer> layers_;
    torch::nn::LayerNorm ln_f_{nullptr};
    torch::nn::Linear head_{nullptr};
};
TORCH_MODULE(Policy);

/// Copies every parameter of `src` into `dst` (same config required). No autograd.
void copy_parameters(PolicyImpl& dst, const PolicyImpl& src);

}  // namespace tagflow::model
