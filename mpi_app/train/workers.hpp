// SPDX-License-Identifier: Apache-2.0
// workers: the RL roles on top of a TrainEngine (veRL 0.7's Actor/Critic/Reference workers).
// ActorWorker: policy log-probs and entropy, the PPO clipped surrogate (asymmetric and dual
// clip), entropy bonus, optional KL loss to the reference, micro-batched updates with mini-
// batches and epochs. CriticWorker: per-token values and the clipped value loss with its own
// engine and optimiser. ReferenceWorker: a frozen policy copy giving reference log-probs.
// Every worker takes and returns plain per-sample vectors (TrainSeq in, vector<float> out),
// so a critic on other ranks needs only tokens, values and returns to cross.
// Does not choose samples, compute advantages (train/algorithms.hpp) or move data between
// rank groups: update() is collective over the Collectives it is given, nothing else.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "model/llama.hpp"
#include "model/value_model.hpp"
#include "train/algorithms.hpp"
#include "train/engine.hpp"
#include "train/rollout_correction.hpp"

namespace tagflow::train {

// ---- model handles ----

/// A Llama/Qwen2 policy: forward = logits [B,T,V]; forward_rows = policy_logits_rows.
ModelHandle policy_handle(model::LlamaModel m);
/// LlamaModelImpl::forward's logits at some positions only: `rows` [N] int64 index the flattened
/// [B*T] positions of tokens [B,T]; returns [N,V]. The decoder runs on every position, the output
/// projection (the main cost with a 150k-token vocabulary) only on these rows.
torch::Tensor policy_logits_rows(model::LlamaModelImpl& m, const torch::Tensor& tokens, const torch::Tensor& rows);
/// A critic: forward = values [B,T].
ModelHandle value_handle(model::ValueModel m);
/// A frozen-weights copy of a Llama policy (same config, parameters copied).
model::LlamaModel clone_llama(const model::LlamaModel& m);

// ---- statistics ----

/// One update's statistics, already combined over the data-parallel group on every rank.
/// Means are over response tokens (loss_mask 1) of the whole batch; losses are the global
/// loss (sum of the ranks' shares), averaged over the optimiser steps of the update.
struct ActorStats {
    double loss = 0.0;  ///< total loss: pg - entropy_coef * entropy + kl_coef * kl
    double pg_loss = 0.0;
    double kl = 0.0;  ///< mean KL(policy || reference) by the KL loss mode (0 without ref_logprobs)
    double entropy = 0.0;
    double clip_frac = 0.0;
    double clip_frac_lower = 0.0;    ///< dual-clip bound hits
    double ppo_kl = 0.0;             ///< mean (old_logp - logp)
    double logprob_diff_mean = 0.0;  ///< mean |rollout logprob - trainer logprob|
    double grad_norm = 0.0;          ///< mean over optimiser steps, before clipping
    int64_t tokens = 0;              ///< response tokens of the batch (each epoch counted once)
    /// Input slots of the training forward/backward passes (every epoch): those holding a token,
    /// and all of them (padding included; TrainEngineConfig::pack removes most of it).
    int64_t real_tokens = 0, token_slots = 0;
    int32_t optimizer_steps = 0;  ///< updates applied
    int32_t skipped_steps = 0;    ///< updates dropped: non-finite loss or gradient norm (same on every rank)
};

struct CriticStats {
    double vf_loss = 0.0;
    double vf_clip_frac = 0.0;
    double vpred_mean = 0.0;
    double vf_explained_var = 0.0;  ///< 1 - Var(R - V) / Var(R) at the first epoch
    double grad_norm = 0.0;
    int64_t tokens = 0;
    int32_t optimizer_steps = 0;
    int32_t skipped_steps = 0;  ///< as ActorStats::skipped_steps
};

/// How one update() walks the local batch: `epochs` passes, each split into `mini_batches`
/// consecutive chunks with one optimiser step per chunk (veRL's ppo_epochs and
/// ppo_mini_batch_size). Every rank of the group must pass the same numbers.
struct UpdateSchedule {
    int32_t mini_batches = 1;
    int32_t epochs = 1;
};

// ---- off-policy correction ----

/// Decoupled PPO's correction of `local` (train/rollout_correction.hpp): for every sequence the
/// importance weights of old_logprobs (the proximal policy) against rollout_logprobs (the
/// behaviour policy) go into is_weights (cfg.is != kOff), a rejected sequence gets loss_mask all 0
/// and a rejected token (--rollout-rs token) loss_mask 0, so they leave the loss and its global
/// token and sequence counts. Returns this rank's
/// statistics. Throws tagflow::Error naming the sample when its log-probs are missing or mis-sized.
CorrectionStats apply_rollout_correction(std::vector<TrainSeq>& local, const RolloutCorrectionConfig& cfg);
/// --rollout-is-batch-normalize: divides every importance weight of `local` by `factor`
/// (batch_norm_factor of the whole train group's sums). Throws tagflow::Error unless factor > 0.
void scale_is_weights(std::vector<TrainSeq>& local, double factor);

// ---- workers ----

struct ActorConfig {
    double clip_eps = 0.2;       ///< clip_ratio_low
    double clip_eps_high = 0.0;  ///< clip_ratio_high; <= 0: same as clip_eps
    double dual_clip = 0.0;      ///< dual-clip constant c > 1 (veRL: 3); 0 = off
    double entropy_coef = 0.0;
    double kl_loss_coef = 0.0;  ///< > 0: KL to the reference as a loss term (needs ref_logprobs)
    KlMode kl_loss_mode = KlMode::kK3;
    LossAgg loss_agg = LossAgg::kTokenMean;
    double loss_norm_tokens = 0.0;  ///< seq-mean-token-sum-norm's constant (the response token limit)
    double temperature = 1.0;       ///< the rollout temperature (log-probs of logits / T)
};

class ActorWorker {
public:
    /// Throws ConfigError on a bad config or a frozen engine.
    ActorWorker(std::unique_ptr<TrainEngine> engine, const ActorConfig& cfg);

    /// Log-probs of each sequence's response tokens under the current weights (no grad); with
    /// `entropy` also the per-token entropies. Local: no communication.
    std::vector<std::vector<float>> compute_log_probs(const std::vector<TrainSeq>& batch,
                                                      std::vector<std::vector<float>>* entropy = nullptr);

    /// Forward/backward of the actor loss on this rank's share, normalised by `global`
    /// counts; adds to the gradients, does not step or communicate. Needs old_logprobs and
    /// advantages (and ref_logprobs when kl_loss_coef > 0) on every sequence. Returns LOCAL
    /// statistics: loss terms are this rank's share, means are over local tokens.
    ActorStats accumulate(const std::vector<TrainSeq>& local, const BatchCounts& global);

    /// COLLECTIVE over comm (nullptr = one rank): the whole PPO update of this rank's
    /// share: per mini-batch, global counts, accumulate, gradient all-reduce, one step. A
    /// mini-batch whose loss (on any rank) or all-reduced gradient norm is NaN or inf is not
    /// applied (skipped_steps; TrainEngine::step): every rank of the group decides alike.
    ActorStats update(const std::vector<TrainSeq>& local, Collectives* comm, const UpdateSchedule& sched = {});

    TrainEngine& engine() { return *engine_; }
    const ActorConfig& config() const { return cfg_; }

private:
    std::unique_ptr<TrainEngine> engine_;
    ActorConfig cfg_;
};

struct CriticConfig {
    double clip_range = 0.5;  ///< value clipping around old_values (veRL cliprange_value); <= 0 off
    LossAgg loss_agg = LossAgg::kTokenMean;
    double loss_norm_tokens = 0.0;  ///< seq-mean-token-sum-norm's constant
};

class CriticWorker {
public:
    CriticWorker(std::unique_ptr<TrainEngine> engine, const CriticConfig& cfg);

    /// Value of the state before each response token (slot prompt_len - 1 + j), no grad.
    std::vector<std::vector<float>> compute_values(const std::vector<TrainSeq>& batch);

    /// Local forward/backward of the value loss (needs returns; old_values when clip_range > 0).
    CriticStats accumulate(const std::vector<TrainSeq>& local, const BatchCounts& global);

    /// COLLECTIVE over comm (the critic group; nullptr = one rank): the whole value update.
    CriticStats update(const std::vector<TrainSeq>& local, Collectives* comm, const UpdateSchedule& sched = {});

    TrainEngine& engine() { return *engine_; }
    const CriticConfig& config() const { return cfg_; }

private:
    std::unique_ptr<TrainEngine> engine_;
    CriticConfig cfg_;
};

class ReferenceWorker {
public:
    /// `engine` should be built with TrainEngineConfig::trainable = false (a frozen copy, e.g.
    /// policy_handle(clone_llama(policy))). `temperature` as in ActorConfig.
    ReferenceWorker(std::unique_ptr<TrainEngine> engine, double temperature);

    /// Reference log-probs of each sequence's response tokens. Local: no communication.
    std::vector<std::vector<float>> compute_ref_log_probs(const std::vector<TrainSeq>& batch);

    TrainEngine& engine() { return *engine_; }

private:
    std::unique_ptr<TrainEngine> engine_;
    double temperature_;
};

}  // namespace tagflow::train
