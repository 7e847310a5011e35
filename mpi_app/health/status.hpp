// SPDX-License-Identifier: Apache-2.0
// status: the live status record of a running `tagflow train` (issue 23), read by
// `tagflow status RUN_DIR`.
//
// Design. The main thread of every rank keeps a few figures on a process-wide StatusBoard
// (relaxed atomics: a store per span switch, per engine step and per training step; no lock, no
// MPI, no allocation): its active role (the kind of the /timeline span it is in), step, policy
// version, engine slots in use and requests waiting, tokens generated, and on the coordinator the
// run's figures. A background thread per rank (started by start_status_writer) snapshots the
// board every `interval_s` (1 s) and replaces <out>/.status/rank.<N>.json (write_file_replace:
// a temporary renamed into place, never through a planted link). The coordinator's thread also
// reads every rank's file and replaces <out>/status.json: the whole job in one small JSON object
// (format below, share/doc/commands.md), each rank with `age_s`, the time since its record last
// changed *by the coordinator's own monotonic clock* (no clock agreement needed; NFS
// close-to-open, as health/heartbeat.hpp), and `stale` once that exceeds `stale_after_s`.
// Why files and not MPI messages: the same in every mode (sync ranks send the coordinator no
// messages during a step), no second thread calling MPI (MPI_THREAD_FUNNELED), no collective on
// the hot path, and a stopped rank cannot stop the record: its part just ages.
//
// Does NOT: touch the HDF5 run file, MPI or LibTorch; keep history (the record is the present
// only: /steps and /timeline hold the past); decide that a job is lost (the heartbeat watchdog
// does; status only reports).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tagflow::health {

/// Names of the roles, in the order of io::SpanKind (/timeline kind): 0 rollout, 1 train,
/// 2 weight_sync, 3 resplit, 4 idle, 5 io, 6 checkpoint. -1 (nothing yet): "starting".
const char* role_name(int kind);
/// How many roles role_name names (0..kRoleKinds-1).
constexpr int kRoleKinds = 7;

/// This rank's figures, written by the main thread, read by the status thread.
struct StatusSnapshot {
    int role = -1;
    int64_t step = -1;               // the step the current span belongs to
    double role_s[kRoleKinds] = {};  // cumulative seconds in each role since the board's first set_role
    int64_t policy_version = -1;     // of the engine on this rank (-1: no engine)
    int64_t engine_active = 0, engine_waiting = 0;
    int64_t tokens_generated = 0;  // cumulative
    int64_t queue = -1;            // coordinator: finished samples pooled, not trained yet (-1: n/a)
    // run figures (the coordinator's; run_step -1 elsewhere)
    int64_t run_step = -1, samples = 0, stale_dropped = 0;
    double samples_per_s = 0, staleness_mean = 0;
};

class StatusBoard {
public:
    void set_role(int kind, int64_t step);
    void set_engine(int64_t active, int64_t waiting, int64_t tokens_generated, int64_t policy_version);
    void set_queue(int64_t pooled);
    /// The coordinator finished step `steps_done - 1`: total samples trained, that step's rate,
    /// staleness, and the stale drops so far.
    void step_done(int64_t steps_done, int64_t samples_total, double samples_per_s, double staleness_mean,
                   int64_t stale_dropped_total);
    StatusSnapshot snapshot() const;

private:
    struct Impl;
    Impl& impl() const;
};

/// The process-wide board (exists from the first call; updates are cheap no matter whether a
/// status writer runs).
StatusBoard& status_board();

struct StatusConfig {
    std::string out;  // run directory: writes .status/rank.<N>.json and (coordinator) status.json
    int rank = 0, world_size = 1, coordinator = 0;
    std::vector<std::string> hosts, tags;  // per world rank
    std::string run_id, mode;
    int64_t steps = 0;       // --steps (ETA)
    int64_t first_step = 0;  // a resumed run's starting step (its samples/s and ETA count from here)
    double interval_s = 1.0;
    double stale_after_s = 5.0;
};

/// Starts this rank's status thread (process-wide, until the process exits). interval_s <= 0: none.
void start_status_writer(StatusConfig c);
/// The run ended normally on this rank: the next records say "done" and the thread stops.
void status_done() noexcept;

/// Record formats (also what `tagflow status` checks).
constexpr const char* kStatusFormat = "tagflow-status";
constexpr const char* kRankStatusFormat = "tagflow-status-rank";
constexpr int kStatusVersion = 1;

/// One rank's record from a snapshot (pure; `tokens_per_s` computed by the caller).
nlohmann::json rank_record(const StatusConfig& c, int64_t seq, double unix_now, bool done, const StatusSnapshot& s,
                           double tokens_per_s);

/// Reads and checks RUN_DIR/status.json (no link followed, a few MiB at most, the fields the
/// printout uses present): one ConfigError line naming the path for anything else.
nlohmann::json load_status_record(const std::string& dir);

/// `tagflow status RUN_DIR [--json] [--watch [--interval S]]` (argv[0] is "status"). Bad usage or
/// a bad run directory / status file: one line, exit 2.
int status_command(int argc, char** argv);

}  // namespace tagflow::health
