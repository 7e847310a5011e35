// SPDX-License-Identifier: Apache-2.0
// train/rollout_correction by hand: token-level rejection leaves exactly the tokens whose own ratio
// is out of the band (and only those) out of the loss and the weight mean; the veto rejects the
// whole sequence on one token below the floor, unclamped; sequence rejection counts every token;
// batch normalisation averages the truncated weights of every produced token, rejected or not.
// The randomised comparison against an independent reference is Serial.train_golden.objectives.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "common/error.hpp"
#include "train/rollout_correction.hpp"

using namespace tagflow::train;

namespace {
// Log-probs whose differences old - behaviour are exactly log(ratio).
void pair_for(const std::vector<double>& ratios, std::vector<float>* old, std::vector<float>* beh) {
    old->clear();
    beh->clear();
    for (double r : ratios) {
        beh->push_back(-1.0f);
        old->push_back(static_cast<float>(-1.0 + std::log(r)));
    }
}
}  // namespace

TEST(RolloutCorrection, TokenRejectionDropsOnlyTheTokensOutOfTheBand) {
    std::vector<float> old, beh;
    pair_for({1.0, 3.0, 0.25, 1.5, 0.9}, &old, &beh);
    RolloutCorrectionConfig cfg;
    cfg.is = IsLevel::kToken;
    cfg.is_threshold = 2.0;
    cfg.rs = RsLevel::kToken;                           // band [1/2, 2]
    const std::vector<uint8_t> mask = {1, 1, 1, 1, 0};  // the last is a tool token: not in the loss anyway
    const SeqCorrection c = correct_sequence(old, beh, mask, cfg);
    EXPECT_FALSE(c.rejected);
    ASSERT_EQ(c.token_keep.size(), 5u);
    EXPECT_EQ(c.token_keep, (std::vector<uint8_t>{1, 0, 0, 1, 1}));
    EXPECT_EQ(c.rejected_tokens, 2);
    // The weights of the kept tokens: 1 and 1.5; the ratio max includes the rejected 3.
    EXPECT_NEAR(c.weight_sum, 2.5, 1e-5);
    EXPECT_DOUBLE_EQ(c.weight_count, 2.0);
    EXPECT_NEAR(c.ratio_max, 3.0, 1e-5);

    CorrectionStats st;
    st.add(c);
    EXPECT_EQ(st.rejected, 0);
    EXPECT_EQ(st.rejected_tokens, 2);
    EXPECT_NEAR(st.weight_mean(), 1.25, 1e-5);
}

TEST(RolloutCorrection, TheVetoRejectsTheWholeSequenceOnOneUnclampedToken) {
    std::vector<float> old = {-1.0f, -1.0f, -1.0f}, beh = {-1.0f, -1.0f, -1.0f};
    old[1] = -40.0f;  // ratio e^-39, below e^-20: the clamp would hide it, the veto must not
    RolloutCorrectionConfig cfg;
    cfg.veto = std::exp(-30.0);
    SeqCorrection c = correct_sequence(old, beh, {}, cfg);
    EXPECT_TRUE(c.rejected);
    EXPECT_EQ(c.rejected_tokens, 3);
    EXPECT_TRUE(c.token_keep.empty());
    cfg.veto = std::exp(-45.0);  // below the token's ratio: kept
    c = correct_sequence(old, beh, {}, cfg);
    EXPECT_FALSE(c.rejected);
    EXPECT_EQ(c.rejected_tokens, 0);
    // A masked token below the floor does not veto.
    cfg.veto = 1e-4;
    c = correct_sequence(old, beh, {1, 0, 1}, cfg);
    EXPECT_FALSE(c.rejected);
}

TEST(RolloutCorrection, SequenceRejectionCountsEveryProducedToken) {
    std::vector<float> old, beh;
    pair_for({2.0, 2.0, 2.0}, &old, &beh);  // product 8
    RolloutCorrectionConfig cfg;
    cfg.rs = RsLevel::kSequence;
    cfg.rs_upper = 5.0;
    SeqCorrection c = correct_sequence(old, beh, {1, 1, 0}, cfg);  // product over the produced two: 4 < 5
    EXPECT_FALSE(c.rejected);
    c = correct_sequence(old, beh, {}, cfg);
    EXPECT_TRUE(c.rejected);
    EXPECT_EQ(c.rejected_tokens, 3);
    cfg.rs = RsLevel::kGeometric;  // geometric mean 2: inside [1/5, 5]
    c = correct_sequence(old, beh, {}, cfg);
    EXPECT_FALSE(c.rejected);
    EXPECT_EQ(c.rejected_tokens, 0);
}

TEST(RolloutCorrection, BatchNormalisationAveragesTheWeightsBeforeRejection) {
    std::vector<float> old, beh;
    pair_for({0.6, 3.0, 0.25, 1.0}, &old, &beh);  // truncated at 2: 0.6, 2, 0.25, 1
    RolloutCorrectionConfig cfg;
    cfg.is = IsLevel::kToken;
    cfg.is_threshold = 2.0;
    cfg.rs = RsLevel::kToken;  // band [1/2, 2]: 3 and 0.25 leave the loss
    cfg.batch_normalize = true;
    const SeqCorrection c = correct_sequence(old, beh, {1, 1, 1, 1}, cfg);
    EXPECT_NEAR(c.norm_sum, 3.85, 1e-6);  // every produced token, the rejected ones included
    EXPECT_EQ(c.norm_count, 4.0);
    EXPECT_NEAR(c.weight_sum, 1.6, 1e-6);  // the loss's: 0.6 + 1
    EXPECT_EQ(c.weight_count, 2.0);
    CorrectionStats st;
    st.add(c);
    EXPECT_NEAR(batch_norm_factor(st.norm_sum, st.norm_count), 3.85 / 4, 1e-7);
    cfg.is = IsLevel::kSequence;  // one weight: min(0.45, 2); a sequence without a produced token adds nothing
    const SeqCorrection seq = correct_sequence(old, beh, {1, 1, 1, 1}, cfg);
    EXPECT_NEAR(seq.norm_sum, 0.45, 1e-6);
    EXPECT_EQ(seq.norm_count, 1.0);
    const SeqCorrection none = correct_sequence(old, beh, {0, 0, 0, 0}, cfg);
    EXPECT_EQ(none.norm_count, 0.0);
    EXPECT_EQ(batch_norm_factor(0.0, 0.0), 1.0);  // nothing to average, and veRL's guard at 1e-8
    EXPECT_EQ(batch_norm_factor(1e-9, 1.0), 1.0);
}

TEST(RolloutCorrection, LevelNames) {
    EXPECT_EQ(parse_rs_level("token"), RsLevel::kToken);
    EXPECT_EQ(to_string(RsLevel::kToken), "token");
    EXPECT_THROW(parse_rs_level("tokens"), tagflow::ConfigError);
}
