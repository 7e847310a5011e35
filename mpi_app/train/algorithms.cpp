// SPDX-License-Identifier: Apache-2.0
// algorithms: advantage estimators, token-level rewards, returns, GAE and whitening on plain
// vectors (double accumulation). See algorithms.hpp; no torch, no MPI.
#include "train/algorithms.hpp"

#include <algorithm>
#include <cmath>
#include <map>

#include "common/error.hpp"

namespace tagflow::train {
namespace {

bool valid(const std::vector<uint8_t>& mask, size_t j) { return mask.empty() || mask[j] != 0; }

void check_mask(const std::vector<uint8_t>& mask, size_t n, const char* what) {
    if (!mask.empty() && mask.size() != n)
        throw Error(std::string(what) + ": mask has " + std::to_string(mask.size()) + " entries for " +
                    std::to_string(n) + " tokens");
}

// Members of each group, in first-seen order.
std::map<int64_t, std::vector<size_t>> members(const std::vector<float>& scores, const std::vector<int64_t>& groups,
                                               const char* what) {
    if (scores.size() != groups.size())
        throw Error(std::string(what) + ": " + std::to_string(scores.size()) + " scores but " +
                    std::to_string(groups.size()) + " group ids");
    std::map<int64_t, std::vector<size_t>> m;
    for (size_t i = 0; i < groups.size(); ++i) m[groups[i]].push_back(i);
    return m;
}

}  // namespace

AdvEstimator parse_adv_estimator(const std::string& name) {
    if (name == "grpo") return AdvEstimator::kGrpo;
    if (name == "rloo") return AdvEstimator::kRloo;
    if (name == "reinforce_pp" || name == "reinforce_plus_plus") return AdvEstimator::kReinforcePP;
    if (name == "reinforce_pp_baseline" || name == "reinforce_plus_plus_baseline")
        return AdvEstimator::kReinforcePPBaseline;
    if (name == "gae" || name == "ppo") return AdvEstimator::kGae;
    throw ConfigError("unknown advantage estimator '" + name +
                      "' (choose grpo, rloo, reinforce_pp, reinforce_pp_baseline, gae)");
}

std::string to_string(AdvEstimator e) {
    switch (e) {
        case AdvEstimator::kGrpo: return "grpo";
        case AdvEstimator::kRloo: return "rloo";
        case AdvEstimator::kReinforcePP: return "reinforce_pp";
        case AdvEstimator::kReinforcePPBaseline: return "reinforce_pp_baseline";
        case AdvEstimator::kGae: return "gae";
    }
    return "?";
}

KlMode parse_kl_mode(const std::string& name) {
    if (name == "kl" || name == "k1") return KlMode::kK1;
    if (name == "mse" || name == "k2") return KlMode::kK2;
    if (name == "low_var_kl" || name == "k3") return KlMode::kK3;
    if (name == "abs") return KlMode::kAbs;
    throw ConfigError("unknown KL mode '" + name + "' (choose kl, mse, low_var_kl, abs)");
}

std::string to_string(KlMode m) {
    switch (m) {
        case KlMode::kK1: return "kl";
        case KlMode::kK2: return "mse";
        case KlMode::kK3: return "low_var_kl";
        case KlMode::kAbs: return "abs";
    }
    return "?";
}

LossAgg parse_loss_agg(const std::string& name) {
    if (name == "token-mean") return LossAgg::kTokenMean;
    if (name == "seq-mean-token-sum") return LossAgg::kSeqMeanTokenSum;
    if (name == "seq-mean-token-mean") return LossAgg::kSeqMeanTokenMean;
    if (name == "seq-mean-token-sum-norm") return LossAgg::kSeqMeanTokenSumNorm;
    throw ConfigError("unknown loss aggregation '" + name +
                      "' (choose token-mean, seq-mean-token-sum, seq-mean-token-mean, seq-mean-token-sum-norm)");
}

std::string to_string(LossAgg a) {
    switch (a) {
        case LossAgg::kTokenMean: return "token-mean";
        case LossAgg::kSeqMeanTokenSum: return "seq-mean-token-sum";
        case LossAgg::kSeqMeanTokenMean: return "seq-mean-token-mean";
        case LossAgg::kSeqMeanTokenSumNorm: return "seq-mean-token-sum-norm";
    }
    return "?";
}

float kl_value(float logp, float ref_logp, KlMode mode) {
    const double d = static_cast<double>(logp) - static_cast<double>(ref_logp);
    switch (mode) {
        case KlMode::kK1: return static_cast<float>(d);
        case KlMode::kK2: return static_cast<float>(0.5 * d * d);
        case KlMode::kAbs: return static_cast<float>(std::fabs(d));
        case KlMode::kK3: {
            const double r = std::clamp(-d, -20.0, 20.0);  // r = ref - logp, clamped before the exp (veRL)
            return static_cast<float>(std::clamp(std::exp(r) - r - 1.0, -10.0, 10.0));
        }
    }
    return 0.0f;
}

std::vector<float> kl_per_token(const std::vector<float>& logp, const std::vector<float>& ref_logp, KlMode mode) {
    if (logp.size() != ref_logp.size())
        throw Error("kl_per_token: " + std::to_string(logp.size()) + " log-probs but " +
                    std::to_string(ref_logp.size()) + " reference log-probs");
    std::vector<float> out(logp.size());
    for (size_t j = 0; j < logp.size(); ++j) out[j] = kl_value(logp[j], ref_logp[j], mode);
    return out;
}

std::vector<float> grpo_advantages(const std::vector<float>& scores, const std::vector<int64_t>& groups,
                                   bool normalize_std, bool unbiased_std, double eps) {
    std::vector<float> adv(scores.size(), 0.0f);
    for (const auto& [g, idx] : members(scores, groups, "grpo_advantages")) {
        const double n = static_cast<double>(idx.size());
        if (idx.size() < 2) continue;  // a group of one has no baseline
        double mean = 0.0;
        for (size_t i : idx) mean += scores[i];
        mean /= n;
        double var = 0.0;
        for (size_t i : idx) var += (scores[i] - mean) * (scores[i] - mean);
        if (var == 0.0) continue;  // exact 0 for equal scores
        const double denom = normalize_std ? std::sqrt(var / (unbiased_std ? n - 1.0 : n)) + eps : 1.0;
        for (size_t i : idx) adv[i] = static_cast<float>((scores[i] - mean) / denom);
    }
    return adv;
}

std::vector<float> group_centred(const std::vector<float>& scores, const std::vector<int64_t>& groups) {
    std::vector<float> adv(scores.size(), 0.0f);
    for (const auto& [g, idx] : members(scores, groups, "group_centred")) {
        if (idx.size() < 2) continue;
        double mean = 0.0;
        for (size_t i : idx) mean += scores[i];
        mean /= static_cast<double>(idx.size());
        for (size_t i : idx) adv[i] = static_cast<float>(scores[i] - mean);
    }
    return adv;
}

void KlController::update(double current_kl, double n_samples) {
    if (!(horizon > 0.0) || !(target > 0.0) || !std::isfinite(current_kl)) return;
    const double err = std::clamp(current_kl / target - 1.0, -0.2, 0.2);
    coef *= 1.0 + err * n_samples / horizon;
}

std::vector<float> rloo_advantages(const std::vector<float>& scores, const std::vector<int64_t>& groups) {
    std::vector<float> adv(scores.size(), 0.0f);
    for (const auto& [g, idx] : members(scores, groups, "rloo_advantages")) {
        const double n = static_cast<double>(idx.size());
        if (idx.size() < 2) continue;
        double sum = 0.0;
        for (size_t i : idx) sum += scores[i];
        for (size_t i : idx) adv[i] = static_cast<float>(scores[i] - (sum - scores[i]) / (n - 1.0));
    }
    return adv;
}

std::vector<float> token_level_rewards(float score, size_t n, const std::vector<uint8_t>& mask,
                                       const std::vector<float>* kl, double kl_coef) {
    check_mask(mask, n, "token_level_rewards");
    if (kl && kl->size() != n)
        throw Error("token_level_rewards: " + std::to_string(kl->size()) + " KL values for " + std::to_string(n) +
                    " tokens");
    std::vector<float> r(n, 0.0f);
    size_t last = n;
    for (size_t j = 0; j < n; ++j) {
        if (!valid(mask, j)) continue;
        last = j;
        if (kl) r[j] = static_cast<float>(-kl_coef * (*kl)[j]);
    }
    if (last < n) r[last] += score;
    return r;
}

std::vector<float> discounted_returns(const std::vector<float>& rewards, const std::vector<uint8_t>& mask,
                                      double gamma) {
    check_mask(mask, rewards.size(), "discounted_returns");
    std::vector<float> ret(rewards.size(), 0.0f);
    double running = 0.0;
    for (size_t j = rewards.size(); j-- > 0;) {
        if (!valid(mask, j)) continue;
        running = rewards[j] + gamma * running;
        ret[j] = static_cast<float>(running);
    }
    return ret;
}

GaeResult gae(const std::vector<float>& rewards, const std::vector<float>& values, const std::vector<uint8_t>& mask,
              double gamma, double lam) {
    const size_t n = rewards.size();
    if (values.size() != n)
        throw Error("gae: " + std::to_string(values.size()) + " values for " + std::to_string(n) + " tokens");
    check_mask(mask, n, "gae");
    GaeResult out;
    out.advantages.assign(n, 0.0f);
    out.returns.assign(n, 0.0f);
    double next_value = 0.0, last_gae = 0.0;
    for (size_t j = n; j-- > 0;) {
        if (!valid(mask, j)) continue;
        const double delta = rewards[j] + gamma * next_value - values[j];
        last_gae = delta + gamma * lam * last_gae;
        next_value = values[j];
        out.advantages[j] = static_cast<float>(last_gae);
        out.returns[j] = static_cast<float>(last_gae + values[j]);
    }
    return out;
}

void whiten(std::vector<std::vector<float>>& x, const std::vector<std::vector<uint8_t>>& masks, bool shift_mean,
            double eps) {
    if (!masks.empty() && masks.size() != x.size())
        throw Error("whiten: " + std::to_string(masks.size()) + " masks for " + std::to_string(x.size()) + " samples");
    static const std::vector<uint8_t> kAll;
    auto mask_of = [&](size_t i) -> const std::vector<uint8_t>& { return masks.empty() ? kAll : masks[i]; };
    double n = 0, sum = 0;
    for (size_t i = 0; i < x.size(); ++i) {
        check_mask(mask_of(i), x[i].size(), "whiten");
        for (size_t j = 0; j < x[i].size(); ++j)
            if (valid(mask_of(i), j)) {
                n += 1;
                sum += x[i][j];
            }
    }
    if (n == 0) return;
    const double mean = sum / n;
    double ss = 0;
    for (size_t i = 0; i < x.size(); ++i)
        for (size_t j = 0; j < x[i].size(); ++j)
            if (valid(mask_of(i), j)) ss += (x[i][j] - mean) * (x[i][j] - mean);
    const double scale = n >= 2 ? 1.0 / std::sqrt(ss / (n - 1) + eps) : 1.0;
    for (size_t i = 0; i < x.size(); ++i)
        for (size_t j = 0; j < x[i].size(); ++j) {
            if (!valid(mask_of(i), j)) {
                x[i][j] = 0.0f;
                continue;
            }
            double w = (x[i][j] - mean) * scale;
            if (!shift_mean) w += mean;
            x[i][j] = static_cast<float>(w);
        }
}

AdvResult compute_advantages(const AdvConfig& cfg, const std::vector<AdvSample>& samples) {
    const size_t N = samples.size();
    AdvResult res;
    res.advantages.resize(N);
    res.returns.resize(N);
    res.seq_advantages.assign(N, 0.0f);
    std::vector<std::vector<uint8_t>> masks(N);
    std::vector<std::vector<float>> tok_rewards(N);
    double kl_sum = 0, kl_n = 0, kl_seq_sum = 0;
    for (size_t i = 0; i < N; ++i) {
        const AdvSample& s = samples[i];
        const std::string who = "compute_advantages: sample " + std::to_string(i);
        if (!s.mask.empty() && s.mask.size() != s.n_resp)
            throw Error(who + " has " + std::to_string(s.mask.size()) + " mask entries for " +
                        std::to_string(s.n_resp) + " response tokens");
        masks[i] = s.mask;
        std::vector<float> kl;
        if (cfg.kl_in_reward) {
            if (s.logprobs.size() != s.n_resp || s.ref_logprobs.size() != s.n_resp)
                throw Error(who + " needs logprobs and ref_logprobs for each of its " + std::to_string(s.n_resp) +
                            " response tokens (kl_in_reward)");
            kl = kl_per_token(s.logprobs, s.ref_logprobs, cfg.kl_mode);
            double seq_sum = 0, seq_n = 0;
            for (size_t j = 0; j < s.n_resp; ++j) {
                if (!valid(s.mask, j)) {
                    kl[j] = 0.0f;  // an environment token's log-prob is a placeholder: no KL there
                    continue;
                }
                seq_sum += kl[j];
                seq_n += 1;
            }
            kl_sum += seq_sum;
            kl_n += seq_n;
            if (seq_n > 0) kl_seq_sum += seq_sum / seq_n;
        }
        tok_rewards[i] = token_level_rewards(s.score, s.n_resp, s.mask, cfg.kl_in_reward ? &kl : nullptr, cfg.kl_coef);
        if (cfg.estimator == AdvEstimator::kGae && s.values.size() != s.n_resp)
            throw Error(who + " needs a critic value for each of its " + std::to_string(s.n_resp) +
                        " response tokens (gae), got " + std::to_string(s.values.size()));
    }
    res.kl_mean = kl_n > 0 ? kl_sum / kl_n : 0.0;
    res.kl_seq_mean = N > 0 ? kl_seq_sum / static_cast<double>(N) : 0.0;

    auto mean_valid = [&](size_t i) {
        double sum = 0, n = 0;
        for (size_t j = 0; j < res.advantages[i].size(); ++j)
            if (valid(masks[i], j)) {
                sum += res.advantages[i][j];
                n += 1;
            }
        return static_cast<float>(n > 0 ? sum / n : 0.0);
    };

    // The outcome estimators' sequence score: the sum of the token rewards (score - KL penalty).
    auto seq_scores = [&] {
        std::vector<float> scores(N);
        for (size_t i = 0; i < N; ++i) {
            double sc = 0;
            for (float r : tok_rewards[i]) sc += r;
            scores[i] = static_cast<float>(sc);
        }
        return scores;
    };
    std::vector<int64_t> groups(N);
    for (size_t i = 0; i < N; ++i) groups[i] = samples[i].group;

    switch (cfg.estimator) {
        case AdvEstimator::kGrpo:
        case AdvEstimator::kRloo: {
            const std::vector<float> scores = seq_scores();
            const std::vector<float> a =
                cfg.estimator == AdvEstimator::kGrpo
                    ? grpo_advantages(scores, groups, cfg.norm_adv_by_std, cfg.grpo_unbiased_std)
                    : rloo_advantages(scores, groups);
            for (size_t i = 0; i < N; ++i) {
                res.advantages[i].assign(samples[i].n_resp, a[i]);
                for (size_t j = 0; j < samples[i].n_resp; ++j)
                    if (!valid(masks[i], j)) res.advantages[i][j] = 0.0f;
                res.returns[i] = discounted_returns(tok_rewards[i], masks[i], 1.0);
                res.seq_advantages[i] = a[i];
            }
            return res;
        }
        case AdvEstimator::kReinforcePP: {
            for (size_t i = 0; i < N; ++i) {
                res.returns[i] = discounted_returns(tok_rewards[i], masks[i], cfg.gamma);
                res.advantages[i] = res.returns[i];
            }
            if (cfg.whiten) whiten(res.advantages, masks);
            for (size_t i = 0; i < N; ++i) res.seq_advantages[i] = mean_valid(i);
            return res;
        }
        case AdvEstimator::kReinforcePPBaseline: {
            const std::vector<float> a = group_centred(seq_scores(), groups);
            for (size_t i = 0; i < N; ++i) {
                res.advantages[i].assign(samples[i].n_resp, a[i]);
                for (size_t j = 0; j < samples[i].n_resp; ++j)
                    if (!valid(masks[i], j)) res.advantages[i][j] = 0.0f;
                res.returns[i] = discounted_returns(tok_rewards[i], masks[i], 1.0);
            }
            if (cfg.whiten) whiten(res.advantages, masks);
            for (size_t i = 0; i < N; ++i) res.seq_advantages[i] = mean_valid(i);
            return res;
        }
        case AdvEstimator::kGae: {
            for (size_t i = 0; i < N; ++i) {
                GaeResult g = gae(tok_rewards[i], samples[i].values, masks[i], cfg.gamma, cfg.lam);
                res.advantages[i] = std::move(g.advantages);
                res.returns[i] = std::move(g.returns);
            }
            if (cfg.whiten) whiten(res.advantages, masks);
            for (size_t i = 0; i < N; ++i) res.seq_advantages[i] = mean_valid(i);
            return res;
        }
    }
    return res;
}

}  // namespace tagflow::train
