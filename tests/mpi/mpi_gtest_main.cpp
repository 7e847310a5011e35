// SPDX-License-Identifier: Apache-2.0
// mpi_gtest_main: GoogleTest main for multi-rank tests. Only rank 0 prints results; the
// exit code is the maximum over ranks, so ctest sees a failure on any rank.
#include <gtest/gtest.h>
#include <mpi.h>

#include "common/log.hpp"

int main(int argc, char** argv) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    tagflow::set_log_rank(rank, size);
    ::testing::InitGoogleTest(&argc, argv);
    if (rank != 0) {
        auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
        delete listeners.Release(listeners.default_result_printer());
    }
    int rc = RUN_ALL_TESTS();
    int all = 0;
    MPI_Allreduce(&rc, &all, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Finalize();
    return all;
}
