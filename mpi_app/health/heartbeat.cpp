// SPDX-License-Identifier: Apache-2.0
// heartbeat: record format, peer bookkeeping and the watchdog thread (see heartbeat.hpp).
#include "health/heartbeat.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <sstream>
#include <thread>
#include <utility>

namespace tagflow::health {

namespace {
const char kMagic[] = "tagflow-heartbeat";
const int kFormat = 1;
}  // namespace

std::string format_record(const Record& r) {
    char buf[kRecordBytes];
    int n = snprintf(buf, sizeof buf, "%s %d %s %" PRId64 " %s %ld %s", kMagic, kFormat, r.run_id.c_str(), r.seq,
                     r.done ? "done" : "run", r.pid, r.host.empty() ? "?" : r.host.c_str());
    std::string s(buf, static_cast<size_t>(std::max(0, std::min(n, static_cast<int>(kRecordBytes) - 1))));
    s.resize(kRecordBytes - 1, ' ');
    s += '\n';
    return s;
}

bool parse_record(const std::string& text, Record* out) {
    if (text.size() != kRecordBytes || text.back() != '\n') return false;
    std::istringstream in(text);
    std::string magic, state;
    int format = 0;
    Record r;
    if (!(in >> magic >> format >> r.run_id >> r.seq >> state >> r.pid >> r.host)) return false;
    if (magic != kMagic || format != kFormat || r.seq < 0) return false;
    if (state != "run" && state != "done") return false;
    r.done = state == "done";
    *out = std::move(r);
    return true;
}

std::vector<int> watched_ranks(int rank, int world_size, int watch) {
    std::vector<int> v;
    int n = std::min(std::max(watch, 0), std::max(world_size - 1, 0));
    for (int i = 1; i <= n; ++i) v.push_back((rank + i) % world_size);
    return v;
}

std::string lost_message(int rank, const std::string& host, double silent_s) {
    char buf[512];
    snprintf(buf, sizeof buf, "tagflow: rank %d (host %s) stopped answering: no heartbeat for %.0f s; aborting the job",
             rank, host.empty() ? "unknown" : host.c_str(), silent_s);
    return buf;
}

// ---------------------------------------------------------------- PeerTracker

PeerTracker::PeerTracker(std::vector<int> peers, std::vector<std::string> hosts, std::string run_id, double timeout_s,
                         Clock::time_point start)
    : run_id_(std::move(run_id)), timeout_s_(timeout_s), last_tick_(start) {
    for (int p : peers) {
        Peer q;
        q.rank = p;
        if (p >= 0 && static_cast<size_t>(p) < hosts.size()) q.host = hosts[static_cast<size_t>(p)];
        q.last_change = start;
        peers_.push_back(std::move(q));
    }
}

void PeerTracker::observe(int rank, bool ok, const Record& r, Clock::time_point now) {
    if (!ok || r.run_id != run_id_) return;  // missing, torn, or from an earlier start: no news
    for (Peer& p : peers_) {
        if (p.rank != rank) continue;
        if (!r.host.empty() && r.host != "?") p.host = r.host;
        if (r.done) p.done = true;
        if (r.seq != p.seq) {
            p.seq = r.seq;
            p.last_change = now;
        }
    }
}

void PeerTracker::tick(Clock::time_point now) {
    double gap = std::chrono::duration<double>(now - last_tick_).count();
    if (gap > timeout_s_ / 2)
        for (Peer& p : peers_) p.last_change = now;  // we were suspended, not they
    last_tick_ = now;
}

bool PeerTracker::find_lost(Clock::time_point now, Lost* out) const {
    for (const Peer& p : peers_) {
        if (p.done) continue;
        double silent = std::chrono::duration<double>(now - p.last_change).count();
        if (silent > timeout_s_) {
            out->rank = p.rank;
            out->host = p.host;
            out->silent_s = silent;
            return true;
        }
    }
    return false;
}

int PeerTracker::active() const {
    int n = 0;
    for (const Peer& p : peers_) n += p.done ? 0 : 1;
    return n;
}

// ---------------------------------------------------------------- Watchdog

struct Watchdog::Impl {
    WatchdogConfig cfg;
    LostHandler on_lost;
    Record self;
    std::mutex mu;
    std::condition_variable cv;
    bool stop = false;
    bool done = false;
    bool write_warned = false;
    std::thread thread;

    std::string path(int rank) const { return cfg.dir + "/rank." + std::to_string(rank); }

    void beat() {
        {
            std::lock_guard<std::mutex> lk(mu);
            self.done = done;
        }
        ++self.seq;
        std::string rec = format_record(self);
        // O_NOFOLLOW: a link planted in the run directory is never written through.
        int fd = ::open(path(cfg.rank).c_str(), O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0640);
        bool ok = fd >= 0 && ::pwrite(fd, rec.data(), rec.size(), 0) == static_cast<ssize_t>(rec.size());
        int err = errno;
        if (fd >= 0 && ::close(fd) != 0) ok = false;
        if (!ok && !write_warned) {
            write_warned = true;
            fprintf(stderr, "[tagflow %d] warning: cannot write heartbeat %s: %s (peers may report this rank lost)\n",
                    cfg.rank, path(cfg.rank).c_str(), std::strerror(err));
            fflush(stderr);
        }
    }

    bool read(int rank, Record* r) const {
        int fd = ::open(path(rank).c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) return false;
        std::string buf(kRecordBytes, '\0');
        ssize_t n = ::pread(fd, &buf[0], buf.size(), 0);
        ::close(fd);
        return n == static_cast<ssize_t>(kRecordBytes) && parse_record(buf, r);
    }

    void run() {
        using Clock = PeerTracker::Clock;
        PeerTracker tracker(watched_ranks(cfg.rank, cfg.world_size, cfg.watch), cfg.hosts, cfg.run_id, cfg.timeout_s,
                            Clock::now());
        const std::vector<int> peers = watched_ranks(cfg.rank, cfg.world_size, cfg.watch);
        const auto period = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(cfg.interval_s));
        for (;;) {
            {
                std::unique_lock<std::mutex> lk(mu);
                if (cv.wait_for(lk, period, [&] { return stop; })) return;
            }
            Clock::time_point now = Clock::now();
            tracker.tick(now);
            beat();
            for (int p : peers) {
                Record r;
                bool ok = read(p, &r);
                tracker.observe(p, ok, r, now);
            }
            PeerTracker::Lost lost;
            if (tracker.find_lost(Clock::now(), &lost)) {
                if (on_lost) {
                    on_lost(lost);
                    return;
                }
                std::string msg = lost_message(lost.rank, lost.host, lost.silent_s) + "\n";
                // write(2), not stdio: the main thread may hold stderr's lock forever.
                ssize_t w = ::write(STDERR_FILENO, msg.data(), msg.size());
                (void)w;
                ::_exit(kLostRankExitCode);
            }
        }
    }
};

Watchdog::Watchdog(WatchdogConfig c, LostHandler on_lost) : impl_(std::make_unique<Impl>()) {
    Impl& im = *impl_;
    im.cfg = std::move(c);
    im.on_lost = std::move(on_lost);
    if (im.cfg.timeout_s <= 0) return;
    if (::mkdir(im.cfg.dir.c_str(), 0750) != 0 && errno != EEXIST)
        fprintf(stderr, "[tagflow %d] warning: cannot create heartbeat directory %s: %s\n", im.cfg.rank,
                im.cfg.dir.c_str(), std::strerror(errno));
    im.self.run_id = im.cfg.run_id;
    im.self.pid = static_cast<long>(::getpid());
    im.self.host = im.cfg.rank < static_cast<int>(im.cfg.hosts.size()) ? im.cfg.hosts[static_cast<size_t>(im.cfg.rank)]
                                                                       : std::string();
    if (im.self.host.empty()) {
        char h[256] = {0};
        if (::gethostname(h, sizeof h - 1) == 0) im.self.host = h;
    }
    // Host names with spaces would break the record's fields.
    for (char& ch : im.self.host)
        if (ch == ' ' || ch == '\n' || ch == '\t') ch = '_';
    im.beat();  // the record exists before anyone looks
    im.thread = std::thread([&im] { im.run(); });
}

Watchdog::~Watchdog() {
    if (!impl_ || !impl_->thread.joinable()) return;
    {
        std::lock_guard<std::mutex> lk(impl_->mu);
        impl_->done = true;
        impl_->stop = true;
    }
    impl_->cv.notify_all();
    impl_->thread.join();
    impl_->beat();  // leaves "done" behind for anyone still reading
}

void Watchdog::mark_done() noexcept {
    if (!impl_ || !impl_->thread.joinable()) return;
    {
        std::lock_guard<std::mutex> lk(impl_->mu);
        impl_->done = true;
    }
    // The thread writes it with its next beat (within one interval); the destructor again.
}

// ---------------------------------------------------------------- process-wide

namespace {
std::mutex g_mu;
std::unique_ptr<Watchdog> g_watchdog;
}  // namespace

void start_watchdog(WatchdogConfig c) {
    if (c.timeout_s <= 0) return;
    std::lock_guard<std::mutex> lk(g_mu);
    g_watchdog = std::make_unique<Watchdog>(std::move(c));
}

void mark_done() noexcept {
    std::lock_guard<std::mutex> lk(g_mu);
    if (g_watchdog) g_watchdog->mark_done();
}

}  // namespace tagflow::health
