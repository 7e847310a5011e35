// SPDX-License-Identifier: Apache-2.0
#include "train/lr_schedule.hpp"

#include <algorithm>
#include <cmath>

namespace tagflow::train {

double lr_at(const LrSchedule& s, int64_t step) {
    step = std::max<int64_t>(step, 0);
    if (step < s.warmup_steps) return s.lr * static_cast<double>(step + 1) / static_cast<double>(s.warmup_steps);
    if (!s.cosine) return s.lr;
    const double span = static_cast<double>(std::max<int64_t>(1, s.total_steps - s.warmup_steps));
    const double p = std::min(1.0, static_cast<double>(step - s.warmup_steps) / span);
    return s.lr * (s.min_lr_ratio + (1.0 - s.min_lr_ratio) * 0.5 * (1.0 + std::cos(M_PI * p)));
}

}  // namespace tagflow::train
