// SPDX-License-Identifier: Apache-2.0
// status: the board, the per-rank writer thread and the coordinator's status.json (see status.hpp).
#include "health/status.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>

#include "common/error.hpp"
#include "common/safe_file.hpp"

namespace tagflow::health {

const char* role_name(int kind) {
    static const char* const kNames[kRoleKinds] = {"rollout", "train", "weight_sync", "resplit",
                                                   "idle",    "io",    "checkpoint"};
    if (kind < 0) return "starting";
    if (kind >= kRoleKinds) return "unknown";
    return kNames[kind];
}

// ---------------------------------------------------------------- board

struct StatusBoard::Impl {
    // The role and its time: written by the main thread only (set_role), read by the status
    // thread under a sequence lock (odd while set_role is between its stores), so a snapshot
    // never counts the open span twice or not at all.
    std::atomic<int64_t> role_seq{0};
    std::atomic<int> role{-1};
    std::atomic<int64_t> role_since_ns{0};          // steady clock, when the current role began
    std::atomic<int64_t> role_ns[kRoleKinds] = {};  // finished time per role
    std::atomic<int64_t> step{-1}, version{-1}, active{0}, waiting{0}, tokens{0}, queue{-1};
    std::atomic<int64_t> run_step{-1}, samples{0}, stale_dropped{0};
    std::atomic<double> samples_per_s{0}, staleness{0};
};

StatusBoard::Impl& StatusBoard::impl() const {
    static Impl im;
    return im;
}

namespace {
constexpr auto kRelaxed = std::memory_order_relaxed;

int64_t steady_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}
}  // namespace

void StatusBoard::set_role(int kind, int64_t step) {
    Impl& m = impl();
    m.step.store(step, kRelaxed);
    const int prev = m.role.load(kRelaxed);
    if (prev == kind) return;  // same role, next step: its time runs on
    const int64_t now = steady_ns();
    const int64_t seq = m.role_seq.load(kRelaxed);
    m.role_seq.store(seq + 1, kRelaxed);
    std::atomic_thread_fence(std::memory_order_release);
    if (prev >= 0 && prev < kRoleKinds)
        m.role_ns[prev].store(m.role_ns[prev].load(kRelaxed) + (now - m.role_since_ns.load(kRelaxed)), kRelaxed);
    m.role_since_ns.store(now, kRelaxed);
    m.role.store(kind, kRelaxed);
    m.role_seq.store(seq + 2, std::memory_order_release);
}

void StatusBoard::set_engine(int64_t active, int64_t waiting, int64_t tokens_generated, int64_t policy_version) {
    Impl& m = impl();
    m.active.store(active, kRelaxed);
    m.waiting.store(waiting, kRelaxed);
    m.tokens.store(tokens_generated, kRelaxed);
    m.version.store(policy_version, kRelaxed);
}

void StatusBoard::set_queue(int64_t pooled) { impl().queue.store(pooled, kRelaxed); }

void StatusBoard::step_done(int64_t steps_done, int64_t samples_total, double samples_per_s, double staleness_mean,
                            int64_t stale_dropped_total) {
    Impl& m = impl();
    m.samples.store(samples_total, kRelaxed);
    m.samples_per_s.store(samples_per_s, kRelaxed);
    m.staleness.store(staleness_mean, kRelaxed);
    m.stale_dropped.store(stale_dropped_total, kRelaxed);
    m.run_step.store(steps_done, kRelaxed);
}

StatusSnapshot StatusBoard::snapshot() const {
    const Impl& m = impl();
    StatusSnapshot s;
    for (;;) {  // the sequence lock of set_role: retry while a switch is half written
        const int64_t seq = m.role_seq.load(std::memory_order_acquire);
        if (seq & 1) continue;
        const int64_t now = steady_ns();
        s.role = m.role.load(kRelaxed);
        const int64_t since = m.role_since_ns.load(kRelaxed);
        for (int k = 0; k < kRoleKinds; ++k) s.role_s[k] = 1e-9 * static_cast<double>(m.role_ns[k].load(kRelaxed));
        std::atomic_thread_fence(std::memory_order_acquire);
        if (m.role_seq.load(kRelaxed) != seq) continue;
        if (s.role >= 0 && s.role < kRoleKinds)
            s.role_s[s.role] += 1e-9 * static_cast<double>(std::max<int64_t>(0, now - since));
        break;
    }
    s.step = m.step.load(kRelaxed);
    s.policy_version = m.version.load(kRelaxed);
    s.engine_active = m.active.load(kRelaxed);
    s.engine_waiting = m.waiting.load(kRelaxed);
    s.tokens_generated = m.tokens.load(kRelaxed);
    s.queue = m.queue.load(kRelaxed);
    s.run_step = m.run_step.load(kRelaxed);
    s.samples = m.samples.load(kRelaxed);
    s.stale_dropped = m.stale_dropped.load(kRelaxed);
    s.samples_per_s = m.samples_per_s.load(kRelaxed);
    s.staleness_mean = m.staleness.load(kRelaxed);
    return s;
}

StatusBoard& status_board() {
    static StatusBoard b;
    return b;
}

// ---------------------------------------------------------------- records

namespace {
std::string at(const std::vector<std::string>& v, int i) {
    return i >= 0 && static_cast<size_t>(i) < v.size() ? v[static_cast<size_t>(i)] : std::string();
}

double wall_now() {
    timespec ts{};
    clock_gettime(CLOCK_REALTIME, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// A small regular file, not through a link; "" when missing, unreadable or too big.
bool read_small(const std::string& path, size_t cap, std::string* out) {
    int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return false;
    struct stat st {};
    bool ok = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && static_cast<size_t>(st.st_size) <= cap;
    if (ok) {
        out->assign(static_cast<size_t>(st.st_size), '\0');
        ok = ::pread(fd, &(*out)[0], out->size(), 0) == static_cast<ssize_t>(out->size());
    }
    ::close(fd);
    return ok;
}
}  // namespace

nlohmann::json rank_record(const StatusConfig& c, int64_t seq, double unix_now, bool done, const StatusSnapshot& s,
                           double tokens_per_s) {
    nlohmann::json j;
    j["format"] = kRankStatusFormat;
    j["version"] = kStatusVersion;
    j["run_id"] = c.run_id;
    j["rank"] = c.rank;
    j["host"] = at(c.hosts, c.rank);
    j["tags"] = at(c.tags, c.rank);
    j["seq"] = seq;
    j["unix"] = unix_now;
    j["done"] = done;
    j["role"] = done ? "done" : role_name(s.role);
    j["step"] = s.step;
    nlohmann::json roles = nlohmann::json::object();
    for (int k = 0; k < kRoleKinds; ++k) roles[role_name(k)] = s.role_s[k];
    j["role_s"] = std::move(roles);
    j["policy_version"] = s.policy_version;
    j["engine_slots"] = s.engine_active;
    j["engine_waiting"] = s.engine_waiting;
    j["tokens_per_s"] = tokens_per_s;
    j["tokens_generated"] = s.tokens_generated;
    j["queue"] = s.queue;
    return j;
}

// ---------------------------------------------------------------- writer thread

namespace {

struct Writer {
    using Clock = std::chrono::steady_clock;
    StatusConfig cfg;
    std::mutex mu;
    std::condition_variable cv;
    bool stop = false;
    bool finished = false;  // status_done(): the last records say done
    bool warned = false;
    int64_t seq = 0;
    std::thread thread;
    Clock::time_point start = Clock::now();
    // per-rank tokens/s
    int64_t prev_tokens = 0;
    Clock::time_point prev_t = Clock::now();
    // the coordinator's view of every rank: seq and when it last changed (its own clock)
    struct Peer {
        int64_t seq = -1;
        Clock::time_point changed;
        nlohmann::json rec;
        bool done = false;
    };
    std::vector<Peer> peers;
    int64_t start_step = -1;  // the first step this start saw done (rate and ETA)
    Clock::time_point start_step_t;

    std::string dir() const { return cfg.out + "/.status"; }
    std::string rank_path(int r) const { return dir() + "/rank." + std::to_string(r) + ".json"; }

    void put(const std::string& path, const std::string& text) {
        try {
            write_file_replace(path, text, 0644);
        } catch (const std::exception& e) {
            if (!warned) {
                warned = true;
                fprintf(stderr, "[tagflow %d] warning: status record not written (%s); training goes on\n", cfg.rank,
                        e.what());
                fflush(stderr);
            }
        }
    }

    void beat(bool done) {
        const Clock::time_point now = Clock::now();
        StatusSnapshot s = status_board().snapshot();
        const double dt = std::chrono::duration<double>(now - prev_t).count();
        const double tps = dt > 0 ? static_cast<double>(s.tokens_generated - prev_tokens) / dt : 0.0;
        prev_tokens = s.tokens_generated;
        prev_t = now;
        put(rank_path(cfg.rank), rank_record(cfg, ++seq, wall_now(), done, s, tps).dump() + "\n");
        if (cfg.rank == cfg.coordinator) aggregate(s, done);
    }

    void aggregate(const StatusSnapshot& own, bool done) {
        const Clock::time_point now = Clock::now();
        nlohmann::json ranks = nlohmann::json::array();
        for (int r = 0; r < cfg.world_size; ++r) {
            Peer& p = peers[static_cast<size_t>(r)];
            std::string text;
            nlohmann::json rec;
            if (read_small(rank_path(r), 1 << 16, &text)) {
                rec = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
                if (!rec.is_object() || rec.value("format", "") != kRankStatusFormat ||
                    rec.value("run_id", "") != cfg.run_id || !rec.contains("seq") || !rec["seq"].is_number_integer())
                    rec = nlohmann::json();  // torn, foreign or an earlier start's: no news
            }
            if (rec.is_object()) {
                const int64_t sq = rec["seq"].get<int64_t>();
                if (sq != p.seq) {
                    p.seq = sq;
                    p.changed = now;
                }
                p.rec = rec;
                p.done = rec.value("done", false);
            }
            nlohmann::json out =
                p.rec.is_object()
                    ? p.rec
                    : nlohmann::json{
                          {"rank", r}, {"host", at(cfg.hosts, r)}, {"tags", at(cfg.tags, r)}, {"role", "unknown"}};
            out.erase("format");
            out.erase("version");
            out.erase("run_id");
            const double age = std::chrono::duration<double>(now - p.changed).count();
            out["age_s"] = age;
            out["missing"] = !p.rec.is_object();
            out["stale"] = !p.done && age > cfg.stale_after_s;
            ranks.push_back(std::move(out));
        }
        nlohmann::json run;
        const int64_t step = std::max<int64_t>(own.run_step, 0);
        if (own.run_step >= 0 && start_step < 0) {
            start_step = own.run_step;
            start_step_t = now;
        }
        run["step"] = step;
        run["steps"] = cfg.steps;
        run["samples"] = own.samples;
        run["samples_per_s"] = own.samples_per_s;
        run["staleness_mean"] = own.staleness_mean;
        run["stale_dropped"] = own.stale_dropped;
        run["queue"] = own.queue;
        run["elapsed_s"] = std::chrono::duration<double>(now - start).count();
        double eta = -1;  // unknown until two steps have been seen
        if (start_step >= 0 && own.run_step > start_step) {
            const double per = std::chrono::duration<double>(now - start_step_t).count() /
                               static_cast<double>(own.run_step - start_step);
            eta = per * static_cast<double>(std::max<int64_t>(0, cfg.steps - own.run_step));
        }
        run["eta_s"] = done ? 0.0 : eta;
        run["done"] = done;
        nlohmann::json j;
        j["format"] = kStatusFormat;
        j["version"] = kStatusVersion;
        j["run_id"] = cfg.run_id;
        j["mode"] = cfg.mode;
        j["world_size"] = cfg.world_size;
        j["coordinator"] = cfg.coordinator;
        j["updated_unix"] = wall_now();
        j["refresh_s"] = cfg.interval_s;
        j["stale_after_s"] = cfg.stale_after_s;
        j["run"] = std::move(run);
        j["ranks"] = std::move(ranks);
        put(cfg.out + "/status.json", j.dump(1) + "\n");
    }

    void loop() {
        const auto period = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(cfg.interval_s));
        for (;;) {
            {
                std::unique_lock<std::mutex> lk(mu);
                if (cv.wait_for(lk, period, [&] { return stop; })) break;
            }
            beat(false);
        }
        if (finished) beat(true);
    }

    ~Writer() {  // process exit without status_done(): stop quietly, the records are left as they were
        {
            std::lock_guard<std::mutex> lk(mu);
            stop = true;
        }
        cv.notify_all();
        if (thread.joinable()) thread.join();
    }
};

std::mutex g_mu;
std::unique_ptr<Writer> g_writer;

}  // namespace

void start_status_writer(StatusConfig c) {
    if (c.interval_s <= 0) return;
    std::lock_guard<std::mutex> lk(g_mu);
    if (g_writer) return;
    auto w = std::make_unique<Writer>();
    w->cfg = std::move(c);
    w->peers.resize(static_cast<size_t>(std::max(w->cfg.world_size, 0)));
    for (auto& p : w->peers) p.changed = Writer::Clock::now();
    if (::mkdir(w->dir().c_str(), 0755) != 0 && errno != EEXIST)
        fprintf(stderr, "[tagflow %d] warning: cannot create %s: %s (no live status)\n", w->cfg.rank, w->dir().c_str(),
                std::strerror(errno));
    w->beat(false);  // the record exists from the start
    Writer* raw = w.get();
    w->thread = std::thread([raw] { raw->loop(); });
    g_writer = std::move(w);
}

void status_done() noexcept {
    std::lock_guard<std::mutex> lk(g_mu);
    if (!g_writer) return;
    {
        std::lock_guard<std::mutex> l2(g_writer->mu);
        g_writer->stop = true;
        g_writer->finished = true;
    }
    g_writer->cv.notify_all();
    if (g_writer->thread.joinable()) g_writer->thread.join();
}

}  // namespace tagflow::health
