// SPDX-License-Identifier: Apache-2.0
// Shared fixtures of the train tests: a tiny Llama config, a small deterministic batch of
// prompt + response sequences of different lengths, and tensor comparison helpers.
#pragma once
#include <cmath>
#include <memory>
#include <vector>

#include <torch/torch.h>

#include "model/hf_config.hpp"
#include "train/engine.hpp"

namespace tagflow::train::testing {

inline model::HfConfig tiny_config() {
    model::HfConfig c;
    c.model_type = "qwen2";
    c.hidden_size = 16;
    c.intermediate_size = 32;
    c.num_hidden_layers = 2;
    c.num_attention_heads = 2;
    c.num_key_value_heads = 1;
    c.head_dim = 8;
    c.vocab_size = 11;
    c.max_position_embeddings = 64;
    c.qkv_bias = true;
    c.validate("tiny");
    return c;
}

/// n sequences: prompt of 2..3 tokens, response of 1..4 tokens; advantages +-1 per sequence,
/// old/rollout log-probs near -2.4 (about uniform over 11), returns and old values.
inline std::vector<TrainSeq> tiny_batch(int n, uint32_t salt = 0) {
    std::vector<TrainSeq> out;
    for (int i = 0; i < n; ++i) {
        TrainSeq s;
        const int p = 2 + (i + static_cast<int>(salt)) % 2, r = 1 + (i * 3 + static_cast<int>(salt)) % 4;
        for (int t = 0; t < p + r; ++t) s.tokens.push_back(static_cast<int32_t>((i * 7 + t * 3 + salt) % 11));
        s.prompt_len = p;
        for (int j = 0; j < r; ++j) {
            s.old_logprobs.push_back(-2.4f + 0.05f * static_cast<float>((i + j) % 3));
            s.returns.push_back(0.5f * static_cast<float>((i + j) % 3) - 0.4f);
            s.old_values.push_back(0.1f * static_cast<float>(j));
        }
        s.rollout_logprobs = s.old_logprobs;
        s.advantages = {i % 2 == 0 ? 1.0f : -1.0f};
        out.push_back(std::move(s));
    }
    return out;
}

inline double max_abs_diff(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
    double m = 0;
    for (size_t i = 0; i < a.size(); ++i) m = std::max(m, (a[i] - b[i]).abs().max().item<double>());
    return m;
}

inline std::vector<torch::Tensor> snapshot(const std::vector<torch::Tensor>& ts) {
    std::vector<torch::Tensor> out;
    for (const auto& t : ts) out.push_back(t.detach().clone());
    return out;
}

}  // namespace tagflow::train::testing
