/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mpi_tags: the smallest MPI program that shows what spank_tagflow gave each
 * rank: prints "rank R/N node NODE tags TAGS source SRC" and checks an
 * allreduce across all ranks (so a broken PMIx wire-up fails the step).
 * Used by the loopback-cluster tests only; not installed.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char** argv) {
    int rank = 0, size = 0, sum = 0;
    const char* node = getenv("SLURMD_NODENAME");
    const char* tags = getenv("TAGFLOW_TAGS");
    const char* src = getenv("TAGFLOW_TAG_SOURCE");

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    printf("rank %d/%d node %s tags %s source %s allreduce %s\n", rank, size, node ? node : "-", tags ? tags : "-",
           src ? src : "-", sum == size * (size - 1) / 2 ? "ok" : "WRONG");
    fflush(stdout);
    MPI_Finalize();
    return sum == size * (size - 1) / 2 ? 0 : 1;
}
