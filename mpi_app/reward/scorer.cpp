// SPDX-License-Identifier: Apache-2.0
// scorer: the queue, the result hand-out and the counters every Scorer shares, and
// make_scorer() choosing between the Python pool and the URL client. See scorer.hpp.
#include "reward/scorer.hpp"

#include <cmath>
#include <cstdio>
#include <thread>
#include <limits>
#include <utility>

#include "common/error.hpp"
#include "reward/python_pool.hpp"
#include "reward/url_scorer.hpp"

namespace tagflow::reward {

ErrorPolicy parse_error_policy(const std::string& s) {
    if (s == "fail") return ErrorPolicy::kFail;
    if (s == "zero") return ErrorPolicy::kZero;
    throw ConfigError("--reward-error '" + s + "': expected fail or zero");
}

const char* to_string(ErrorPolicy p) { return p == ErrorPolicy::kFail ? "fail" : "zero"; }

bool finite_in_float32(double d) { return std::isfinite(d) && std::isfinite(static_cast<float>(d)); }

std::string name_of(const Request& r) {
    return r.row >= 0 ? "row " + std::to_string(r.row) : "sample " + std::to_string(r.id);
}

void Scorer::submit(std::vector<Request> batch) {
    if (batch.empty()) return;
    {
        std::lock_guard<std::mutex> lk(mu_);
        stats_.submitted += batch.size();
        outstanding_ += batch.size();
        if (!broken_.empty()) {
            for (const Request& r : batch) {
                Result res;
                res.id = r.id;
                res.row = r.row;
                res.cause = name_of(r) + ": " + broken_;
                ++stats_.completed;
                ++stats_.failed;
                done_.push_back(std::move(res));
            }
            done_cv_.notify_all();
            return;
        }
        for (Request& r : batch) queue_.push_back(std::move(r));
    }
    work_cv_.notify_all();
    wake();
}

std::size_t Scorer::poll(std::vector<Result>& out) {
    std::lock_guard<std::mutex> lk(mu_);
    const std::size_t n = done_.size();
    for (Result& r : done_) out.push_back(std::move(r));
    done_.clear();
    outstanding_ -= n;
    return n;
}

bool Scorer::wait_for(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lk(mu_);
    return done_cv_.wait_for(lk, timeout, [&] { return !done_.empty(); });
}

void Scorer::drain(std::vector<Result>& out) {
    for (;;) {
        {
            std::unique_lock<std::mutex> lk(mu_);
            done_cv_.wait(lk, [&] { return done_.size() >= outstanding_; });
        }
        poll(out);
        std::lock_guard<std::mutex> lk(mu_);
        if (outstanding_ == 0) return;
    }
}

std::size_t Scorer::pending() const {
    std::lock_guard<std::mutex> lk(mu_);
    return outstanding_;
}

Stats Scorer::stats() const {
    std::lock_guard<std::mutex> lk(mu_);
    return stats_;
}

std::vector<Request> Scorer::take(std::size_t max) {
    std::vector<Request> out;
    std::lock_guard<std::mutex> lk(mu_);
    while (!queue_.empty() && out.size() < max) {
        out.push_back(std::move(queue_.front()));
        queue_.pop_front();
    }
    return out;
}

void Scorer::put_back(std::vector<Request> reqs) {
    {
        std::lock_guard<std::mutex> lk(mu_);
        for (auto it = reqs.rbegin(); it != reqs.rend(); ++it) queue_.push_front(std::move(*it));
    }
    work_cv_.notify_all();
}

bool Scorer::wait_for_work(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lk(mu_);
    work_cv_.wait_for(lk, timeout, [&] { return stop_ || !queue_.empty(); });
    return !stop_;
}

std::size_t Scorer::queued() const {
    std::lock_guard<std::mutex> lk(mu_);
    return queue_.size();
}

void Scorer::finish(Result r) {
    if (!r.ok) r.score = 0.0f;
    {
        std::lock_guard<std::mutex> lk(mu_);
        ++stats_.completed;
        if (!r.ok) ++stats_.failed;
        done_.push_back(std::move(r));
    }
    done_cv_.notify_all();
}

void Scorer::fail(const Request& req, const std::string& cause) {
    Result r;
    r.id = req.id;
    r.row = req.row;
    r.cause = name_of(req) + ": " + cause;
    finish(std::move(r));
}

void Scorer::mark_broken(const std::string& cause) {
    std::deque<Request> q;
    {
        std::lock_guard<std::mutex> lk(mu_);
        broken_ = cause;
        q.swap(queue_);
    }
    for (const Request& r : q) fail(r, cause);
}

void Scorer::count(std::uint64_t Stats::*field, std::uint64_t n) {
    std::lock_guard<std::mutex> lk(mu_);
    stats_.*field += n;
}

void Scorer::stop_waiters() {
    {
        std::lock_guard<std::mutex> lk(mu_);
        stop_ = true;
    }
    work_cv_.notify_all();
}

bool Scorer::stopping() const {
    std::lock_guard<std::mutex> lk(mu_);
    return stop_;
}

namespace {

class FunctionScorer final : public Scorer {
public:
    FunctionScorer(std::string name, ScoreFn fn, ErrorPolicy policy)
        : Scorer(policy), name_(std::move(name)), fn_(std::move(fn)), thread_([this] { run(); }) {}
    ~FunctionScorer() override {
        stop_waiters();
        thread_.join();
    }
    std::string describe() const override { return "builtin " + name_; }

private:
    void wake() override {}
    void run() {
        while (wait_for_work(std::chrono::milliseconds(500))) {
            for (Request& req : take(64)) {
                Result r;
                r.id = req.id;
                r.row = req.row;
                std::string extras = "{}";
                try {
                    const double d = fn_(req, extras);
                    if (!finite_in_float32(d)) {
                        char buf[64];
                        std::snprintf(buf, sizeof buf, "%g", d);
                        fail(req, name_ + " returned " + buf + ", not finite in float32");
                        continue;
                    }
                    r.ok = true;
                    r.score = static_cast<float>(d);
                    r.extras = std::move(extras);
                } catch (const std::exception& e) {
                    fail(req, name_ + ": " + e.what());
                    continue;
                }
                finish(std::move(r));
            }
        }
    }

    std::string name_;
    ScoreFn fn_;
    std::thread thread_;
};

}  // namespace

std::unique_ptr<Scorer> make_function_scorer(std::string name, ScoreFn fn, ErrorPolicy policy) {
    return std::make_unique<FunctionScorer>(std::move(name), std::move(fn), policy);
}

std::unique_ptr<Scorer> make_scorer(const Options& opt) {
    if (opt.fn.empty() == opt.url.empty())
        throw ConfigError(opt.fn.empty() ? "no reward: give --reward-fn FILE.py[:NAME] or --reward-url URL"
                                         : "--reward-fn and --reward-url: give one of them, not both");
    if (!(opt.timeout_s > 0.0) || opt.timeout_s > 86400.0)
        throw ConfigError("--reward-timeout " + std::to_string(opt.timeout_s) + ": expected seconds in (0, 86400]");
    if (opt.batch < 1 || opt.batch > 65536)
        throw ConfigError("--reward-batch " + std::to_string(opt.batch) + ": expected 1..65536");
    if (!opt.fn.empty()) {
        if (opt.workers < 1 || opt.workers > 256)
            throw ConfigError("--reward-workers " + std::to_string(opt.workers) + ": expected 1..256");
        if (!opt.token_file.empty()) throw ConfigError("--reward-token-file: only with --reward-url");
        return std::make_unique<PythonPool>(opt);
    }
    if (opt.retries < 0 || opt.retries > 100)
        throw ConfigError("--reward-retries " + std::to_string(opt.retries) + ": expected 0..100");
    if (opt.concurrency < 1 || opt.concurrency > 64)
        throw ConfigError("--reward-concurrency " + std::to_string(opt.concurrency) + ": expected 1..64");
    return std::make_unique<UrlScorer>(opt);
}

}  // namespace tagflow::reward
