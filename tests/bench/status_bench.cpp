// SPDX-License-Identifier: Apache-2.0
// status_bench: what the live status record (mpi_app/health/status.hpp) costs, in the two places it
// runs: (1) the main thread's board updates (one per span switch, per engine step, per training
// step) in ns, against one clock read as the baseline; (2) one beat of the status thread (snapshot,
// JSON, atomic replace of the rank's record; on the coordinator also reading every rank's record
// and replacing status.json) in thread CPU time and wall time, in a temporary directory.
// With --step-s S and --updates-per-step U (tests/bench/status_cost.sh measures both from a real
// run) it prints each as a share of a step. A benchmark, not a test: nothing is asserted.
//   status_bench [--ranks W] [--step-s S] [--updates-per-step U] [--beats N]
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "common/safe_file.hpp"
#include "health/status.hpp"

using namespace tagflow::health;

namespace {
double now_s(clockid_t c) {
    timespec ts{};
    clock_gettime(c, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}
}  // namespace

int main(int argc, char** argv) {
    int ranks = 2, beats = 200;
    double step_s = 0, updates = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string a = argv[i];
        if (a == "--ranks") ranks = std::atoi(argv[i + 1]);
        else if (a == "--step-s") step_s = std::atof(argv[i + 1]);
        else if (a == "--updates-per-step") updates = std::atof(argv[i + 1]);
        else if (a == "--beats") beats = std::atoi(argv[i + 1]);
        else {
            fprintf(stderr, "status_bench: unknown argument %s\n", a.c_str());
            return 2;
        }
    }
    // (1) board updates vs a clock read
    const int n = 5'000'000;
    double t0 = now_s(CLOCK_MONOTONIC);
    volatile double sink = 0;
    for (int i = 0; i < n; ++i) sink = sink + now_s(CLOCK_REALTIME);
    const double clock_ns = 1e9 * (now_s(CLOCK_MONOTONIC) - t0) / n;
    t0 = now_s(CLOCK_MONOTONIC);
    for (int i = 0; i < n; ++i) {
        status_board().set_role(i & 7, i);
        status_board().set_engine(i & 63, 0, i, i >> 10);
    }
    const double update_ns = 1e9 * (now_s(CLOCK_MONOTONIC) - t0) / (2.0 * n);
    printf("board update: %.2f ns (a clock read: %.2f ns; ratio %.2f)\n", update_ns, clock_ns, update_ns / clock_ns);

    // (2) beats of the coordinator's thread, interval 10 ms, W rank records present
    char tmpl[] = "/tmp/tagflow-status-bench.XXXXXX";
    const char* d = mkdtemp(tmpl);
    if (!d) return 1;
    const std::string dir = d;
    mkdir((dir + "/.status").c_str(), 0755);
    StatusConfig c;
    c.out = dir;
    c.world_size = ranks;
    c.run_id = "bench";
    c.mode = "multiplex";
    c.steps = 100;
    c.interval_s = 0.01;
    for (int r = 0; r < ranks; ++r) {
        c.hosts.push_back("node" + std::to_string(r));
        c.tags.push_back("rollout,train");
        StatusConfig o = c;
        o.rank = r;
        if (r > 0)
            tagflow::write_file_replace(dir + "/.status/rank." + std::to_string(r) + ".json",
                                        rank_record(o, 1, 0, false, StatusSnapshot{}, 0).dump() + "\n");
    }
    const double cpu0 = now_s(CLOCK_PROCESS_CPUTIME_ID), w0 = now_s(CLOCK_MONOTONIC);
    start_status_writer(c);
    std::this_thread::sleep_for(std::chrono::duration<double>(beats * c.interval_s));
    status_done();
    const double cpu = now_s(CLOCK_PROCESS_CPUTIME_ID) - cpu0, wall = now_s(CLOCK_MONOTONIC) - w0;
    const double done = wall / c.interval_s;  // beats that ran (about)
    const double beat_cpu = cpu / done;
    printf("coordinator beat (%d ranks): %.1f us CPU (over %.0f beats in %.2f s)\n", ranks, 1e6 * beat_cpu, done, wall);
    std::string rm = "rm -rf '" + dir + "'";
    if (std::system(rm.c_str()) != 0) fprintf(stderr, "status_bench: could not remove %s\n", dir.c_str());
    if (step_s > 0) {
        const double hot = updates * update_ns * 1e-9;
        const double bg = beat_cpu * step_s / 1.0;  // one beat per second (the default refresh)
        printf(
            "per step of %.1f ms: main thread %.3f us (%.5f%% of the step, %.0f updates); status thread %.1f us "
            "CPU (%.4f%% of the step, on another core when one is free)\n",
            1e3 * step_s, 1e6 * hot, 100 * hot / step_s, updates, 1e6 * bg, 100 * bg / step_s);
    }
    return 0;
}
