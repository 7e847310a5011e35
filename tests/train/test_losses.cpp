// SPDX-License-Identifier: Apache-2.0
// Loss aggregation modes, the PPO surrogate (asymmetric and dual clip), the clipped value
// loss, KL penalties and token log-probs against hand-computed numbers.
#include <gtest/gtest.h>

#include <cmath>

#include <torch/torch.h>

#include "common/error.hpp"
#include "train/losses.hpp"

namespace tagflow::train {
namespace {

torch::Tensor t2(std::vector<float> v, int64_t rows) {
    return torch::tensor(v).view({rows, static_cast<int64_t>(v.size()) / rows});
}

TEST(AggLoss, ModesWithGlobalCounts) {
    // Row 0 valid {1, 2}, row 1 valid {4}: 3 tokens, 2 sequences.
    auto loss = t2({1, 2, 3, 4, 5, 0}, 2);
    auto mask = t2({1, 1, 0, 1, 0, 0}, 2);
    BatchCounts g{3, 2};
    EXPECT_NEAR(agg_loss(loss, mask, LossAgg::kTokenMean, g).item<double>(), 7.0 / 3, 1e-6);      // (1+2+4)/3
    EXPECT_NEAR(agg_loss(loss, mask, LossAgg::kSeqMeanTokenSum, g).item<double>(), 3.5, 1e-6);    // (3+4)/2
    EXPECT_NEAR(agg_loss(loss, mask, LossAgg::kSeqMeanTokenMean, g).item<double>(), 2.75, 1e-6);  // (1.5+4)/2
    // A batch twice as large elsewhere (another rank) halves this share.
    BatchCounts g2{6, 4};
    EXPECT_NEAR(agg_loss(loss, mask, LossAgg::kTokenMean, g2).item<double>(), 7.0 / 6, 1e-6);
    EXPECT_NEAR(agg_loss(loss, mask, LossAgg::kSeqMeanTokenMean, g2).item<double>(), 1.375, 1e-6);
    // Splitting rows into micro-batches and summing gives the whole-batch value.
    for (auto mode : {LossAgg::kTokenMean, LossAgg::kSeqMeanTokenSum, LossAgg::kSeqMeanTokenMean}) {
        double whole = agg_loss(loss, mask, mode, g).item<double>();
        double parts = agg_loss(loss.narrow(0, 0, 1), mask.narrow(0, 0, 1), mode, g).item<double>() +
                       agg_loss(loss.narrow(0, 1, 1), mask.narrow(0, 1, 1), mode, g).item<double>();
        EXPECT_NEAR(whole, parts, 1e-6) << to_string(mode);
    }
    EXPECT_THROW(agg_loss(loss, mask, LossAgg::kTokenMean, BatchCounts{0, 0}), Error);
}

TEST(PolicyLoss, ClipAndDualClip) {
    // ratios via logp - old = log(r).
    std::vector<float> r = {1.5f, 0.5f, 0.9f, 5.0f};
    std::vector<float> a = {1, -1, 1, -1};
    torch::Tensor logp = torch::log(torch::tensor(r)).view({1, 4});
    torch::Tensor old = torch::zeros({1, 4});
    torch::Tensor adv = torch::tensor(a).view({1, 4});
    // eps .2: (A+, r 1.5) max(-1.5, -1.2) = -1.2 clipped; (A-, r .5) max(.5, .8) = .8 clipped;
    // (A+, r .9) -0.9 not clipped; (A-, r 5) max(5, 1.2) = 5 not clipped (no dual clip).
    PolicyLossTerms p = ppo_policy_loss(logp, old, adv, 0.2, 0.2);
    auto l = p.loss.view({4});
    EXPECT_NEAR(l[0].item<float>(), -1.2f, 1e-5);
    EXPECT_NEAR(l[1].item<float>(), 0.8f, 1e-5);
    EXPECT_NEAR(l[2].item<float>(), -0.9f, 1e-5);
    EXPECT_NEAR(l[3].item<float>(), 5.0f, 1e-4);
    EXPECT_EQ(p.clipped.sum().item<float>(), 2.0f);
    // Dual clip c = 3 bounds the A < 0 term: min(5, 3) = 3.
    PolicyLossTerms d = ppo_policy_loss(logp, old, adv, 0.2, 0.2, 3.0);
    EXPECT_NEAR(d.loss.view({4})[3].item<float>(), 3.0f, 1e-5);
    EXPECT_EQ(d.clipped_lower.sum().item<float>(), 1.0f);
    // Asymmetric: clip_high .28 -> (A+, r 1.5) -1.28.
    EXPECT_NEAR(ppo_policy_loss(logp, old, adv, 0.2, 0.28).loss.view({4})[0].item<float>(), -1.28f, 1e-5);
    // Gradient flows only through unclipped tokens: d/dlogp of -A r = -A r at r = .9 -> -0.9.
    torch::Tensor lg = logp.clone().set_requires_grad(true);
    ppo_policy_loss(lg, old, adv, 0.2, 0.2).loss.sum().backward();
    auto g = lg.grad().view({4});
    EXPECT_EQ(g[0].item<float>(), 0.0f);
    EXPECT_NEAR(g[2].item<float>(), -0.9f, 1e-5);
}

TEST(PolicyLoss, EveryBranchAndTheClippedMask) {
    // (A+, r 1.5) -1.2 clipped; (A-, r 1.5) max(1.5, 1.2) = 1.5; (A+, r .5) max(-.5, -.8) = -.5;
    // (A-, r .5) .8 clipped; (A 2, r 1) -2.
    const float l15 = std::log(1.5f), l05 = std::log(0.5f);
    torch::Tensor logp = torch::tensor({l15, l15, l05, l05, 0.0f}).view({1, 5});
    torch::Tensor adv = torch::tensor({1.0f, -1.0f, 1.0f, -1.0f, 2.0f}).view({1, 5});
    PolicyLossTerms p = ppo_policy_loss(logp, torch::zeros({1, 5}), adv, 0.2, 0.2);
    EXPECT_TRUE(torch::allclose(p.loss.view({5}), torch::tensor({-1.2f, 1.5f, -0.5f, 0.8f, -2.0f}), 1e-5, 1e-6));
    EXPECT_TRUE(torch::equal(p.clipped.view({5}), torch::tensor({1.0f, 0.0f, 0.0f, 1.0f, 0.0f})));
}

TEST(ValueLoss, Clipped) {
    // v 1, old .5, R 2, eps .2: l1 = 1; clip v -> .7, l2 = 1.69; 0.5 * 1.69 = .845.
    // v 1, old .9, R 0: clip keeps 1.0 -> .5 * 1 = .5, not clipped.
    torch::Tensor v = torch::tensor({1.0f, 1.0f}).view({1, 2});
    torch::Tensor old = torch::tensor({0.5f, 0.9f}).view({1, 2});
    torch::Tensor R = torch::tensor({2.0f, 0.0f}).view({1, 2});
    ValueLossTerms c = value_loss(v, old, R, 0.2);
    EXPECT_NEAR(c.loss.view({2})[0].item<float>(), 0.845f, 1e-5);
    EXPECT_NEAR(c.loss.view({2})[1].item<float>(), 0.5f, 1e-5);
    EXPECT_EQ(c.clipped.sum().item<float>(), 1.0f);
    ValueLossTerms u = value_loss(v, old, R, 0.0);
    EXPECT_NEAR(u.loss.view({2})[0].item<float>(), 0.5f, 1e-5);
}

TEST(KlPenalty, MatchesScalarEstimators) {
    torch::Tensor lp = torch::tensor({-1.0f, -1.5f, -0.2f, -3.0f});
    torch::Tensor ref = torch::tensor({-1.5f, -1.0f, -2.0f, -0.1f});
    for (auto mode : {KlMode::kK1, KlMode::kK2, KlMode::kK3, KlMode::kAbs}) {
        torch::Tensor k = kl_penalty(lp, ref, mode);
        for (int64_t i = 0; i < 4; ++i)
            EXPECT_NEAR(k[i].item<float>(), kl_value(lp[i].item<float>(), ref[i].item<float>(), mode), 1e-5)
                << to_string(mode) << " " << i;
    }
}

TEST(KlPenalty, K3FiniteGradientOnAMaskedPlaceholder) {
    // Issue 21 defect 2: a masked slot holding log-prob -200 against a reference of 0 made
    // exp(ref - logp) overflow to inf; 0 (mask) * inf = NaN in the backward pass.
    torch::Tensor lp = torch::tensor({-200.0f, -1.0f, 0.0f}).view({1, 3}).requires_grad_(true);
    torch::Tensor ref = torch::tensor({0.0f, -1.2f, -150.0f}).view({1, 3});
    torch::Tensor mask = torch::tensor({0.0f, 1.0f, 0.0f}).view({1, 3});
    torch::Tensor loss = agg_loss(kl_penalty(lp, ref, KlMode::kK3), mask, LossAgg::kTokenMean, BatchCounts{1, 1});
    loss.backward();
    EXPECT_TRUE(std::isfinite(loss.item<double>()));
    EXPECT_TRUE(torch::isfinite(lp.grad()).all().item<bool>()) << lp.grad();
    EXPECT_EQ(lp.grad()[0][0].item<float>(), 0.0f);
    // d/dlogp of exp(r) - r - 1 with r = ref - logp: 1 - exp(r) = 1 - exp(-0.2).
    EXPECT_NEAR(lp.grad()[0][1].item<float>(), 1.0 - std::exp(-0.2), 1e-6);
    // Both extremes clamp to 10 and stay finite.
    EXPECT_FLOAT_EQ(kl_value(-200, 0, KlMode::kK3), 10.0f);
    EXPECT_FLOAT_EQ(kl_value(0, -200, KlMode::kK3), 10.0f);
}

TEST(AggLoss, SeqMeanTokenSumNormDividesByTheConstant) {
    // Rows {1, 2 | masked 3} and {4}: token sums 3 and 4; 2 sequences x constant 10 -> 7 / 20.
    torch::Tensor loss = t2({1, 2, 3, 4, 0, 0}, 2);
    torch::Tensor mask = t2({1, 1, 0, 1, 0, 0}, 2);
    EXPECT_NEAR(agg_loss(loss, mask, LossAgg::kSeqMeanTokenSumNorm, BatchCounts{3, 2}, 10).item<double>(), 0.35, 1e-6);
    EXPECT_THROW(agg_loss(loss, mask, LossAgg::kSeqMeanTokenSumNorm, BatchCounts{3, 2}), Error);
}

TEST(TokenLogProbs, TemperatureAndEntropy) {
    // Uniform over 3: logp = -ln 3, entropy ln 3. Logits {2, 0} at T = 2 -> {1, 0}:
    // logp(token 0) = 1 - ln(e + 1).
    torch::Tensor ent;
    torch::Tensor lp = token_log_probs(torch::zeros({1, 1, 3}), torch::zeros({1, 1}, torch::kInt64), 1.0, &ent);
    EXPECT_NEAR(lp.item<float>(), -std::log(3.0f), 1e-6);
    EXPECT_NEAR(ent.item<float>(), std::log(3.0f), 1e-6);
    torch::Tensor lp2 =
        token_log_probs(torch::tensor({2.0f, 0.0f}).view({1, 1, 2}), torch::zeros({1, 1}, torch::kInt64), 2.0);
    EXPECT_NEAR(lp2.item<float>(), 1.0 - std::log(std::exp(1.0) + 1.0), 1e-6);
}

}  // namespace
}  // namespace tagflow::train
