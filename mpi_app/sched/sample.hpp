// SPDX-License-Identifier: Apache-2.0
// sample: one finished rollout sample as plain data, what every scheduling mode moves between
// its generators, its pool and its trainer. Pure C++ (no MPI, no LibTorch). Part of
// tagflow_sched_policy (the element of sample_pool.hpp's pool), so the layers above it (step/,
// sched/) share it. Its byte form is step/wire.hpp's; its run-file row is step/sample_row.hpp's.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace tagflow::sched {

struct RolloutSample {
    int64_t id = 0;
    int64_t group = 0;    // global prompt group == position in the task's prompt order
    int32_t rank = 0;     // world rank that generated it
    int32_t version = 0;  // policy version of every generated token
    float reward = 0.f;
    bool hit_eos = false;
    double t_done = 0.0;
    std::vector<int32_t> prompt;
    std::vector<int32_t> response;
    std::vector<float> logprobs;  // one per response token
    // Async modes: the policy version of each response token (empty: every token is `version`;
    // then `version` is the oldest) and the advantage weight of a stale sample (1 = full).
    std::vector<int32_t> versions;
    float weight = 1.f;
    // Multi-turn sessions (rollout/agent_loop.hpp): 1 on the response tokens the model sampled,
    // 0 on environment/tool tokens (trained with loss_mask 0); empty = every response token is 1.
    std::vector<uint8_t> loss_mask;
    // --data: the reward's extras (the keys other than `score` of a returned dict, JSON object
    // text; empty when none), recorded in /samples/reward_extras.
    std::string extras;
};

}  // namespace tagflow::sched
