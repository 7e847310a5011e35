// SPDX-License-Identifier: Apache-2.0
// generate: batched sampling from the policy with its KV cache (temperature, top-p,
// greedy), per-token log-probabilities, and the greedy held-out evaluation.
// Does not compute rewards for training or advantages (see train/grpo.hpp).
#pragma once
#include <cstdint>
#include <vector>

#include <ATen/core/Generator.h>

#include "model/policy.hpp"
#include "rollout/task.hpp"

namespace tagflow::rollout {

struct SamplingParams {
    double temperature = 1.0;  ///< 0 = greedy (argmax)
    double top_p = 1.0;        ///< nucleus mass kept; 1 = no filtering
    int32_t max_tokens = 16;   ///< response budget, EOS included
    int32_t eos = -1;          ///< stop token; -1 = none (always max_tokens)
};

struct Completion {
    std::vector<int32_t> response;  ///< generated tokens; ends with EOS iff hit_eos
    /// One per response token: log_softmax(logits / T)[token] of the raw policy at the
    /// sampling temperature T (T = 0: plain log_softmax), *before* top-p filtering. The
    /// trainer computes the same quantity (GrpoConfig::temperature), so PPO ratios are
    /// exactly 1 on-policy when top_p = 1.
    std::vector<float> logprobs;
    bool hit_eos = false;
};

/// Samples one completion per prompt. Prompts may differ in length (left-padded, masked,
/// with positions counted from each row's first real token). Rows stop at EOS; the batch
/// stops when every row has stopped or after max_tokens. Same weights + same generator
/// state => same completions. Runs without autograd.
std::vector<Completion> generate(model::Policy& policy,
                                 const std::vector<std::vector<int32_t>>& prompts,
                                 const SamplingParams& params, at::Generator& gen);

/// Picks the next token for each row of `logits` [B, V] and writes its log-probability
/// (see Completion::logprobs) into `logprobs` ([B] float). Exposed for tests.
torch::Tensor sample_next(const torch::Tensor& logits, const SamplingParams& params,
                          at::Generator& gen, torch::Tensor& logprobs);

/// Zeroes the tail of each row of `probs` [B, V] outside the smallest set of most likely
/// tokens whose mass reaches `top_p` (the top token is always kept). Not renormalised.
torch::Tensor top_p_filter(const torch::Tensor& probs, double top_p);

/// Mean reward of greedy completions on eval prompts [first, first + n_prompts),
/// decoded in batches of `batch_size`.
double evaluate(model::Policy& policy, const Task& task, int64_t n_prompts,
                int64_t batch_size = 512, int64_t first = 0);

}  // namespace tagflow::rollout
