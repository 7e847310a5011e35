// SPDX-License-Identifier: Apache-2.0
// watchdog_probe_mpi: the smallest MPI job that runs the heartbeat watchdog the way
// `tagflow train` does (after MPI_Init_thread FUNNELED, hosts from MPI_Get_processor_name,
// a run id broadcast from rank 0), then does an MPI_Allreduce every 50 ms and prints
// "tick N" from rank 0. Lets the launcher-level behaviour (mpirun, srun -K1) be tested in
// seconds without LibTorch:
//   watchdog_probe_mpi --out DIR [--timeout S=5] [--ticks N=0 (forever)]
// Exits 0 after N ticks (marking itself done); a lost peer makes the watchdog end it with 69.
#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "health/heartbeat.hpp"

int main(int argc, char** argv) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    std::string out;
    double timeout = 5;
    long ticks = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!std::strcmp(argv[i], "--out")) out = argv[i + 1];
        else if (!std::strcmp(argv[i], "--timeout")) timeout = std::atof(argv[i + 1]);
        else if (!std::strcmp(argv[i], "--ticks")) ticks = std::atol(argv[i + 1]);
    }
    if (out.empty()) {
        if (rank == 0) fprintf(stderr, "usage: watchdog_probe_mpi --out DIR [--timeout S] [--ticks N]\n");
        MPI_Finalize();
        return 2;
    }
    char name[MPI_MAX_PROCESSOR_NAME] = {0};
    int len = 0;
    MPI_Get_processor_name(name, &len);
    std::vector<char> all(static_cast<size_t>(size) * MPI_MAX_PROCESSOR_NAME);
    MPI_Allgather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, all.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR, MPI_COMM_WORLD);
    std::vector<std::string> hosts;
    for (int r = 0; r < size; ++r) hosts.emplace_back(&all[static_cast<size_t>(r) * MPI_MAX_PROCESSOR_NAME]);
    double t0 = MPI_Wtime() + static_cast<double>(getpid()) * 1e-3;
    MPI_Bcast(&t0, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    tagflow::health::start_watchdog({out, rank, size, hosts, std::to_string(t0), timeout});
    for (long t = 1; ticks == 0 || t <= ticks; ++t) {
        int one = 1, sum = 0;
        MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        if (rank == 0) {
            printf("tick %ld (%d ranks)\n", t, sum);
            fflush(stdout);
        }
        usleep(50000);
    }
    tagflow::health::mark_done();
    MPI_Finalize();
    return 0;
}
