// SPDX-License-Identifier: Apache-2.0
// scorer: the common interface of tagflow's external reward paths (share/doc/rewards.md).
// A Scorer takes batches of requests {id, row, data_source, solution_str, ground_truth,
// extra_info} and hands back, later and in any order, one Result per request: a score that is
// finite in float32 plus the other keys of a returned dict (JSON text), or a one-line cause.
//
// Threading model. submit(), poll(), pending() and stats() only take the scorer's mutex for a
// queue operation (no I/O, no waiting for a worker): the rollout's hot path may call them
// between decode steps. The work runs on threads the scorer owns (PythonPool: one dispatcher
// thread driving every worker process through poll(2); UrlScorer: `concurrency` sender threads,
// each blocking in its own HTTP request). wait_for() and drain() block and are for callers off
// the hot path (the `tagflow reward` command, the end of a run, tests). Every method is
// thread-safe; results are handed out once.
//
// Does not: read data files or decide which scorer a data_source uses (mpi_app/data), apply the
// --reward-error policy itself (a failed Result carries score 0 and ok=false under both
// policies; the caller checks fatal()), or write anything to the run file.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace tagflow::reward {

/// --reward-error: `fail` (default) makes a failed reward a reason to checkpoint and exit
/// non-zero; `zero` scores it 0 and counts it (Stats::failed).
enum class ErrorPolicy { kFail, kZero };
ErrorPolicy parse_error_policy(const std::string& s);  // throws ConfigError naming --reward-error
const char* to_string(ErrorPolicy p);

/// One sample to score. `ground_truth` and `extra_info` are JSON text passed to the function as
/// the Python/JSON values they denote ("null" when absent). `id` is the caller's key (unique
/// among requests in flight); `row` (the data row, -1 if none) only names the sample in causes.
struct Request {
    std::uint64_t id = 0;
    std::int64_t row = -1;
    std::string data_source;
    std::string solution_str;
    std::string ground_truth = "null";
    std::string extra_info = "null";
};

struct Result {
    std::uint64_t id = 0;
    std::int64_t row = -1;
    bool ok = false;            ///< false: no reward could be computed; `cause` says why
    float score = 0.0f;         ///< finite in float32; 0 when !ok
    std::string extras = "{}";  ///< JSON object: the other keys of a returned dict
    std::string cause;          ///< one line naming the row and the problem; empty when ok
};

struct Stats {
    std::uint64_t submitted = 0, completed = 0, failed = 0;
    std::uint64_t timeouts = 0, crashes = 0, restarts = 0, retries = 0, batches = 0;
};

/// Where the rewards come from and how hard to try (the --reward-* options).
struct Options {
    std::string fn;           ///< --reward-fn FILE.py[:NAME]
    std::string url;          ///< --reward-url URL
    std::string token_file;   ///< --reward-token-file (URL only)
    double timeout_s = 30.0;  ///< --reward-timeout: per sample (pool) / per request (URL)
    int workers = 2;          ///< --reward-workers: Python processes in the pool
    int batch = 16;           ///< --reward-batch: samples per frame / per POST
    int retries = 3;          ///< --reward-retries: extra tries of a failed POST (URL)
    int concurrency = 2;      ///< POSTs in flight at once (URL)
    ErrorPolicy on_error = ErrorPolicy::kFail;
    std::string log_path;  ///< workers' stderr (tracebacks); empty: tagflow's stderr
    std::string python = "/usr/bin/python3";
    std::string worker_script;         ///< empty: $TAGFLOW_REWARD_WORKER, else the source tree's copy
    double startup_timeout_s = 120.0;  ///< a worker's import of FILE.py
};

/// True when `d` is a number a float32 reward column can hold (not NaN, no overflow to inf).
bool finite_in_float32(double d);
/// "row R" or "sample ID" for causes.
std::string name_of(const Request& r);

class Scorer {
public:
    explicit Scorer(ErrorPolicy policy) : policy_(policy) {}
    virtual ~Scorer() = default;
    Scorer(const Scorer&) = delete;
    Scorer& operator=(const Scorer&) = delete;

    /// Queues the requests; returns at once. Requests submitted after the scorer broke (its
    /// workers cannot start again) come back as failed results.
    void submit(std::vector<Request> batch);
    /// Moves the finished results into `out` (appended); returns how many. Never blocks.
    std::size_t poll(std::vector<Result>& out);
    /// Blocks until a result is ready (true) or `timeout` passes (false). Not for the hot path.
    bool wait_for(std::chrono::milliseconds timeout);
    /// Blocks until every submitted request has a result, then polls them into `out`.
    void drain(std::vector<Result>& out);
    /// Requests submitted whose results have not been polled yet.
    std::size_t pending() const;
    Stats stats() const;
    ErrorPolicy policy() const { return policy_; }
    /// Whether `r` must stop the run under this scorer's policy (a failure under `fail`).
    bool fatal(const Result& r) const { return !r.ok && policy_ == ErrorPolicy::kFail; }
    /// "python FILE:NAME (2 workers)" / "url URL" for logs.
    virtual std::string describe() const = 0;

protected:
    /// Called after submit() queued work (the pool wakes its poll loop; the URL threads a
    /// condition variable). Must not block.
    virtual void wake() = 0;
    /// Worker side: takes up to `max` queued requests (none: returns empty at once).
    std::vector<Request> take(std::size_t max);
    /// Worker side: puts requests back at the front of the queue (their worker died for another
    /// request's sake), keeping their order.
    void put_back(std::vector<Request> reqs);
    /// Worker side: blocks until work is queued or stop() was called; false on stop.
    bool wait_for_work(std::chrono::milliseconds timeout);
    std::size_t queued() const;
    /// Worker side: hands out a result; a failed one gets score 0 and is counted.
    void finish(Result r);
    /// Worker side: a failed result for `req` with `cause` (prefixed by the row's name).
    void fail(const Request& req, const std::string& cause);
    /// After this, submit() fails new requests with `cause` and every queued one is failed.
    void mark_broken(const std::string& cause);
    void count(std::uint64_t Stats::*field, std::uint64_t n = 1);
    void stop_waiters();
    bool stopping() const;

private:
    const ErrorPolicy policy_;
    mutable std::mutex mu_;
    std::condition_variable work_cv_, done_cv_;
    std::deque<Request> queue_;
    std::vector<Result> done_;
    std::size_t outstanding_ = 0;  // submitted, not yet polled
    Stats stats_;
    std::string broken_;
    bool stop_ = false;
};

/// A scorer over a C++ function (the built-in rule scorers of mpi_app/data, or a test's): one
/// thread of its own calls `fn` for each queued request, so submit() stays a queue operation.
/// `fn` returns the score and may set `extras` (a JSON object's text); an exception it throws
/// (its what() is the cause) or a score not finite in float32 fails that request alone.
/// `name` names the function in causes and describe().
using ScoreFn = std::function<double(const Request&, std::string& extras)>;
std::unique_ptr<Scorer> make_function_scorer(std::string name, ScoreFn fn, ErrorPolicy policy = ErrorPolicy::kFail);

/// The scorer the options ask for (exactly one of fn / url must be set). Starts the workers and
/// checks FILE.py's import and signature before returning; bad options throw ConfigError with
/// one line naming the option or file.
std::unique_ptr<Scorer> make_scorer(const Options& opt);

}  // namespace tagflow::reward
