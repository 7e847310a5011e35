// SPDX-License-Identifier: Apache-2.0
// exchange: the all-gathers of finished rollout samples (sched/sample.hpp, in step/wire.hpp's
// byte form) and of per-sample rows between ranks.
// In sync mode every rank learns every sample of the step (the batch is small next to the
// model); the streaming loader of later issues replaces this with point-to-point sends.
#pragma once
#include <mpi.h>

#include <cstdint>
#include <vector>

#include "sched/sample.hpp"
#include "step/wire.hpp"  // pack_samples / unpack_samples

namespace tagflow::sched {

/// COLLECTIVE over `comm`: every rank gets the samples of all ranks, in rank order.
std::vector<RolloutSample> allgather_samples(const std::vector<RolloutSample>& mine, MPI_Comm comm);

/// COLLECTIVE over `comm`: per-sample float vectors (e.g. values, reference log-probs) computed
/// by their owners reach every rank. `owner[i]` is the comm rank that computed `rows[i]`;
/// `lengths[i]` is its length, known to every rank. On entry a rank's own rows are filled; on
/// return every row is. One MPI_Allgatherv. Throws InternalError on a row of the wrong length.
void allgather_rows(std::vector<std::vector<float>>& rows, const std::vector<int>& owner,
                    const std::vector<size_t>& lengths, MPI_Comm comm);

}  // namespace tagflow::sched
