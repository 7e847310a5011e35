// SPDX-License-Identifier: Apache-2.0
// collectives_mpi: train::Collectives over an MPI communicator (fp32 CPU tensors), built on
// the bucketed broadcast/all-reduce of weight_sync_mpi.hpp. Does not own the communicator.
#pragma once
#include <mpi.h>

#include "train/collectives.hpp"

namespace tagflow::train {

class MpiCollectives final : public Collectives {
public:
    /// `comm` must outlive this object. Throws MpiError if it is MPI_COMM_NULL.
    MpiCollectives(MPI_Comm comm, size_t bucket_bytes);
    int rank() const override { return rank_; }
    int size() const override { return size_; }
    std::string name() const override { return "mpi"; }
    SyncStats allreduce_sum(const std::vector<at::Tensor>& tensors) override;
    SyncStats broadcast(const std::vector<at::Tensor>& tensors, int root) override;
    size_t bucket_bytes() const override { return bucket_bytes_; }
    SyncStats reduce_scatter_sum(const at::Tensor& send, const std::vector<int64_t>& counts,
                                 const at::Tensor& recv) override;
    SyncStats allgather(const at::Tensor& mine, const std::vector<int64_t>& counts, const at::Tensor& out) override;
    MPI_Comm comm() const { return comm_; }

private:
    MPI_Comm comm_;
    size_t bucket_bytes_;
    int rank_ = 0, size_ = 1;
};

}  // namespace tagflow::train
