// SPDX-License-Identifier: Apache-2.0
// nccl_collectives_mpi: the NCCL backend's bootstrap over MPI — rank 0 of the communicator
// makes the NCCL id and broadcasts it; each rank picks a GPU by its node-local rank.
// Does not keep the MPI communicator: after this, collectives go through NCCL only.
#pragma once
#include <mpi.h>

#include <cstddef>
#include <memory>

#include "gpu/nccl_collectives.hpp"

namespace tagflow::gpu {

/// COLLECTIVE over `comm`. Every rank must see at least one GPU (checked with one MPI_Allreduce
/// first, so a rank without a GPU makes every rank throw the same tagflow::Error instead of
/// hanging in NCCL's set-up). `device` < 0: node-local rank modulo the visible device count.
std::unique_ptr<NcclCollectives> make_nccl_collectives(MPI_Comm comm, size_t bucket_bytes, int device = -1);

}  // namespace tagflow::gpu
