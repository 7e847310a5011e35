// SPDX-License-Identifier: Apache-2.0
// weight_sync: move many tensors between ranks in flat buckets — one MPI collective per
// bucket, never one per tensor. Used for the train root -> rollout ranks weight broadcast
// and for the gradient all-reduce across the train group. fp32 CPU tensors only.
// Does not decide who syncs when (that is the scheduler's job).
#pragma once
#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "train/collectives.hpp"

namespace tagflow::train {

/// Splits `total_elems` elements into buckets of at most `bucket_bytes` (fp32). Pure.
std::vector<std::pair<size_t, size_t>> bucket_ranges(size_t total_elems, size_t bucket_bytes);

/// COLLECTIVE over `comm`: every rank's tensors get root's values. Tensors must be fp32,
/// contiguous, on the CPU and have the same shapes on every rank.
SyncStats broadcast_tensors(const std::vector<at::Tensor>& tensors, MPI_Comm comm, int root,
                            size_t bucket_bytes);

/// COLLECTIVE over `comm`: tensors <- sum over ranks (in place), bucketed the same way.
SyncStats allreduce_sum(const std::vector<at::Tensor>& tensors, MPI_Comm comm, size_t bucket_bytes);

}  // namespace tagflow::train
