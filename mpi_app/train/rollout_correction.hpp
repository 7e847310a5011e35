// SPDX-License-Identifier: Apache-2.0
// rollout_correction: off-policy correction of one sample whose tokens were sampled by a
// behaviour policy (the rollout engine, possibly with older weights: async modes, generations
// paused across a weight update) other than the proximal policy the PPO ratio is taken against
// (--old-logprobs recompute: the trainer's own forward before the update, decoupled PPO).
// Truncated importance weights min(pi_old / pi_behaviour, C) per token or per sequence;
// rejection of the tokens whose ratio leaves a band [lower, upper], or of a whole sequence whose
// ratio (product or geometric mean over its tokens) leaves it; and a veto of any sequence holding
// a token whose ratio is below a floor: veRL's rollout_is / rollout_rs /
// rollout_token_veto_threshold (algorithm.rollout_correction). Pure
// functions on std::vector (no torch, no MPI). Does not compute log-probs or losses: the actor
// multiplies its per-token policy loss by the weights (train/losses.hpp, train/workers.hpp).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace tagflow::train {

/// Where the importance weight lives (--rollout-is): off, one per token, one per sequence.
enum class IsLevel { kOff, kToken, kSequence };
/// What a rejection leaves out and which ratio decides it (--rollout-rs): off; single tokens, each
/// by its own ratio; the whole sequence, by the product over its tokens or by their geometric mean.
enum class RsLevel { kOff, kToken, kSequence, kGeometric };
/// "off" (or "none"), "token", "sequence". Throws ConfigError naming the value otherwise.
IsLevel parse_is_level(const std::string& name);
/// "off" (or "none"), "token", "sequence", "geometric". Throws ConfigError naming the value otherwise.
RsLevel parse_rs_level(const std::string& name);
std::string to_string(IsLevel l);
std::string to_string(RsLevel l);

struct RolloutCorrectionConfig {
    IsLevel is = IsLevel::kOff;
    double is_threshold = 2.0;  ///< C: weights are min(ratio, C) (veRL rollout_is_threshold)
    RsLevel rs = RsLevel::kOff;
    double rs_upper = 0.0;  ///< reject above this (veRL rollout_rs_threshold); <= 0: is_threshold
    double rs_lower = 0.0;  ///< reject below this (veRL rollout_rs_threshold_lower); <= 0: 1 / upper
    /// Reject the whole sequence when any token's ratio, before the safety clamp, is below this
    /// (veRL rollout_token_veto_threshold); <= 0: off. Independent of is and rs.
    double veto = 0.0;
    /// Divide every weight by the batch's mean weight, so that they average 1 (veRL
    /// rollout_is_batch_normalize): truncation then no longer shrinks the step. The mean is over
    /// the whole train group's batch, of the weights before any rejection (norm_sum / norm_count).
    bool batch_normalize = false;
};

/// The correction of one sequence. Every log-ratio is old - behaviour over the tokens whose mask
/// is 1 (an empty mask: all), clamped to [-20, 20] before the exp (veRL's safety bound), so every
/// value is finite whatever the log-probs are.
struct SeqCorrection {
    /// kToken: one weight per response token, min(exp(clamp(old_t - beh_t)), C), 0 where the mask
    /// is 0; kSequence: one weight, min(exp(clamp(sum of the log-ratios)), C); kOff: empty.
    std::vector<float> weights;
    /// The ratio before truncation: the largest token ratio (kToken, and kOff) or the sequence
    /// ratio (kSequence); 1 for a sequence without a valid token.
    double ratio_max = 1.0;
    /// Sum and count of the weights the loss uses (kOff: the token-level weights it would use).
    double weight_sum = 0.0, weight_count = 0.0;
    /// Sum and count of the truncated weights over every token with mask 1 (kToken, and kOff), or
    /// the sequence's weight and 1 (kSequence; 0 and 0 without such a token), rejected or not:
    /// what --rollout-is-batch-normalize averages (veRL takes the mean over the response mask).
    double norm_sum = 0.0, norm_count = 0.0;
    /// The whole sequence is out of the loss: its ratio (product or geometric mean) was outside
    /// [lower, upper] (rs kSequence / kGeometric), or a token fell below the veto.
    bool rejected = false;
    /// rs kToken (and the sequence not rejected): 1 where the token stays in the loss, 0 where its
    /// ratio left the band (masked tokens stay 1: the mask already leaves them out). Empty otherwise.
    std::vector<uint8_t> token_keep;
    /// Response tokens (mask 1) the rejection leaves out: every one of a rejected sequence, or those
    /// token_keep drops.
    int64_t rejected_tokens = 0;
};

/// Throws tagflow::Error when the three vectors' lengths differ (mask may be empty).
SeqCorrection correct_sequence(const std::vector<float>& old_logprobs, const std::vector<float>& behaviour_logprobs,
                               const std::vector<uint8_t>& mask, const RolloutCorrectionConfig& cfg);

/// The batch statistics written to /steps: mean of the weights used (tokens and sequences still in
/// the loss), largest ratio before truncation, sequences and tokens rejected. Summed / maxed over
/// samples and ranks.
struct CorrectionStats {
    double weight_sum = 0.0, weight_count = 0.0, ratio_max = 0.0;
    double norm_sum = 0.0, norm_count = 0.0;  ///< SeqCorrection's, summed (rejected sequences too)
    int64_t rejected = 0, rejected_tokens = 0;
    void add(const SeqCorrection& c);
    double weight_mean() const { return weight_count > 0 ? weight_sum / weight_count : 1.0; }
};

/// The factor --rollout-is-batch-normalize divides the weights by: norm_sum / norm_count over the
/// whole batch (every rank's sums added), or 1 when there is no weight or the mean is not above
/// 1e-8 (veRL's guard).
double batch_norm_factor(double norm_sum, double norm_count);

}  // namespace tagflow::train
