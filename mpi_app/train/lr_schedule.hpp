// SPDX-License-Identifier: Apache-2.0
// lr_schedule: the learning rate of each optimiser step — a linear warm-up, then constant or a
// half-cosine decay to a floor — for `tagflow train` (--lr-warmup-steps, --lr-schedule,
// --min-lr-ratio) and `tagflow sft` (--warmup, cosine to lr/10). Pure arithmetic: a function of
// the step index only, so a resumed run continues the same curve without saved scheduler state.
// Does not: touch an optimiser (the callers set the rate, train::TrainEngine::set_lr).
#pragma once
#include <cstdint>

namespace tagflow::train {

struct LrSchedule {
    double lr = 0;              ///< the peak rate
    int64_t warmup_steps = 0;   ///< step s < warmup_steps runs at lr * (s + 1) / warmup_steps
    bool cosine = false;        ///< after the warm-up: false = constant lr; true = half-cosine
    double min_lr_ratio = 0.0;  ///< the cosine's floor, as a fraction of lr (veRL min_lr_ratio)
    int64_t total_steps = 1;    ///< the cosine reaches the floor at this step (and stays there)
};

/// The rate of 0-based step `step`: lr * (step + 1) / warmup during the warm-up (the first step
/// already moves the weights); then lr (constant), or lr * (m + (1 - m) * (1 + cos(pi * p)) / 2)
/// with p = (step - warmup) / (total - warmup) clamped to [0, 1] and m = min_lr_ratio (cosine).
double lr_at(const LrSchedule& s, int64_t step);

}  // namespace tagflow::train
