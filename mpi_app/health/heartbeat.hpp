// SPDX-License-Identifier: Apache-2.0
// heartbeat: the watchdog that ends a job promptly when one of its ranks is lost (killed,
// out of memory, SIGSTOPped, its node gone or its process wedged in the kernel).
//
// Design. Every rank runs one background thread that, once per interval (1 s):
//   1. rewrites its own record <out>/.heartbeat/rank.<N> in place (one fixed-size pwrite of
//      "tagflow-heartbeat 1 RUN SEQ STATE PID HOST", then close), and
//   2. reads the records of the few ranks it watches: the next `watch` (4) ranks in ring
//      order, so the cost per rank is constant at any job size and every rank is watched by
//      up to 4 others. A peer whose SEQ has not changed for `timeout_s` by *this rank's own
//      monotonic clock* is lost: the thread prints
//        tagflow: rank 3 (host node2) stopped answering: no heartbeat for 31 s; aborting the job
//      to stderr and ends the process with _exit(kLostRankExitCode). mpirun (any rank exiting
//      without MPI_Finalize aborts the job) and `srun -K1` / --kill-on-bad-exit=1 then tear the
//      rest of the job down.
// Why files and not MPI: the main thread owns MPI (MPI_THREAD_FUNNELED, see common/mpi_env) and
// may be blocked inside a collective with the lost rank; a second thread may not call MPI at
// that thread level, and MPI_Abort from it is not allowed either. The run directory is on a
// filesystem every rank shares anyway (the parallel HDF5 run file is written there).
// Why a sequence number and not mtimes: mtimes of another host are that host's clock, and NFS
// caches attributes for up to a minute; a record read after open() is fresh under NFS's
// close-to-open consistency, and counting the time since the value last changed on the
// reader's own steady clock needs no clock agreement between nodes.
// False alarms it avoids: records of an earlier start in the same run directory carry another
// RUN id and are ignored; a rank that finished (mark_done) is no longer watched; a watcher that
// was itself suspended (its own loop gap > timeout / 2) restarts every peer's clock instead of
// accusing them. A rank that never writes a record within the timeout counts as lost.
//
// Does NOT: touch MPI or HDF5 (the thread only does POSIX file I/O and may call _exit); detect
// a deadlock inside a live process (its heartbeat thread still beats — a hang of the main thread
// alone needs a progress timeout, which this is not); checkpoint or requeue anything (see
// share/doc/failures.md). A SIGKILLed rank is also reported by the launcher itself, usually at
// once (mpirun: "process rank 1 ... exited on signal 9"; srun: "node2: task 1: Killed").
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace tagflow::health {

/// Exit status of a process whose watchdog found a lost rank (sysexits EX_UNAVAILABLE).
constexpr int kLostRankExitCode = 69;

struct WatchdogConfig {
    std::string dir;  // heartbeat directory, normally <out>/.heartbeat (created)
    int rank = 0;     // this rank (world)
    int world_size = 1;
    std::vector<std::string> hosts;  // host of each world rank (named in the message); may be empty
    std::string run_id;              // the same on every rank of one start, new for the next start
    double timeout_s = 30.0;         // silence after which a peer is lost; 0 = no watchdog
    double interval_s = 1.0;         // beat and check period
    int watch = 4;                   // successors in ring order that each rank watches
};

/// One heartbeat record as written to rank.<N>.
struct Record {
    std::string run_id;
    int64_t seq = -1;
    bool done = false;
    long pid = 0;
    std::string host;
};

/// The fixed-size text of a record (kRecordBytes long, ends in '\n').
std::string format_record(const Record& r);
/// Parses what format_record wrote; false for anything else (empty, torn, another format).
bool parse_record(const std::string& text, Record* out);
constexpr size_t kRecordBytes = 256;

/// The ranks `rank` watches: the next min(watch, world_size - 1) ranks in ring order.
std::vector<int> watched_ranks(int rank, int world_size, int watch);

/// "tagflow: rank 3 (host node2) stopped answering: no heartbeat for 31 s; aborting the job"
std::string lost_message(int rank, const std::string& host, double silent_s);

/// Pure bookkeeping of the watched peers (no threads, no files): fed what was read and the
/// reader's own clock, says which peer is lost. Unit-testable with made-up times.
class PeerTracker {
public:
    using Clock = std::chrono::steady_clock;
    struct Lost {
        int rank = -1;
        std::string host;
        double silent_s = 0;
    };
    PeerTracker(std::vector<int> peers, std::vector<std::string> hosts, std::string run_id, double timeout_s,
                Clock::time_point start);
    /// A read of `rank`'s file at `now`: `ok` false when the file is missing or unreadable.
    void observe(int rank, bool ok, const Record& r, Clock::time_point now);
    /// The watcher's own loop ran at `now`; a gap over timeout/2 since the last call means this
    /// process was suspended: every peer gets a fresh window.
    void tick(Clock::time_point now);
    /// The first watched peer silent for longer than the timeout at `now`, if any.
    bool find_lost(Clock::time_point now, Lost* out) const;
    /// Peers still watched (not done).
    int active() const;

private:
    struct Peer {
        int rank = -1;
        int64_t seq = -1;
        bool done = false;
        std::string host;
        Clock::time_point last_change;
    };
    std::vector<Peer> peers_;
    std::string run_id_;
    double timeout_s_;
    Clock::time_point last_tick_;
};

/// The watchdog thread. Starts in the constructor (unless timeout_s is 0); the destructor
/// stops it (and marks this rank done). `on_lost` replaces the default print-and-_exit (tests).
class Watchdog {
public:
    using LostHandler = std::function<void(const PeerTracker::Lost&)>;
    explicit Watchdog(WatchdogConfig c, LostHandler on_lost = nullptr);
    ~Watchdog();
    Watchdog(const Watchdog&) = delete;
    Watchdog& operator=(const Watchdog&) = delete;
    /// This rank finished normally: its record says done (peers stop watching it); the thread
    /// keeps beating and watching the others until the Watchdog is destroyed.
    void mark_done() noexcept;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

/// Process-wide watchdog for `tagflow train`: started once, kept until the process exits (so it
/// also covers MPI_Finalize waiting for a lost peer). A no-op when c.timeout_s is 0.
void start_watchdog(WatchdogConfig c);
/// This rank's run ended normally (no-op without a watchdog).
void mark_done() noexcept;

}  // namespace tagflow::health
