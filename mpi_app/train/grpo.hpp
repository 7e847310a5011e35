// SPDX-License-Identifier: Apache-2.0
// grpo: group-relative advantages, the clipped policy-gradient loss (token-level sum over
// a caller-given global token count), and GrpoLearner, which owns the optimiser and
// accumulates gradients over micro-batches. Does not all-reduce gradients or choose
// samples: the caller reduces gradients() between accumulate() and step().
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include <torch/optim/adamw.h>

#include "model/policy.hpp"
#include "rollout/generate.hpp"

namespace tagflow::train {

/// Advantages for rewards laid out as consecutive groups of `group_size` samples of the
/// same prompt: r - mean(group), divided by (population std of the group + 1e-6) when
/// `normalize_std`. A group whose rewards are all equal gets advantages of exactly 0.
/// Throws tagflow::Error if rewards.size() is not a multiple of group_size.
std::vector<float> group_advantages(const std::vector<float>& rewards, int group_size,
                                    bool normalize_std);

/// One training sequence: prompt + response, one rollout log-probability per response
/// token (Completion::logprobs) and the sample's advantage.
struct TrainSample {
    std::vector<int32_t> tokens;
    int32_t prompt_len = 0;
    std::vector<float> old_logprobs;  ///< tokens.size() - prompt_len entries
    float advantage = 0.0f;
};

TrainSample make_train_sample(const std::vector<int32_t>& prompt,
                              const rollout::Completion& completion, float advantage);

struct GrpoConfig {
    double lr = 5e-4;
    double clip_eps = 0.2;
    double kl_coef = 0.0;       ///< 0 = no reference model is kept
    double weight_decay = 0.0;  ///< AdamW decay on matrices (not biases, norms)
    double grad_clip = 1.0;     ///< max global L2 norm; <= 0 disables
    double beta1 = 0.9, beta2 = 0.99;
    double temperature = 1.0;   ///< the rollout temperature (logprobs of logits / T)
    double entropy_coef = 0.0;  ///< bonus on the mean token entropy (0 = none)
    int64_t micro_batch = 256;  ///< sequences per forward/backward
    bool bf16 = false;          ///< CPU bf16 autocast for forward/backward
};

/// Statistics of one accumulate() call over this rank's samples. `loss` is this rank's
/// share (sum over local tokens / global_norm: summing it over ranks gives the global
/// loss); the others are means over this rank's `tokens` response tokens (combine across
/// ranks weighted by `tokens`).
struct StepStats {
    double loss = 0.0;
    double kl = 0.0;
    double entropy = 0.0;
    double clip_frac = 0.0;
    double logprob_diff_mean = 0.0;  ///< mean |rollout logprob - trainer logprob|
    int64_t tokens = 0;
};

/// Per-token clipped surrogate loss: -min(r A, clip(r, 1-eps, 1+eps) A) with
/// r = exp(logp - old_logp). All inputs [B, T] (adv broadcastable); returns [B, T].
/// `clipped` (optional) receives 1 where the clipped branch was taken and differs.
torch::Tensor clipped_pg_loss(const torch::Tensor& logp, const torch::Tensor& old_logp,
                              const torch::Tensor& adv, double clip_eps,
                              torch::Tensor* clipped = nullptr);

class GrpoLearner {
public:
    /// Trains `policy` in place (shared module handle). With kl_coef > 0 a frozen copy of
    /// the current weights becomes the reference model.
    GrpoLearner(model::Policy policy, const GrpoConfig& cfg);

    /// Forward/backward over `local_batch` in micro-batches, adding to the gradients.
    /// The loss of each response token is divided by `global_norm` (e.g. the number of
    /// response tokens across all train ranks), so an all-reduce SUM of gradients gives
    /// the global token mean. May be called several times before step().
    StepStats accumulate(const std::vector<TrainSample>& local_batch, double global_norm);

    /// Gradient tensors in parameters() order; always defined (zero after step()).
    std::vector<torch::Tensor> gradients() const;
    std::vector<torch::Tensor> parameters() const;

    /// Clips the global gradient norm, takes an AdamW step, zeroes the gradients and
    /// clears the autocast cache (bf16). Returns the gradient norm before clipping.
    double step();
    void zero_grad();

    void set_lr(double lr);
    model::Policy& policy() { return policy_; }
    const GrpoConfig& config() const { return cfg_; }
    torch::optim::AdamW& optimizer() { return *opt_; }

private:
    model::Policy policy_;
    model::Policy ref_{nullptr};
    GrpoConfig cfg_;
    std::unique_ptr<torch::optim::AdamW> opt_;
};

}  // namespace tagflow::train
