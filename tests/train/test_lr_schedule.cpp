// SPDX-License-Identifier: Apache-2.0
// train::lr_at: the learning-rate curve of `tagflow train` (--lr-warmup-steps, --lr-schedule,
// --min-lr-ratio) and `tagflow sft`, against hand-computed values.
#include <gtest/gtest.h>

#include <cmath>

#include "train/lr_schedule.hpp"

using tagflow::train::lr_at;
using tagflow::train::LrSchedule;

TEST(LrSchedule, ConstantWithoutWarmupIsThePeak) {
    LrSchedule s;
    s.lr = 1e-3;
    s.total_steps = 10;
    for (int64_t step : {0, 1, 9, 10, 1000}) EXPECT_DOUBLE_EQ(lr_at(s, step), 1e-3);
}

TEST(LrSchedule, WarmupIsLinearAndTheFirstStepMoves) {
    LrSchedule s;
    s.lr = 2e-3;
    s.warmup_steps = 4;
    s.total_steps = 100;
    EXPECT_DOUBLE_EQ(lr_at(s, 0), 0.5e-3);  // (0 + 1) / 4: never a step at rate 0
    EXPECT_DOUBLE_EQ(lr_at(s, 1), 1.0e-3);
    EXPECT_DOUBLE_EQ(lr_at(s, 3), 2.0e-3);
    EXPECT_DOUBLE_EQ(lr_at(s, 4), 2.0e-3);  // constant after the warm-up
    EXPECT_DOUBLE_EQ(lr_at(s, 99), 2.0e-3);
}

TEST(LrSchedule, CosineDecaysToTheFloorAtTheLastStep) {
    LrSchedule s;
    s.lr = 1.0;
    s.warmup_steps = 10;
    s.cosine = true;
    s.min_lr_ratio = 0.1;
    s.total_steps = 110;
    EXPECT_DOUBLE_EQ(lr_at(s, 9), 1.0);
    EXPECT_DOUBLE_EQ(lr_at(s, 10), 1.0);                // p = 0
    EXPECT_NEAR(lr_at(s, 60), 0.1 + 0.9 * 0.5, 1e-12);  // p = 1/2: half-way between peak and floor
    EXPECT_NEAR(lr_at(s, 35), 0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * 0.25)), 1e-12);
    EXPECT_NEAR(lr_at(s, 110), 0.1, 1e-12);  // the floor at total_steps, and after it
    EXPECT_NEAR(lr_at(s, 500), 0.1, 1e-12);
    for (int64_t k = 10; k < 110; ++k) EXPECT_GT(lr_at(s, k), lr_at(s, k + 1)) << k;
}

TEST(LrSchedule, CosineToZeroAndAWarmupLongerThanTheRun) {
    LrSchedule s;
    s.lr = 3.0;
    s.cosine = true;
    s.total_steps = 4;
    EXPECT_DOUBLE_EQ(lr_at(s, 0), 3.0);
    EXPECT_NEAR(lr_at(s, 2), 1.5, 1e-12);
    EXPECT_NEAR(lr_at(s, 4), 0.0, 1e-12);
    s.warmup_steps = 8;  // longer than the run: the whole run warms up
    EXPECT_DOUBLE_EQ(lr_at(s, 3), 3.0 * 4 / 8);
}
