// SPDX-License-Identifier: Apache-2.0
// losses: the per-token tensor maths of the workers (veRL's core_algos): token log-probs
// and entropy from logits, the PPO clipped surrogate with optional asymmetric and dual clip,
// the clipped value loss, KL penalties, and the aggregation of a per-token loss into one
// number normalised by GLOBAL counts. Pure tensor functions; no modules, no optimiser.
#pragma once
#include <torch/nn/module.h>

#include "train/algorithms.hpp"
#include "train/engine.hpp"

namespace tagflow::train {

/// log_softmax(logits / temperature)[target] ([n,T,V], [n,T] -> [n,T], fp32). With
/// `entropy` also the entropy of that distribution per slot.
torch::Tensor token_log_probs(const torch::Tensor& logits, const torch::Tensor& targets, double temperature,
                              torch::Tensor* entropy = nullptr);

/// The KL estimator of KlMode per element (k3: ref - logp clamped to [-20, 20] before the exp,
/// the result to [-10, 10], as veRL does: finite values and gradients for any input).
torch::Tensor kl_penalty(const torch::Tensor& logp, const torch::Tensor& ref_logp, KlMode mode);

/// loss [n,T] x mask [n,T] -> scalar by `mode` (see LossAgg), over GLOBAL counts: summing
/// the results of every micro-batch on every rank gives the loss of the whole batch.
/// `norm_tokens` is seq-mean-token-sum-norm's constant (the response token limit; unused otherwise).
/// Masked slots contribute exactly 0 even when their loss is not finite. A sequence is a row,
/// or, when `seq_id` is defined (packed rows: MicroBatch::seq_id, n_seq = MicroBatch::index.size()),
/// the slots with one id in 0..n_seq-1 (padding slots hold n_seq); only seq-mean-token-mean needs it.
torch::Tensor agg_loss(const torch::Tensor& loss, const torch::Tensor& mask, LossAgg mode, const BatchCounts& global,
                       double norm_tokens = 0.0, const torch::Tensor& seq_id = {}, int64_t n_seq = 0);
/// agg_loss over one micro-batch (its mask and, packed, its sequence ids).
torch::Tensor agg_loss(const torch::Tensor& loss, const MicroBatch& mb, LossAgg mode, const BatchCounts& global,
                       double norm_tokens = 0.0);

struct PolicyLossTerms {
    torch::Tensor loss;           ///< [n,T] per-token surrogate loss
    torch::Tensor clipped;        ///< [n,T] 1 where the clipped branch was taken (float, no grad)
    torch::Tensor clipped_lower;  ///< [n,T] 1 where the dual clip bound (A < 0) was taken
};
/// ratio = exp(clamp(logp - old_logp, -20, 20));
/// loss = max(-A r, -A clip(r, 1 - clip_low, 1 + clip_high)) and, with dual_clip c > 1,
/// min(that, -A c) where A < 0 (veRL's compute_policy_loss "vanilla"); then, when `is_weights`
/// is defined (the truncated importance weights of train/rollout_correction.hpp, [n,T] or
/// broadcastable), multiplied by them as constants (no gradient flows into the weights).
PolicyLossTerms ppo_policy_loss(const torch::Tensor& logp, const torch::Tensor& old_logp, const torch::Tensor& adv,
                                double clip_low, double clip_high, double dual_clip = 0.0,
                                const torch::Tensor& is_weights = {});

struct ValueLossTerms {
    torch::Tensor loss;     ///< [n,T] 0.5 * max((v - R)^2, (clip(v, old +- eps) - R)^2)
    torch::Tensor clipped;  ///< [n,T] 1 where the clipped term was larger
};
/// Clipped value loss; clip_range <= 0 gives the plain 0.5 (v - R)^2.
ValueLossTerms value_loss(const torch::Tensor& vpred, const torch::Tensor& old_values, const torch::Tensor& returns,
                          double clip_range);

}  // namespace tagflow::train
