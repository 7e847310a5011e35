// SPDX-License-Identifier: Apache-2.0
#include "common/mpi_gather.hpp"

#include <cstdint>
#include <limits>
#include <string>

#include "common/error.hpp"

namespace tagflow {

GatheredBytes allgather_bytes(const char* data, size_t n, MPI_Comm comm, const char* what) {
    int ranks = 0;
    TAGFLOW_MPI_CHECK(MPI_Comm_size(comm, &ranks));
    const auto R = static_cast<size_t>(ranks);
    // Sizes as int64, so a rank over 2 GiB is seen by all (and all throw) instead of wrapping.
    const auto mine = static_cast<int64_t>(n);
    std::vector<int64_t> sizes(R);
    TAGFLOW_MPI_CHECK(MPI_Allgather(&mine, 1, MPI_INT64_T, sizes.data(), 1, MPI_INT64_T, comm));
    GatheredBytes out;
    out.offset.resize(R);
    out.size.resize(R);
    std::vector<int> counts(R), displs(R);
    int64_t total = 0;
    for (size_t r = 0; r < R; ++r) {
        out.offset[r] = static_cast<size_t>(total);
        out.size[r] = static_cast<size_t>(sizes[r]);
        total += sizes[r];
        if (total > std::numeric_limits<int>::max())
            throw InternalError(std::string(what) + ": " + std::to_string(total) +
                                " bytes to gather over the ranks, over MPI's 2 GiB");
        counts[r] = static_cast<int>(sizes[r]);
        displs[r] = static_cast<int>(out.offset[r]);
    }
    out.all.resize(static_cast<size_t>(total));
    TAGFLOW_MPI_CHECK(MPI_Allgatherv(data, static_cast<int>(n), MPI_CHAR, out.all.data(), counts.data(), displs.data(),
                                     MPI_CHAR, comm));
    return out;
}

}  // namespace tagflow
