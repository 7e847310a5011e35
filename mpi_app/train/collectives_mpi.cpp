// SPDX-License-Identifier: Apache-2.0
#include "train/collectives_mpi.hpp"

#include "common/error.hpp"
#include "train/weight_sync_mpi.hpp"

namespace tagflow::train {

MpiCollectives::MpiCollectives(MPI_Comm comm, size_t bucket_bytes) : comm_(comm), bucket_bytes_(bucket_bytes) {
    if (comm == MPI_COMM_NULL) throw MpiError("MpiCollectives: MPI_COMM_NULL", MPI_ERR_COMM);
    TAGFLOW_MPI_CHECK(MPI_Comm_rank(comm, &rank_));
    TAGFLOW_MPI_CHECK(MPI_Comm_size(comm, &size_));
}

SyncStats MpiCollectives::allreduce_sum(const std::vector<at::Tensor>& tensors) {
    return train::allreduce_sum(tensors, comm_, bucket_bytes_);
}

SyncStats MpiCollectives::broadcast(const std::vector<at::Tensor>& tensors, int root) {
    return broadcast_tensors(tensors, comm_, root, bucket_bytes_);
}

}  // namespace tagflow::train
