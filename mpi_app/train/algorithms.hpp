// SPDX-License-Identifier: Apache-2.0
// algorithms: the RL algorithm maths on per-sample data, as pure functions on std::vector
// (no torch, no MPI): advantage estimators "grpo", "rloo", "reinforce_pp" (REINFORCE++)
// and "gae" (PPO with a critic), token-level rewards with an optional KL penalty
// (kl_in_reward), discounted returns, masked whitening, and the option names of the
// estimator / KL / loss-aggregation modes (veRL's names). Every function works on the
// response tokens of each sample only: index j is the j-th generated token.
// Does not compute losses or touch models (see train/losses.hpp, train/workers.hpp).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace tagflow::train {

/// Advantage estimator (--algo). grpo/rloo/reinforce_pp(_baseline) need no critic; gae needs values.
enum class AdvEstimator { kGrpo, kRloo, kReinforcePP, kReinforcePPBaseline, kGae };
/// "grpo", "rloo", "reinforce_pp" (or "reinforce_plus_plus"), "reinforce_pp_baseline" (or
/// "reinforce_plus_plus_baseline"), "gae" (or "ppo").
/// Throws ConfigError naming the value and the choices otherwise.
AdvEstimator parse_adv_estimator(const std::string& name);
std::string to_string(AdvEstimator e);

/// Per-token KL estimator between the policy (logp) and the reference (ref_logp), as in
/// veRL's kl_penalty: k1 "kl" = logp - ref; k2 "mse" = 0.5 (logp - ref)^2; k3
/// "low_var_kl" = exp(r) - r - 1 with r = ref - logp clamped to [-20, 20] first (so the exp never
/// overflows, whatever a masked slot holds), the result clamped to [-10, 10]; "abs" = |logp - ref|.
enum class KlMode { kK1, kK2, kK3, kAbs };
/// "kl"/"k1", "mse"/"k2", "low_var_kl"/"k3", "abs". Throws ConfigError otherwise.
KlMode parse_kl_mode(const std::string& name);
std::string to_string(KlMode m);

/// How per-token losses become one number (veRL's loss_agg_mode), always normalised by
/// GLOBAL counts so that summing the ranks' gradients gives the global loss:
/// "token-mean": sum over all tokens / global token count;
/// "seq-mean-token-sum": sum over sequences of (sum over its tokens) / global sequence count;
/// "seq-mean-token-mean": sum over sequences of (mean over its tokens) / global sequence count;
/// "seq-mean-token-sum-norm" (Dr.GRPO): sum over all tokens / (global sequence count x a constant
/// token count, the response token limit), i.e. seq-mean-token-sum divided by that constant.
enum class LossAgg { kTokenMean, kSeqMeanTokenSum, kSeqMeanTokenMean, kSeqMeanTokenSumNorm };
LossAgg parse_loss_agg(const std::string& name);  ///< throws ConfigError on unknown names
std::string to_string(LossAgg a);

/// KL estimate of one token (see KlMode).
float kl_value(float logp, float ref_logp, KlMode mode);
/// kl_value over two equally long vectors (throws tagflow::Error on a size mismatch).
std::vector<float> kl_per_token(const std::vector<float>& logp, const std::vector<float>& ref_logp, KlMode mode);

/// GRPO: score - mean(group), divided by (std of the group + eps) when `normalize_std` (veRL's
/// norm_adv_by_std_in_grpo; false = Dr.GRPO). The std is the unbiased one (n - 1, as veRL, TRL
/// and OpenRLHF: torch.std) unless `unbiased_std` is false (population std, n). Groups are
/// given by id (any order, not necessarily consecutive); a group whose scores are all equal
/// gets exactly 0, and so does a group of one (no baseline exists; veRL passes the raw score
/// through there). Throws if the sizes differ.
std::vector<float> grpo_advantages(const std::vector<float>& scores, const std::vector<int64_t>& groups,
                                   bool normalize_std, bool unbiased_std = true, double eps = 1e-6);

/// REINFORCE++-baseline before whitening: score - mean(group) (a group of one gets 0).
std::vector<float> group_centred(const std::vector<float>& scores, const std::vector<int64_t>& groups);

/// RLOO: score minus the mean of the OTHER samples of its group, i.e. n/(n-1) (r - mean).
/// A group of one has no baseline and gets 0.
std::vector<float> rloo_advantages(const std::vector<float>& scores, const std::vector<int64_t>& groups);

/// Token-level rewards of one response of `n` tokens: -kl_coef * kl[j] on every token
/// (kl may be null = no penalty) and `score` added on the last token whose mask is 1 (the
/// last token when `mask` is empty). Masked-out tokens get 0.
std::vector<float> token_level_rewards(float score, size_t n, const std::vector<uint8_t>& mask,
                                       const std::vector<float>* kl, double kl_coef);

/// Discounted returns G_j = r_j + gamma * G_{j+1} over the tokens whose mask is 1. Tokens
/// with mask 0 (environment tokens inside a multi-turn response) are skipped: they get 0 and
/// the recursion passes through them unchanged. With a plain response (no inner mask) this
/// is veRL's REINFORCE++ return. Empty mask = all valid.
std::vector<float> discounted_returns(const std::vector<float>& rewards, const std::vector<uint8_t>& mask,
                                      double gamma);

/// Generalised advantage estimation of one response: delta_j = r_j + gamma V_{j+1} - V_j
/// (V after the last token = 0), A_j = delta_j + gamma lam A_{j+1}, returns = A + V.
/// Tokens with mask 0 (e.g. environment tokens) are skipped: the recursion passes through
/// them unchanged (veRL's masked GAE). No whitening here (see whiten()).
struct GaeResult {
    std::vector<float> advantages, returns;
};
GaeResult gae(const std::vector<float>& rewards, const std::vector<float>& values, const std::vector<uint8_t>& mask,
              double gamma, double lam);

/// Whitens x in place over every token whose mask is 1 across ALL samples:
/// (x - mean) / sqrt(unbiased var + eps) (mean added back when !shift_mean). Masked-out
/// tokens become 0. `masks` may be empty (all valid) or have one entry per sample, each
/// empty (all valid) or as long as the sample. Fewer than 2 valid tokens: only centred.
void whiten(std::vector<std::vector<float>>& x, const std::vector<std::vector<uint8_t>>& masks, bool shift_mean = true,
            double eps = 1e-8);

/// What compute_advantages needs of one sample.
struct AdvSample {
    int64_t group = 0;                ///< prompt group (grpo, rloo)
    float score = 0.0f;               ///< outcome reward of the whole response
    size_t n_resp = 0;                ///< response tokens
    std::vector<uint8_t> mask;        ///< per response token; empty = all 1
    std::vector<float> values;        ///< critic values per response token (gae only)
    std::vector<float> logprobs;      ///< behaviour log-probs per token (kl_in_reward only)
    std::vector<float> ref_logprobs;  ///< reference log-probs per token (kl_in_reward only)
};

struct AdvConfig {
    AdvEstimator estimator = AdvEstimator::kGrpo;
    bool norm_adv_by_std = true;    ///< grpo: divide by the group std (veRL norm_adv_by_std_in_grpo)
    bool grpo_unbiased_std = true;  ///< grpo: unbiased (n - 1) std; false: population std (n)
    double gamma = 1.0;             ///< reinforce_pp, gae
    double lam = 1.0;               ///< gae
    bool kl_in_reward = false;      ///< subtract kl_coef * KL(logprobs || ref) from token rewards
    double kl_coef = 0.001;
    KlMode kl_mode = KlMode::kK1;
    bool whiten = true;  ///< gae, reinforce_pp(_baseline): whiten advantages over the whole batch
};

struct AdvResult {
    /// Per sample, per response token (outcome estimators broadcast one value over tokens).
    std::vector<std::vector<float>> advantages;
    /// Per sample, per response token: critic targets (gae: A + V before whitening;
    /// reinforce_pp: discounted returns; grpo/rloo: the score-to-go = token-level return).
    std::vector<std::vector<float>> returns;
    /// One number per sample for logs and /consumed: the sequence advantage (grpo, rloo) or
    /// the mean advantage over its valid tokens.
    std::vector<float> seq_advantages;
    double kl_mean = 0.0;  ///< mean per-token KL penalty over valid tokens (kl_in_reward), else 0
    /// veRL's current_kl for the adaptive KL controller: the mean over samples of each sample's
    /// mean KL over its valid tokens (kl_in_reward), else 0.
    double kl_seq_mean = 0.0;
};

/// veRL's AdaptiveKLController (Ziegler et al. 2019, arXiv:1909.08593): after each step
/// coef *= 1 + clip(kl / target - 1, -0.2, 0.2) * n_samples / horizon. Fixed when horizon <= 0.
struct KlController {
    double coef = 0.0;
    double target = 0.1;     ///< veRL target_kl
    double horizon = 10000;  ///< veRL horizon; <= 0: fixed coefficient
    void update(double current_kl, double n_samples);
};

/// The whole advantage computation of one batch (every sample of the step, so grouping and
/// whitening see the global batch). Outcome estimators use score - kl_coef * sum(kl) as the
/// sequence score when kl_in_reward. Tokens whose mask is 0 (multi-turn environment tokens)
/// take no KL, no reward, and no part in GAE, returns or whitening; their advantage is 0.
/// Throws tagflow::Error on missing/mis-sized inputs (values for gae, logprobs/ref_logprobs
/// for kl_in_reward) naming the sample.
AdvResult compute_advantages(const AdvConfig& cfg, const std::vector<AdvSample>& samples);

}  // namespace tagflow::train
