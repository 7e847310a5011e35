// SPDX-License-Identifier: Apache-2.0
// mpi_test_util: the helpers every multi-rank gtest shares (tests/mpi, tests/sync, tests/gpu):
// this rank and the world size, and agreement across ranks, so that a check fails on every rank
// together and no rank returns early from a test whose other ranks still enter collectives.
// Include it as "mpi_test_util.hpp" (tagflow_mpi_gtest_main puts tests/mpi on the include path).
// Does not initialise MPI: mpi_gtest_main.cpp does, before any test runs.
#pragma once
#include <mpi.h>

#include <cstdint>

namespace tagflow::test {

/// This process's rank in MPI_COMM_WORLD.
inline int world_rank() {
    int r = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    return r;
}

/// The number of ranks in MPI_COMM_WORLD.
inline int world_size() {
    int n = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    return n;
}

/// True on every rank iff `ok` is true on every rank (never early-return on one rank).
inline bool all_ranks(bool ok) {
    int v = ok ? 1 : 0, all = 0;
    MPI_Allreduce(&v, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    return all == 1;
}

/// The smallest `v` over the ranks of `comm`, on every rank.
inline int min_over_ranks(int v, MPI_Comm comm = MPI_COMM_WORLD) {
    int m = 0;
    MPI_Allreduce(&v, &m, 1, MPI_INT, MPI_MIN, comm);
    return m;
}

/// True on every rank of `comm` iff every rank passed the same `x`.
inline bool same_everywhere(int64_t x, MPI_Comm comm = MPI_COMM_WORLD) {
    int64_t lo = 0, hi = 0;
    MPI_Allreduce(&x, &lo, 1, MPI_INT64_T, MPI_MIN, comm);
    MPI_Allreduce(&x, &hi, 1, MPI_INT64_T, MPI_MAX, comm);
    return lo == hi;
}

}  // namespace tagflow::test
