// SPDX-License-Identifier: Apache-2.0
#include "gpu/nccl_collectives_mpi.hpp"

#include <string>

#include "common/error.hpp"

namespace tagflow::gpu {

std::unique_ptr<NcclCollectives> make_nccl_collectives(MPI_Comm comm, size_t bucket_bytes, int device) {
    if (comm == MPI_COMM_NULL) throw MpiError("make_nccl_collectives: MPI_COMM_NULL", MPI_ERR_COMM);
    int rank = 0, size = 1;
    TAGFLOW_MPI_CHECK(MPI_Comm_rank(comm, &rank));
    TAGFLOW_MPI_CHECK(MPI_Comm_size(comm, &size));

    std::string why;
    int ndev = cuda_device_count(&why);
    int min_dev = 0;
    TAGFLOW_MPI_CHECK(MPI_Allreduce(&ndev, &min_dev, 1, MPI_INT, MPI_MIN, comm));
    if (min_dev == 0)
        throw Error(ndev == 0 ? "NCCL backend: no CUDA device visible on this rank (" + why + ")"
                              : std::string("NCCL backend: another rank of the group sees no CUDA device"));

    if (device < 0) {
        MPI_Comm node = MPI_COMM_NULL;
        TAGFLOW_MPI_CHECK(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node));
        int local = 0;
        MPI_Comm_rank(node, &local);
        MPI_Comm_free(&node);
        device = local % ndev;
    }

    NcclId id{};
    if (rank == 0) id = NcclCollectives::new_id();
    TAGFLOW_MPI_CHECK(MPI_Bcast(id.bytes, static_cast<int>(sizeof id.bytes), MPI_BYTE, 0, comm));
    return std::make_unique<NcclCollectives>(id, rank, size, device, bucket_bytes);
}

}  // namespace tagflow::gpu
