// SPDX-License-Identifier: Apache-2.0
// collectives: the communication backend seen by the TrainEngine and the weight sync —
// bucketed all-reduce and broadcast of many tensors over one group of ranks. Implemented over
// MPI (train/collectives_mpi.hpp) and over NCCL on device buffers (gpu/nccl_collectives.hpp).
// No MPI or CUDA in this header, so the model/engine code builds without either.
// Every call is COLLECTIVE over the backend's group: every member calls it, with tensors of
// the same shapes in the same order.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace at {
class Tensor;
}

namespace tagflow::train {

/// What one bucketed collective moved.
struct SyncStats {
    int64_t bytes = 0;    ///< payload bytes per rank (for a delta sync: bytes actually sent)
    int32_t buckets = 0;  ///< collectives issued
    double seconds = 0;   ///< wall time of the whole call on this rank
    /// bytes / seconds / 1e9 (0 when nothing was timed).
    double gbps() const { return seconds > 0 ? static_cast<double>(bytes) / seconds / 1e9 : 0.0; }
};

class Collectives {
public:
    virtual ~Collectives() = default;
    /// This rank's index in the group and the group's size.
    virtual int rank() const = 0;
    virtual int size() const = 0;
    /// Short backend name for logs and the run file, e.g. "mpi" or "nccl".
    virtual std::string name() const = 0;
    /// tensors <- sum over the group, in place, in flat buckets of at most bucket_bytes().
    virtual SyncStats allreduce_sum(const std::vector<at::Tensor>& tensors) = 0;
    /// tensors <- root's values, in place, in flat buckets of at most bucket_bytes().
    virtual SyncStats broadcast(const std::vector<at::Tensor>& tensors, int root) = 0;
    /// Bucket size in bytes (one collective per bucket, never one per tensor).
    virtual size_t bucket_bytes() const = 0;

    // Sharded optimiser state (ZeRO, TrainEngineConfig::shard). `counts[r]` is rank r's part of a
    // 1-D fp32 vector of sum(counts) elements, parts in rank order; one call is one bucket (the
    // caller sizes the vector). MPI: MPI_Reduce_scatter and MPI_Allgatherv.
    /// recv (counts[rank()] elements) <- this rank's part of the sum over the group of `send`.
    virtual SyncStats reduce_scatter_sum(const at::Tensor& send, const std::vector<int64_t>& counts,
                                         const at::Tensor& recv) = 0;
    /// out (sum(counts) elements) <- every rank's `mine` (counts[r] elements), in rank order.
    virtual SyncStats allgather(const at::Tensor& mine, const std::vector<int64_t>& counts, const at::Tensor& out) = 0;
};

}  // namespace tagflow::train
