// SPDX-License-Identifier: Apache-2.0
// heartbeat_cost: what the watchdog costs. Runs N watchdogs (ranks) in one process with a 1 ms
// period for a few seconds, counts the beats they wrote and the process CPU time, and prints
// the CPU time per beat (one record write + up to four reads) and what that is at the real
// period of 1 s. Not a ctest (no timing assertions); run by hand:
//   build/tests/health/heartbeat_cost [ranks=5] [seconds=3] [dir=/tmp]
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "health/heartbeat.hpp"

using namespace tagflow::health;

static double cpu_s() {
    rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_utime.tv_sec + u.ru_stime.tv_sec + 1e-6 * (u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

int main(int argc, char** argv) {
    const int n = argc > 1 ? std::atoi(argv[1]) : 5;
    const int seconds = argc > 2 ? std::atoi(argv[2]) : 3;
    const std::string dir =
        std::string(argc > 3 ? argv[3] : "/tmp") + "/tagflow-heartbeat-cost." + std::to_string(getpid());
    const double c0 = cpu_s();
    {
        std::vector<std::unique_ptr<Watchdog>> w;
        for (int r = 0; r < n; ++r)
            w.push_back(std::make_unique<Watchdog>(WatchdogConfig{dir, r, n, {}, "cost", 600.0, 0.001, 4}));
        std::this_thread::sleep_for(std::chrono::seconds(seconds));
    }
    const double cpu = cpu_s() - c0;
    long beats = 0;
    for (int r = 0; r < n; ++r) {
        std::ifstream f(dir + "/rank." + std::to_string(r));
        std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
        Record rec;
        if (parse_record(text, &rec)) beats += rec.seq;
        std::remove((dir + "/rank." + std::to_string(r)).c_str());
    }
    std::remove(dir.c_str());
    if (beats <= 0) {
        fprintf(stderr, "heartbeat_cost: no beats recorded in %s\n", dir.c_str());
        return 1;
    }
    const double per_beat = cpu / static_cast<double>(beats);
    printf(
        "%d watchdogs, %ld beats in %d s: %.3f s CPU, %.1f us per beat (1 write + %d reads); "
        "at 1 beat/s that is %.4f%% of one core per rank\n",
        n, beats, seconds, cpu, per_beat * 1e6, std::min(4, n - 1), per_beat * 100.0);
    return 0;
}
