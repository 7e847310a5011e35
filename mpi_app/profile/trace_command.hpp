// SPDX-License-Identifier: Apache-2.0
// trace_command: `tagflow trace RUN.h5 [-o trace.json]` — turns a run file's /timeline (plus
// /steps, /syncs and /ranks) into Chrome trace JSON (the Trace Event Format) that opens in
// ui.perfetto.dev and chrome://tracing. Reads the run file serially (one process; under mpirun
// only rank 0 works). Does not write or modify the run file, and does not record spans (see
// timeline.hpp).
//
// The trace: one process per rank (pid = tid = rank + 1: Perfetto treats pid 0 as the kernel's)
// named "rank R (host: tags)"; one "X" event per /timeline row (cat "timeline", args rank, step,
// row = the row's index in /timeline); ts/dur in microseconds since t0_unix, with the rank's
// /ranks clock_offset added. Spans of one rank that overlap go to extra threads of that process,
// so that events on one (pid, tid) never overlap. A "run" process (pid = ranks + 1) carries one
// "X" event per /steps row (cat "step"), one counter ("C") per step metric, and one instant
// event ("i", cat "sync") per /syncs row at the sync's start. The LibTorch profiles that
// `tagflow profile` had ranks record (profiles/rank.R.step.S-T.json beside the run file,
// on_demand.hpp) join their rank's process on threads of their own ("torch ops, steps S-T"),
// clock_offset added like the spans'; /ranks may hold several rows per rank (the offsets are
// measured again at each sync-mode checkpoint): the last one counts.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace tagflow::profile {

/// What write_chrome_trace() wrote.
struct TraceSummary {
    int64_t spans = 0, steps = 0, syncs = 0;
    int64_t regroups = 0;         // instant events where a step's train group differs from the step before's
    int32_t ranks = 0;            // processes written for ranks
    int32_t overlap_threads = 0;  // extra threads for overlapping spans (0 when none overlap)
    /// Per rank (index = rank): the share of the window from the first span's start to the
    /// last span's end (any rank) covered by that rank's spans.
    std::vector<double> coverage;
    int64_t profiles = 0, profile_events = 0;  // RUN_DIR/profiles/rank.R.step.S-T.json merged, their events
    std::vector<std::string> notes;            // profile files skipped, one line each
};

/// Reads `run_h5` (a tagflow run file, schema v1) and writes the trace to `out_json`
/// (replaced atomically: a failed write leaves no partial file). Throws tagflow::Error with one
/// line naming the problem: missing/unreadable file, not HDF5, not a tagflow file, newer
/// format_version, no /timeline, columns of unequal length, non-finite times, unwritable output.
TraceSummary write_chrome_trace(const std::string& run_h5, const std::string& out_json);

/// LibTorch's profiler gives whole microseconds (KinetoEvent::startUs() and durationUs(), both
/// truncated), so an operator's end (ts + dur) can come out up to 1 µs after the end of the operator
/// it runs inside. Perfetto drops such a slice (it begins inside another one on its thread and ends
/// after it: slice_drop_overlapping_complete_event). This ends each "X" event of `events` (a
/// traceEvents array) that overshoots the innermost "X" event holding its start on the same
/// (pid, tid) by at most `tolerance_us` at that event's end (dur shortened); a larger overlap is left
/// as it is. Events are taken in Perfetto's order (ts, the longer first). Returns how many events
/// were shortened.
int64_t nest_complete_events(nlohmann::json& events, double tolerance_us = 1.0);

/// argv[0] is "trace". Bad usage throws tagflow::ConfigError (exit 2); a file problem prints
/// one line and returns 1; success prints a summary line (rank 0) and returns 0.
int trace_command(int argc, char** argv);

}  // namespace tagflow::profile
