// SPDX-License-Identifier: Apache-2.0
// weight_sync_mpi: move many tensors between ranks in flat buckets — one MPI collective per
// bucket, never one per tensor; a broadcast bucket inside one tensor goes straight from/into
// tensor memory. Used for the gradient all-reduce and the plain weight broadcast
// (MpiCollectives); the run's weight sync (tensor-aligned buckets, dense or delta, stats for
// /syncs) is train::WeightSync in train/delta_sync_mpi.hpp. fp32 CPU tensors only. Does not
// decide who syncs when (the scheduler does).
#pragma once
#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "train/collectives.hpp"

namespace tagflow::train {

class FlatView;

/// Splits `total_elems` elements into buckets of at most `bucket_bytes` (fp32). Pure.
std::vector<std::pair<size_t, size_t>> bucket_ranges(size_t total_elems, size_t bucket_bytes);

/// COLLECTIVE over `comm`: every rank's tensors get root's values. Tensors must be fp32,
/// contiguous, on the CPU and have the same shapes on every rank.
SyncStats broadcast_tensors(const std::vector<at::Tensor>& tensors, MPI_Comm comm, int root, size_t bucket_bytes);

/// COLLECTIVE over `comm`: tensors <- sum over ranks (in place), bucketed the same way.
SyncStats allreduce_sum(const std::vector<at::Tensor>& tensors, MPI_Comm comm, size_t bucket_bytes);

/// COLLECTIVE over `comm`: one MPI_Bcast of flat elements [first, first + count) of `v`. A
/// range inside one tensor goes from root's tensor straight into the others' (no copy); one
/// that spans tensors is packed into `scratch` and unpacked (Open MPI moves a contiguous
/// buffer several times faster than an hindexed datatype of the pieces).
void bcast_flat_range(const FlatView& v, size_t first, size_t count, MPI_Comm comm, int root,
                      std::vector<float>& scratch);

}  // namespace tagflow::train
