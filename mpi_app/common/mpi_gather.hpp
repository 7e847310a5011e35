// SPDX-License-Identifier: Apache-2.0
// mpi_gather: every rank's bytes to every rank (the size exchange and MPI_Allgatherv that
// sample, validation and checkpoint exchanges all need).
// Does not serialise anything: callers pack and unpack their own bytes.
#pragma once
#include <mpi.h>

#include <cstddef>
#include <string_view>
#include <vector>

namespace tagflow {

/// Every rank's bytes, in rank order.
struct GatheredBytes {
    std::vector<char> all;             // rank 0's bytes, then rank 1's, ...
    std::vector<size_t> offset, size;  // where rank r's begin in `all`, and how many
    int ranks() const { return static_cast<int>(size.size()); }
    std::string_view part(int r) const {
        const auto k = static_cast<size_t>(r);
        return {all.data() + offset[k], size[k]};
    }
};

/// COLLECTIVE over `comm`: every rank passes its `n` bytes (n may be 0) and gets every rank's.
/// Throws InternalError on every rank alike (after the size exchange, before moving bytes) when
/// the total is over 2 GiB, MPI's int counts; `what` names the exchange in that message.
GatheredBytes allgather_bytes(const char* data, size_t n, MPI_Comm comm, const char* what);

}  // namespace tagflow
