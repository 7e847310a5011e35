// SPDX-License-Identifier: Apache-2.0
// torch_profiler: the one place that talks to LibTorch's profiler (torch::autograd::profiler,
// the Kineto-based API of LibTorch >= 1.13: enableProfiler / disableProfiler). Without Kineto
// (Debian's CPU build) the events still come (RecordFunction), only ProfilerResult::save() is
// missing, so the Chrome trace is written here from the events. Kept apart so that no other
// header pulls in LibTorch.
// Does not: decide when to profile (on_demand.hpp), or profile other threads than the caller's.
#pragma once
#include <cstdint>
#include <string>

namespace tagflow::profile {

/// Starts recording on this thread: CPU operators (+ CUDA where available), input shapes when
/// `shapes`, allocations when `memory`. Throws tagflow::Error (one line) if it cannot start,
/// e.g. a profiler is already active on this thread.
void torch_profile_start(bool shapes, bool memory);

/// What the trace header says about the recording.
struct TraceHeader {
    int rank = 0;
    std::string id;
    int64_t first_step = 0, last_step = 0;
    double t0_unix = 0;       // the run's t0
    double clock_skew_s = 0;  // this rank's unix_now() minus the system clock (test skew; 0 in real runs)
};

/// Stops recording and writes the events as Chrome trace JSON to `path` (write_file_replace).
/// Returns the number of events written. Throws tagflow::Error (one line); the profiler is
/// stopped in every case.
int64_t torch_profile_stop_and_write(const std::string& path, const TraceHeader& h);

/// Stops recording, discarding the events (never throws).
void torch_profile_abort() noexcept;

}  // namespace tagflow::profile
