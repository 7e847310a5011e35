// SPDX-License-Identifier: Apache-2.0
// Advantage estimators, token rewards, returns, GAE, whitening and option parsing against
// numbers worked out by hand (the arithmetic is in the comments).
#include <gtest/gtest.h>

#include <cmath>

#include "common/error.hpp"
#include "train/algorithms.hpp"

namespace tagflow::train {
namespace {

constexpr float kTol = 1e-5f;

void expect_near(const std::vector<float>& got, const std::vector<float>& want, float tol = kTol) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "index " << i;
}

TEST(Grpo, GroupsById) {
    // group 7: {1, 3}: mean 2, unbiased std sqrt(2) -> -+1/sqrt(2); group 3: {5, 1}: mean 3,
    // std 2 sqrt(2) -> +-1/sqrt(2). Population std (1 and 2): -1, +1, +1, -1.
    const float h = static_cast<float>(1 / std::sqrt(2.0));
    auto a = grpo_advantages({1, 5, 3, 1}, {7, 3, 7, 3}, true);
    expect_near(a, {-h, h, h, -h});
    expect_near(grpo_advantages({1, 5, 3, 1}, {7, 3, 7, 3}, true, /*unbiased_std=*/false), {-1, 1, 1, -1});
    // Without std: r - mean.
    expect_near(grpo_advantages({1, 5, 3, 1}, {7, 3, 7, 3}, false), {-1, 2, 1, -2});
    // Equal scores and singleton groups give exactly 0.
    auto z = grpo_advantages({0.3f, 0.3f, 9.0f}, {1, 1, 2}, true);
    EXPECT_EQ(z[0], 0.0f);
    EXPECT_EQ(z[1], 0.0f);
    EXPECT_EQ(z[2], 0.0f);
}

TEST(Grpo, ConsecutiveGroupsHandValues) {
    // {1, 2} and {3, 5} without std: r - mean.
    expect_near(grpo_advantages({1, 2, 3, 5}, {0, 0, 1, 1}, false), {-0.5f, 0.5f, -1, 1});
    // {0, 1}: (0 - 0.5) / (sqrt(0.5) + eps) = -+0.7071; a group of equal scores gives exactly 0.
    auto b = grpo_advantages({0, 1, 0.25f, 0.25f, 0.25f, 0.25f}, {0, 0, 1, 1, 2, 2}, true);
    expect_near(b, {-0.70710678f, 0.70710678f, 0, 0, 0, 0});
    for (int i = 2; i < 6; ++i) EXPECT_EQ(b[i], 0.0f);
    // {1, 2, 6}: mean 3, squares 4 + 1 + 9 = 14: unbiased std sqrt(7), population sqrt(14/3).
    auto d = grpo_advantages({1, 2, 6}, {4, 4, 4}, true);
    EXPECT_NEAR(d[2], 3.0 / std::sqrt(7.0), kTol);
    EXPECT_NEAR(d[0], -2.0 / std::sqrt(7.0), kTol);
    auto p = grpo_advantages({1, 2, 6}, {4, 4, 4}, true, /*unbiased_std=*/false);
    EXPECT_NEAR(p[2], 3.0 / std::sqrt(14.0 / 3.0), kTol);
}

TEST(Rloo, LeaveOneOut) {
    // {1, 2, 6}: 1 - (2+6)/2 = -3; 2 - (1+6)/2 = -1.5; 6 - (1+2)/2 = 4.5. Singleton -> 0.
    expect_near(rloo_advantages({1, 2, 6, 4}, {0, 0, 0, 1}), {-3, -1.5f, 4.5f, 0});
}

TEST(Kl, Estimators) {
    // logp -1, ref -1.5: d = 0.5. k1 0.5; k2 0.125; abs 0.5; k3 exp(-0.5) + 0.5 - 1.
    EXPECT_NEAR(kl_value(-1, -1.5f, KlMode::kK1), 0.5f, kTol);
    EXPECT_NEAR(kl_value(-1, -1.5f, KlMode::kK2), 0.125f, kTol);
    EXPECT_NEAR(kl_value(-1, -1.5f, KlMode::kAbs), 0.5f, kTol);
    EXPECT_NEAR(kl_value(-1, -1.5f, KlMode::kK3), 0.10653066f, kTol);
    EXPECT_NEAR(kl_value(-1.5f, -1, KlMode::kK1), -0.5f, kTol);
    EXPECT_NEAR(kl_value(-1.5f, -1, KlMode::kK3), std::exp(0.5) - 1.5, kTol);
    EXPECT_FLOAT_EQ(kl_value(-30, 0, KlMode::kK3), 10.0f);  // clamped
    EXPECT_THROW(kl_per_token({1, 2}, {1}, KlMode::kK1), Error);
}

TEST(TokenRewards, ScoreOnLastValidTokenMinusKl) {
    // score 1 on token 1 (token 2 is masked); -0.5 * kl on valid tokens.
    std::vector<float> kl = {0.1f, 0.2f, 0.3f};
    expect_near(token_level_rewards(1, 3, {1, 1, 0}, &kl, 0.5), {-0.05f, 0.9f, 0});
    expect_near(token_level_rewards(2, 3, {}, nullptr, 0.5), {0, 0, 2});
    expect_near(token_level_rewards(2, 0, {}, nullptr, 0.5), {});
}

TEST(Returns, Discounted) {
    // gamma 0.5: G2 = 2, G1 = 0 + 0.5*2 = 1, G0 = 1 + 0.5*1 = 1.5.
    expect_near(discounted_returns({1, 0, 2}, {}, 0.5), {1.5f, 1, 2});
    // Token 1 masked out: skipped, G0 = 1 + 0.5 * G2 = 2.
    expect_near(discounted_returns({1, 0, 2}, {1, 0, 1}, 0.5), {2, 0, 2});
}

TEST(Gae, HandComputed) {
    // gamma .9, lam .8 (gamma*lam = .72), V = {.5, .2, .4}, r = {0, 0, 1}:
    // j2: delta = 1 - .4 = .6; A = .6; R = 1
    // j1: delta = .9*.4 - .2 = .16; A = .16 + .72*.6 = .592; R = .792
    // j0: delta = .9*.2 - .5 = -.32; A = -.32 + .72*.592 = .10624; R = .60624
    GaeResult g = gae({0, 0, 1}, {0.5f, 0.2f, 0.4f}, {}, 0.9, 0.8);
    expect_near(g.advantages, {0.10624f, 0.592f, 0.6f});
    expect_near(g.returns, {0.60624f, 0.792f, 1.0f});
    // Token 1 masked: j0 sees V2: delta = .9*.4 - .5 = -.14; A = -.14 + .72*.6 = .292.
    GaeResult m = gae({0, 0, 1}, {0.5f, 0.2f, 0.4f}, {1, 0, 1}, 0.9, 0.8);
    expect_near(m.advantages, {0.292f, 0, 0.6f});
    expect_near(m.returns, {0.792f, 0, 1.0f});
    // gamma = lam = 1: A = (sum of future rewards) - V, returns = sum of future rewards.
    GaeResult u = gae({0.5f, 0, 1}, {0.5f, 0.2f, 0.4f}, {}, 1, 1);
    expect_near(u.advantages, {1.0f, 0.8f, 0.6f});
    expect_near(u.returns, {1.5f, 1, 1});
    EXPECT_THROW(gae({0, 1}, {0}, {}, 1, 1), Error);
}

TEST(Whiten, UnbiasedOverValidTokens) {
    // {1,2},{3}: mean 2, unbiased var (1+0+1)/2 = 1 -> {-1,0},{1}.
    std::vector<std::vector<float>> x = {{1, 2}, {3}};
    whiten(x, {});
    expect_near(x[0], {-1, 0});
    expect_near(x[1], {1});
    // Mask out the 2: valid {1,3}: mean 2, var (1+1)/1 = 2 -> -1/sqrt2, 1/sqrt2; masked -> 0.
    std::vector<std::vector<float>> y = {{1, 2}, {3}};
    whiten(y, {{1, 0}, {}});
    expect_near(y[0], {-0.70710678f, 0});
    expect_near(y[1], {0.70710678f});
    // shift_mean = false keeps the mean.
    std::vector<std::vector<float>> z = {{1, 2}, {3}};
    whiten(z, {}, /*shift_mean=*/false);
    expect_near(z[0], {1, 2});
}

TEST(ComputeAdvantages, GrpoWithKlInReward) {
    // k1 KL: sample 0 {0.5, 0}, sample 1 {0, 0}; coef 0.2 -> scores 1 - 0.1 = 0.9 and 0.
    // Group mean .45, unbiased std .45 sqrt(2) -> +-1/sqrt(2) (minus the 1e-6 in the denominator).
    AdvConfig cfg;
    cfg.estimator = AdvEstimator::kGrpo;
    cfg.kl_in_reward = true;
    cfg.kl_coef = 0.2;
    cfg.kl_mode = KlMode::kK1;
    std::vector<AdvSample> s(2);
    s[0].score = 1;
    s[0].n_resp = 2;
    s[0].logprobs = {-1, -1};
    s[0].ref_logprobs = {-1.5f, -1};
    s[1].score = 0;
    s[1].n_resp = 2;
    s[1].logprobs = {-2, -2};
    s[1].ref_logprobs = {-2, -2};
    AdvResult r = compute_advantages(cfg, s);
    const float h = 0.70710678f;
    expect_near(r.advantages[0], {h, h});
    expect_near(r.advantages[1], {-h, -h});
    expect_near(r.seq_advantages, {h, -h});
    EXPECT_NEAR(r.kl_mean, 0.5 / 4, 1e-9);
    // Return-to-go of the token rewards {-0.1, 1}: {0.9, 1}.
    expect_near(r.returns[0], {0.9f, 1});
    s[1].ref_logprobs.clear();
    EXPECT_THROW(compute_advantages(cfg, s), Error);
}

TEST(ComputeAdvantages, MaskedTokensTakeNoKlInReward) {
    // Issue 21 defect 1: two equal-reward samples of one group; sample 0 has a tool token
    // (mask 0, log-prob placeholder 0, reference -5). Its KL must not count: both sequences
    // then score 1 exactly, the advantages are 0 and the KL mean is 0 (k3 of equal log-probs).
    for (auto est : {AdvEstimator::kGrpo, AdvEstimator::kRloo, AdvEstimator::kReinforcePPBaseline}) {
        AdvConfig cfg;
        cfg.estimator = est;
        cfg.kl_in_reward = true;
        cfg.kl_coef = 0.1;
        cfg.kl_mode = KlMode::kK3;
        std::vector<AdvSample> s(2);
        s[0].score = s[1].score = 1;
        s[0].n_resp = 3;
        s[0].mask = {1, 0, 1};
        s[0].logprobs = {-1, 0, -2};
        s[0].ref_logprobs = {-1, -5, -2};
        s[1].n_resp = 2;
        s[1].logprobs = {-0.5f, -0.5f};
        s[1].ref_logprobs = {-0.5f, -0.5f};
        AdvResult r = compute_advantages(cfg, s);
        EXPECT_EQ(r.kl_mean, 0.0) << to_string(est);
        expect_near(r.seq_advantages, {0, 0});
        expect_near(r.advantages[0], {0, 0, 0});
    }
}

TEST(ComputeAdvantages, ReinforcePlusPlusBaseline) {
    // Group {1, 3} -> {-1, +1}, group {5} (one sample) -> 0; broadcast over 2, 1, 1 tokens:
    // {-1, -1, 1, 0}: mean -0.25, unbiased var (0.5625*2 + 1.5625 + 0.0625) / 3 = 0.91667.
    AdvConfig cfg;
    cfg.estimator = AdvEstimator::kReinforcePPBaseline;
    std::vector<AdvSample> s(3);
    s[0] = {0, 1.0f, 2, {}, {}, {}, {}};
    s[1] = {0, 3.0f, 1, {}, {}, {}, {}};
    s[2] = {1, 5.0f, 1, {}, {}, {}, {}};
    AdvResult r = compute_advantages(cfg, s);
    const double sd = std::sqrt(2.75 / 3 + 1e-8);
    expect_near(r.advantages[0], {static_cast<float>(-0.75 / sd), static_cast<float>(-0.75 / sd)});
    expect_near(r.advantages[1], {static_cast<float>(1.25 / sd)});
    expect_near(r.advantages[2], {static_cast<float>(0.25 / sd)});
}

TEST(KlController, AdaptiveAsVerl) {
    // kl 0.15 vs target 0.1: error clipped to 0.2; 100 samples / horizon 1000 -> x 1.02.
    KlController c{0.05, 0.1, 1000};
    c.update(0.15, 100);
    EXPECT_NEAR(c.coef, 0.051, 1e-12);
    c.update(0.09, 100);  // error -0.1 -> x 0.99
    EXPECT_NEAR(c.coef, 0.051 * 0.99, 1e-12);
    KlController fixed{0.05, 0.1, 0};
    fixed.update(1.0, 100);
    EXPECT_EQ(fixed.coef, 0.05);
}

TEST(ComputeAdvantages, Rloo) {
    AdvConfig cfg;
    cfg.estimator = AdvEstimator::kRloo;
    std::vector<AdvSample> s(3);
    for (int i = 0; i < 3; ++i) s[i].n_resp = 1;
    s[0].score = 1;
    s[1].score = 2;
    s[2].score = 6;
    expect_near(compute_advantages(cfg, s).seq_advantages, {-3, -1.5f, 4.5f});
}

TEST(ComputeAdvantages, ReinforcePlusPlusWhitensGlobally) {
    // Token rewards {0,1}, {0}; returns (gamma 1) {1,1}, {0}; over 3 tokens mean 2/3,
    // unbiased var ((1/3)^2*2 + (2/3)^2)/2 = 1/3 -> {0.57735, 0.57735}, {-1.1547}.
    AdvConfig cfg;
    cfg.estimator = AdvEstimator::kReinforcePP;
    std::vector<AdvSample> s(2);
    s[0].score = 1;
    s[0].n_resp = 2;
    s[1].score = 0;
    s[1].n_resp = 1;
    AdvResult r = compute_advantages(cfg, s);
    expect_near(r.advantages[0], {0.5773503f, 0.5773503f});
    expect_near(r.advantages[1], {-1.1547005f});
    expect_near(r.returns[0], {1, 1});
    expect_near(r.returns[1], {0});
}

TEST(ComputeAdvantages, GaeMatchesSingleSampleAndWhitens) {
    AdvConfig cfg;
    cfg.estimator = AdvEstimator::kGae;
    cfg.gamma = 0.9;
    cfg.lam = 0.8;
    cfg.whiten = false;
    std::vector<AdvSample> s(2);
    s[0].score = 1;
    s[0].n_resp = 3;
    s[0].values = {0.5f, 0.2f, 0.4f};
    s[1].score = -1;
    s[1].n_resp = 2;
    s[1].values = {0.1f, -0.3f};
    AdvResult r = compute_advantages(cfg, s);
    expect_near(r.advantages[0], {0.10624f, 0.592f, 0.6f});
    expect_near(r.returns[0], {0.60624f, 0.792f, 1.0f});
    // Sample 1: j1: delta = -1 + .3 = -.7; j0: delta = .9*(-.3) - .1 = -.37, A = -.37 + .72*(-.7) = -.874.
    expect_near(r.advantages[1], {-0.874f, -0.7f});
    cfg.whiten = true;
    AdvResult w = compute_advantages(cfg, s);
    double sum = 0, sq = 0;
    for (const auto& a : w.advantages)
        for (float v : a) sum += v;
    for (const auto& a : w.advantages)
        for (float v : a) sq += v * v;
    EXPECT_NEAR(sum / 5, 0.0, 1e-6);
    EXPECT_NEAR(sq / 4, 1.0, 1e-5);           // unbiased variance 1
    expect_near(w.returns[0], r.returns[0]);  // returns are not whitened
    s[1].values.pop_back();
    EXPECT_THROW(compute_advantages(cfg, s), Error);
}

TEST(Options, ParseNames) {
    EXPECT_EQ(parse_adv_estimator("grpo"), AdvEstimator::kGrpo);
    EXPECT_EQ(parse_adv_estimator("ppo"), AdvEstimator::kGae);
    EXPECT_EQ(parse_adv_estimator("reinforce_plus_plus"), AdvEstimator::kReinforcePP);
    EXPECT_EQ(parse_kl_mode("low_var_kl"), KlMode::kK3);
    EXPECT_EQ(parse_kl_mode("k1"), KlMode::kK1);
    EXPECT_EQ(parse_loss_agg("seq-mean-token-mean"), LossAgg::kSeqMeanTokenMean);
    EXPECT_EQ(parse_adv_estimator("reinforce_plus_plus_baseline"), AdvEstimator::kReinforcePPBaseline);
    for (auto e : {AdvEstimator::kGrpo, AdvEstimator::kRloo, AdvEstimator::kReinforcePP,
                   AdvEstimator::kReinforcePPBaseline, AdvEstimator::kGae})
        EXPECT_EQ(parse_adv_estimator(to_string(e)), e);
    for (auto a :
         {LossAgg::kTokenMean, LossAgg::kSeqMeanTokenSum, LossAgg::kSeqMeanTokenMean, LossAgg::kSeqMeanTokenSumNorm})
        EXPECT_EQ(parse_loss_agg(to_string(a)), a);
    EXPECT_THROW(parse_adv_estimator("dpo"), ConfigError);
    EXPECT_THROW(parse_kl_mode("k9"), ConfigError);
    EXPECT_THROW(parse_loss_agg("mean"), ConfigError);
}

}  // namespace
}  // namespace tagflow::train
