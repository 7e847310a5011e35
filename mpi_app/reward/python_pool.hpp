// SPDX-License-Identifier: Apache-2.0
// python_pool: the `--reward-fn FILE.py[:NAME]` scorer. A pool of long-lived Python processes
// (share/python/tagflow_reward_worker.py under Debian's /usr/bin/python3), each fed JSON Lines
// batches over a Unix socket pair that is its stdin and stdout; its stderr goes to the log.
//
// One dispatcher thread owns every worker: it hands queued requests out in batches (keeping a
// second batch queued in the socket so a worker never waits for tagflow), reads one result line
// per sample, and enforces --reward-timeout per sample: a worker whose current sample runs past
// it is killed (its process group) and restarted, that sample fails with "timed out", and the
// samples queued behind it go back to the front of the queue. A worker that dies fails the
// sample it was scoring the same way. The constructor starts the workers and waits for each
// to import FILE.py and check NAME's signature; a problem there is a ConfigError naming FILE.
//
// Workers die with the thread that started them (PR_SET_PDEATHSIG): construct the pool on a
// thread that outlives it (the main thread); restarts are started by the dispatcher thread.
//
// Does not: run the Python function in tagflow's process, retry a failed sample, or restart a
// worker whose restart failed (the scorer then fails every request with that cause).
#pragma once
#include <sys/types.h>

#include <chrono>
#include <deque>
#include <string>
#include <thread>
#include <vector>

#include "reward/scorer.hpp"

namespace tagflow::reward {

class PythonPool final : public Scorer {
public:
    explicit PythonPool(const Options& opt);
    ~PythonPool() override;
    std::string describe() const override;

private:
    using Clock = std::chrono::steady_clock;
    enum class State { kDead, kStarting, kReady };
    struct Worker {
        pid_t pid = -1;
        int fd = -1;  // socket: the worker's stdin and stdout
        State state = State::kDead;
        std::string out;               // frames not yet written
        std::string in;                // bytes after the last complete line
        std::deque<Request> inflight;  // sent, results pending, in order
        Clock::time_point since;       // kStarting: spawn; kReady: when inflight.front() began
    };

    void wake() override;
    void spawn(Worker& w);
    /// Waits (in the constructor) for a fresh worker's first line; returns "" or the problem.
    std::string await_ready(Worker& w);
    void loop();
    void feed(Worker& w, std::size_t ready_workers);
    bool flush_out(Worker& w);  // false: the socket failed (a closed peer is left to its EOF)
    bool read_in(Worker& w);    // false: EOF or error
    /// Handles one line from a ready worker; false on a protocol violation (`why` set).
    bool on_line(Worker& w, const std::string& line, std::string& why);
    /// The worker is gone or must go: fail its current sample with `cause` (if any), requeue the
    /// rest, reap it, restart it. `killed`: kill first (hang, bad frame).
    void retire(Worker& w, const std::string& cause, bool killed);
    std::string reap(Worker& w, bool kill_first);  // "exit status N" / "killed by signal N (NAME)"
    void on_restart_failed(Worker& w, const std::string& why);

    std::string path_, name_, python_, script_, log_path_;
    double timeout_s_, startup_timeout_s_;
    std::size_t batch_;
    int log_fd_ = -1;
    int event_fd_ = -1;
    std::vector<Worker> workers_;
    std::thread thread_;
};

}  // namespace tagflow::reward
