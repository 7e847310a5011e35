// SPDX-License-Identifier: Apache-2.0
// greedy_score: the result of a greedy held-out evaluation (`tagflow sft`'s score_greedy for
// single-turn tasks, agent_rollout.hpp's score_agent_greedy for multi-turn ones). Plain data.
#pragma once
#include <cstdint>

namespace tagflow::sched {

/// Greedy held-out scores on a set of eval prompts: how many responses equal the task's
/// solution up to EOS (multi-turn: sessions with reward 1), and the sum of their rewards.
struct GreedyScore {
    int64_t exact = 0;
    double reward_sum = 0;
    int64_t n = 0;
};

}  // namespace tagflow::sched
