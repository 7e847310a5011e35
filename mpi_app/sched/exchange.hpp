// SPDX-License-Identifier: Apache-2.0
// exchange: finished rollout samples as plain data, and their all-gather between ranks.
// In sync mode every rank learns every sample of the step (the batch is small next to the
// model); the streaming loader of later issues replaces this with point-to-point sends.
#pragma once
#include <mpi.h>

#include <cstdint>
#include <vector>

namespace tagflow::sched {

struct RolloutSample {
    int64_t id = 0;
    int64_t group = 0;         // global prompt group == position in the task's prompt order
    int32_t rank = 0;          // world rank that generated it
    int32_t version = 0;       // policy version of every generated token
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
};

/// Serialises samples into bytes and back (exposed for tests).
std::vector<char> pack_samples(const std::vector<RolloutSample>& samples);
std::vector<RolloutSample> unpack_samples(const char* data, size_t size);

/// COLLECTIVE over `comm`: every rank gets the samples of all ranks, in rank order.
std::vector<RolloutSample> allgather_samples(const std::vector<RolloutSample>& mine, MPI_Comm comm);

/// COLLECTIVE over `comm`: per-sample float vectors (e.g. values, reference log-probs) computed
/// by their owners reach every rank. `owner[i]` is the comm rank that computed `rows[i]`;
/// `lengths[i]` is its length, known to every rank. On entry a rank's own rows are filled; on
/// return every row is. One MPI_Allgatherv. Throws InternalError on a row of the wrong length.
void allgather_rows(std::vector<std::vector<float>>& rows, const std::vector<int>& owner,
                    const std::vector<size_t>& lengths, MPI_Comm comm);

}  // namespace tagflow::sched
