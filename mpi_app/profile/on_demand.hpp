// SPDX-License-Identifier: Apache-2.0
// on_demand: operator-level profiling of a running `tagflow train`, switched on from outside
// (issue 23 point 2). `tagflow profile RUN_DIR --ranks LIST --steps N` replaces the request
// file RUN_DIR/profile.request (JSON, below); every rank looks at it once per step, at its first
// span of a new step (profile::Span calls note_step(): one relaxed atomic load per span, one
// stat(2) per step). A rank named in a request it has not seen records its next N steps with
// LibTorch's profiler (torch_profiler.hpp: CPU operators with input shapes; CUDA kernels too
// where the build has CUDA) and then writes
//   RUN_DIR/profiles/rank.R.step.S-T.json   a Chrome trace (ts in µs since the run's t0_unix on
//                                           this rank's clock; `tagflow trace` adds clock_offset)
//   RUN_DIR/profiles/ID.rank.R.json         the result record: status "done" or "failed" + reason
// Nothing here may stop training: a bad request file, a profiler that cannot start (already
// active) or a trace that cannot be written is one log line (and a "failed" record where the
// directory allows one); the step goes on.
//
// Does not: include LibTorch (torch_profiler.cpp does), talk MPI, profile threads other than
// the one that called init_on_demand_profiling() (the main thread: LibTorch's profiler is
// per thread), or pick up a request that was already in place when the rank started (a
// restarted job does not re-run an old request).
#pragma once
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

namespace tagflow::profile {

constexpr const char* kProfileRequestFile = "profile.request";  // in the run directory
constexpr const char* kProfilesDir = "profiles";                // in the run directory
constexpr const char* kProfileRequestFormat = "tagflow-profile-request";
constexpr const char* kProfileResultFormat = "tagflow-profile-result";
constexpr const char* kProfileTraceGenerator = "tagflow profile";
constexpr int kProfileVersion = 1;
constexpr int64_t kProfileMaxSteps = 1000;

/// What `tagflow profile` asks for.
struct ProfileRequest {
    std::string id;          // [0-9a-zA-Z_-]{1,64}: names the result records
    std::vector<int> ranks;  // world ranks, ascending, no duplicates
    int64_t steps = 1;       // 1 .. kProfileMaxSteps
    bool record_shapes = true, profile_memory = false;
    double t_unix = 0;  // when it was written (informational)
};

/// The request as JSON text (what the command writes).
std::string request_to_json(const ProfileRequest& r);
/// Parses and checks a request; throws tagflow::Error with one line naming `path` and the problem.
ProfileRequest parse_profile_request(const std::string& text, const std::string& path);

/// Result record file name for `id` and `rank` (inside profiles/).
std::string result_file_name(const std::string& id, int rank);
/// Trace file name of rank `rank` for steps first..last (inside profiles/).
std::string trace_file_name(int rank, int64_t first, int64_t last);

struct OnDemandConfig {
    std::string out;     // run directory
    int rank = 0;        // world rank
    double t0_unix = 0;  // the run clock's t0 (profile::Clock of the schedulers)
};

/// Arms on-demand profiling on the calling thread (the main thread). Notes the request file
/// present now (if any) as already seen. Until this is called note_step() only keeps the step.
void init_on_demand_profiling(const OnDemandConfig& c);
/// The run ends on this rank: a profile in progress is written (its last step the last one
/// seen, the record says so). Never throws.
void finish_on_demand_profiling() noexcept;

namespace detail {
extern std::atomic<int64_t> g_seen_step;
void step_boundary(int64_t step);
}  // namespace detail

/// Called with the step of every span (profile::Span): the first span of a higher step than any
/// before is a step boundary, where a request is looked for and a profile starts or stops.
inline void note_step(int64_t step) {
    if (step > detail::g_seen_step.load(std::memory_order_relaxed)) detail::step_boundary(step);
}

/// `tagflow profile RUN_DIR --ranks LIST --steps N [...]` (argv[0] is "profile"): writes the
/// request, waits for the ranks' records (--timeout), reports each rank; exit 0 all delivered,
/// 1 some failed or did not answer, 2 bad usage or run directory (one line).
int profile_command(int argc, char** argv);

}  // namespace tagflow::profile
