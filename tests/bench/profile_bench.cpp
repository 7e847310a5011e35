// SPDX-License-Identifier: Apache-2.0
// profile_bench: what on-demand profiling (mpi_app/profile/on_demand.hpp) costs a rank while no
// profile is asked for, the state a run spends nearly all its time in: (1) per span, the check
// profile::Span makes (note_step with a step already seen: one relaxed atomic load); (2) per
// step, the look at RUN_DIR/profile.request at the step boundary, with no request file (one
// lstat, ENOENT) and with an old request still there (lstat + compare). Baselines in the same
// run: one read of the run clock (profile::unix_now, the floor of any span) and one whole
// profile::Span (record + the check). With --step-s S and --spans-per-step K
// (tests/bench/profile_cost.sh measures both from a real run) it prints the share of a step.
// A benchmark, not a test: nothing is asserted.
//   profile_bench [--step-s S] [--spans-per-step K]
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "common/safe_file.hpp"
#include "profile/on_demand.hpp"
#include "profile/timeline.hpp"

using namespace tagflow;

namespace {
double mono() {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}
}  // namespace

int main(int argc, char** argv) {
    double step_s = 0, spans = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string a = argv[i];
        if (a == "--step-s") step_s = std::atof(argv[i + 1]);
        else if (a == "--spans-per-step") spans = std::atof(argv[i + 1]);
        else {
            fprintf(stderr, "profile_bench: unknown argument %s\n", a.c_str());
            return 2;
        }
    }
    char tmpl[] = "/tmp/tagflow-profile-bench.XXXXXX";
    const char* d = mkdtemp(tmpl);
    if (!d) return 1;
    const std::string dir = d;
    profile::init_on_demand_profiling({dir, 0, profile::unix_now()});

    const int n = 5'000'000;
    volatile double sink = 0;
    double t0 = mono();
    for (int i = 0; i < n; ++i) sink = sink + profile::unix_now();
    const double clock_ns = 1e9 * (mono() - t0) / n;

    profile::note_step(1);  // step 1 seen: every further call with 1 is the per-span check
    t0 = mono();
    for (int i = 0; i < n; ++i) profile::note_step(1 - (i & 1));
    const double check_ns = 1e9 * (mono() - t0) / n;

    profile::Clock clock;
    profile::Timeline tl(clock, 0);
    const int m = 1'000'000;
    t0 = mono();
    for (int i = 0; i < m; ++i) {
        profile::Span s(tl, io::SpanKind::kTrain, 1);
        if ((i & 4095) == 0) tl.take();
    }
    const double span_ns = 1e9 * (mono() - t0) / m;

    // step boundaries: each call is a new step (the slow path), no request file
    const int b = 200'000;
    int64_t step = 2;
    t0 = mono();
    for (int i = 0; i < b; ++i) profile::note_step(step++);
    const double none_ns = 1e9 * (mono() - t0) / b;
    // an old request for another rank stays in place: read once, then lstat + compare
    write_file_replace(
        dir + "/profile.request",
        "{\"format\":\"tagflow-profile-request\",\"version\":1,\"id\":\"old\",\"ranks\":[1],\"steps\":1}\n");
    profile::note_step(step++);
    t0 = mono();
    for (int i = 0; i < b; ++i) profile::note_step(step++);
    const double seen_ns = 1e9 * (mono() - t0) / b;
    std::string rm = "rm -rf '" + dir + "'";
    if (std::system(rm.c_str()) != 0) fprintf(stderr, "profile_bench: could not remove %s\n", dir.c_str());

    printf("per span: check %.2f ns; a whole Span %.1f ns; a clock read %.2f ns (check / clock %.2f)\n", check_ns,
           span_ns, clock_ns, check_ns / clock_ns);
    printf("per step boundary: %.0f ns without a request file, %.0f ns with an old one (%.1f / %.1f clock reads)\n",
           none_ns, seen_ns, none_ns / clock_ns, seen_ns / clock_ns);
    if (step_s > 0) {
        const double off = spans * check_ns * 1e-9 + (seen_ns > none_ns ? seen_ns : none_ns) * 1e-9;
        printf("per step of %.1f ms (%.0f checks): %.3f us with profiling off, %.6f%% of the step (budget 0.05%%)\n",
               1e3 * step_s, spans, 1e6 * off, 100 * off / step_s);
    }
    return 0;
}
