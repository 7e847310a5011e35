// SPDX-License-Identifier: Apache-2.0
// on_demand: the rank side of on-demand profiling (see on_demand.hpp): the request file's
// format, the per-step look at it, and the start / stop / write of a profile. Every failure
// here is caught and logged in one line: training never stops for a profile.
#include "profile/on_demand.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/error.hpp"
#include "common/log.hpp"
#include "common/safe_file.hpp"
#include "profile/timeline.hpp"
#include "profile/torch_profiler.hpp"

namespace tagflow::profile {

namespace detail {
std::atomic<int64_t> g_seen_step{-1};
}  // namespace detail

namespace {

constexpr size_t kMaxRequestBytes = 64 * 1024;

bool valid_id(const std::string& id) {
    if (id.empty() || id.size() > 64) return false;
    return std::all_of(id.begin(), id.end(), [](char c) {
        return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == '-';
    });
}

struct State {
    bool armed = false;
    OnDemandConfig cfg;
    std::thread::id thread;
    // the request file as last seen (a change of any of these means: read it again)
    bool seen_file = false;
    dev_t dev = 0;
    ino_t ino = 0;
    int64_t mtime_ns = 0;
    off_t size = 0;
    std::string last_id;  // the last request read (handled or not for this rank)
    // a profile in progress
    bool active = false;
    ProfileRequest req;
    int64_t first = 0, last = 0;
};

State& state() {
    static State s;
    return s;
}

std::string dir_of_profiles(const State& s) { return s.cfg.out + "/" + kProfilesDir; }

/// RUN_DIR/profiles, made if missing; throws Error if it is not a directory (a planted link).
std::string ensure_profiles_dir(const State& s) {
    const std::string d = dir_of_profiles(s);
    if (::mkdir(d.c_str(), 0755) != 0 && errno != EEXIST) throw Error(d + ": " + std::strerror(errno));
    struct stat st {};
    if (::lstat(d.c_str(), &st) != 0) throw Error(d + ": " + std::strerror(errno));
    if (!S_ISDIR(st.st_mode)) throw Error(d + ": not a directory (a link or file is in the way)");
    return d;
}

void write_result(const State& s, const std::string& status, const std::string& reason, const std::string& trace,
                  int64_t events) {
    nlohmann::json j;
    j["format"] = kProfileResultFormat;
    j["version"] = kProfileVersion;
    j["id"] = s.req.id;
    j["rank"] = s.cfg.rank;
    j["status"] = status;
    j["reason"] = reason;
    j["trace"] = trace;
    j["first_step"] = s.first;
    j["last_step"] = s.last;
    j["steps_asked"] = s.req.steps;
    j["events"] = events;
    try {
        const std::string d = ensure_profiles_dir(s);
        write_file_replace(d + "/" + result_file_name(s.req.id, s.cfg.rank), j.dump() + "\n");
    } catch (const std::exception& e) {
        log_warn("profile: rank %d: the result record was not written: %s", s.cfg.rank, e.what());
    }
}

void fail(State& s, const std::string& why) {
    log_warn("profile: rank %d: request %s failed: %s (training goes on)", s.cfg.rank, s.req.id.c_str(), why.c_str());
    write_result(s, "failed", why, "", 0);
}

void stop(State& s, const std::string& note) {
    s.active = false;
    TraceHeader h;
    h.rank = s.cfg.rank;
    h.id = s.req.id;
    h.first_step = s.first;
    h.last_step = s.last;
    h.t0_unix = s.cfg.t0_unix;
    h.clock_skew_s = clock_skew();
    const std::string name = trace_file_name(s.cfg.rank, s.first, s.last);
    try {
        const std::string d = ensure_profiles_dir(s);
        const int64_t n = torch_profile_stop_and_write(d + "/" + name, h);
        write_result(s, "done", note, name, n);
        log_info("profile: rank %d: steps %lld-%lld, %lld events -> %s/%s", s.cfg.rank, static_cast<long long>(s.first),
                 static_cast<long long>(s.last), static_cast<long long>(n), d.c_str(), name.c_str());
    } catch (const std::exception& e) {
        torch_profile_abort();
        fail(s, e.what());
    }
}

/// Reads the request file if it changed since the last look; returns true with `out` filled
/// when it holds a request this rank has not seen yet.
bool new_request(State& s, ProfileRequest& out) {
    const std::string path = s.cfg.out + "/" + kProfileRequestFile;
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) return false;  // no request: the common case, one syscall
    const int64_t mt = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
    if (s.seen_file && st.st_dev == s.dev && st.st_ino == s.ino && mt == s.mtime_ns && st.st_size == s.size)
        return false;
    s.seen_file = true;
    s.dev = st.st_dev, s.ino = st.st_ino, s.mtime_ns = mt, s.size = st.st_size;
    try {
        if (!S_ISREG(st.st_mode)) throw Error(path + ": not a regular file (a link or something else)");
        if (static_cast<size_t>(st.st_size) > kMaxRequestBytes)
            throw Error(path + ": " + std::to_string(st.st_size) + " bytes, not a profile request");
        const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
        if (fd < 0) throw Error(path + ": " + std::strerror(errno));
        std::string text(kMaxRequestBytes + 1, '\0');
        const ssize_t n = ::pread(fd, &text[0], text.size(), 0);
        const int err = errno;
        ::close(fd);
        if (n < 0) throw Error(path + ": " + std::strerror(err));
        text.resize(static_cast<size_t>(n));
        ProfileRequest r = parse_profile_request(text, path);
        if (r.id == s.last_id) return false;
        s.last_id = r.id;
        if (!std::binary_search(r.ranks.begin(), r.ranks.end(), s.cfg.rank)) return false;
        out = std::move(r);
        return true;
    } catch (const std::exception& e) {
        log_warn("profile: rank %d: %s (ignored; training goes on)", s.cfg.rank, e.what());
        return false;
    }
}

}  // namespace

std::string result_file_name(const std::string& id, int rank) { return id + ".rank." + std::to_string(rank) + ".json"; }

std::string trace_file_name(int rank, int64_t first, int64_t last) {
    return "rank." + std::to_string(rank) + ".step." + std::to_string(first) + "-" + std::to_string(last) + ".json";
}

std::string request_to_json(const ProfileRequest& r) {
    nlohmann::json j;
    j["format"] = kProfileRequestFormat;
    j["version"] = kProfileVersion;
    j["id"] = r.id;
    j["ranks"] = r.ranks;
    j["steps"] = r.steps;
    j["record_shapes"] = r.record_shapes;
    j["profile_memory"] = r.profile_memory;
    j["t_unix"] = r.t_unix;
    return j.dump() + "\n";
}

ProfileRequest parse_profile_request(const std::string& text, const std::string& path) {
    const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) throw Error(path + ": not a profile request (not a JSON object)");
    if (!j.contains("format") || !j["format"].is_string() || j["format"].get<std::string>() != kProfileRequestFormat)
        throw Error(path + ": not a profile request (no \"format\": \"" + kProfileRequestFormat + "\")");
    if (!j.contains("version") || !j["version"].is_number_integer() || j["version"].get<int64_t>() != kProfileVersion)
        throw Error(path + ": profile request version " + (j.contains("version") ? j["version"].dump() : "missing") +
                    ", this tagflow reads " + std::to_string(kProfileVersion));
    ProfileRequest r;
    if (!j.contains("id") || !j["id"].is_string() || !valid_id(j["id"].get<std::string>()))
        throw Error(path + ": \"id\" missing or not 1-64 characters of [0-9A-Za-z_-]");
    r.id = j["id"].get<std::string>();
    if (!j.contains("steps") || !j["steps"].is_number_integer() || j["steps"].get<int64_t>() < 1 ||
        j["steps"].get<int64_t>() > kProfileMaxSteps)
        throw Error(path + ": \"steps\" missing or not an integer in [1, " + std::to_string(kProfileMaxSteps) + "]");
    r.steps = j["steps"].get<int64_t>();
    if (!j.contains("ranks") || !j["ranks"].is_array() || j["ranks"].empty() || j["ranks"].size() > 1000000)
        throw Error(path + ": \"ranks\" missing or not a non-empty list of ranks");
    for (const auto& v : j["ranks"]) {
        if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > 1000000000)
            throw Error(path + ": \"ranks\" holds " + v.dump() + ", not a rank");
        r.ranks.push_back(static_cast<int>(v.get<int64_t>()));
    }
    std::sort(r.ranks.begin(), r.ranks.end());
    r.ranks.erase(std::unique(r.ranks.begin(), r.ranks.end()), r.ranks.end());
    for (const char* k : {"record_shapes", "profile_memory"})
        if (j.contains(k) && !j[k].is_boolean()) throw Error(path + ": \"" + k + "\" is not true or false");
    r.record_shapes = j.value("record_shapes", true);
    r.profile_memory = j.value("profile_memory", false);
    if (j.contains("t_unix") && j["t_unix"].is_number()) r.t_unix = j["t_unix"].get<double>();
    return r;
}

void init_on_demand_profiling(const OnDemandConfig& c) {
    State& s = state();
    s.cfg = c;
    s.thread = std::this_thread::get_id();
    // A request already in place (an earlier start's) is not this run's: note it as seen.
    const std::string path = c.out + "/" + kProfileRequestFile;
    struct stat st {};
    if (::lstat(path.c_str(), &st) == 0) {
        s.seen_file = true;
        s.dev = st.st_dev, s.ino = st.st_ino, s.size = st.st_size;
        s.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
    }
    s.armed = true;
}

void finish_on_demand_profiling() noexcept {
    State& s = state();
    if (!s.armed || !s.active || std::this_thread::get_id() != s.thread) return;
    try {
        stop(s, "the run ended after " + std::to_string(s.last - s.first + 1) + " of " + std::to_string(s.req.steps) +
                    " steps");
    } catch (...) {}
    s.armed = false;
}

namespace detail {

void step_boundary(int64_t step) {
    State& s = state();
    if (!s.armed) {
        g_seen_step.store(step, std::memory_order_relaxed);
        return;
    }
    if (std::this_thread::get_id() != s.thread) return;  // only the profiled (main) thread moves the step
    const int64_t prev = g_seen_step.load(std::memory_order_relaxed);
    g_seen_step.store(step, std::memory_order_relaxed);
    try {
        if (s.active) {
            if (step < s.first + s.req.steps) {
                s.last = step;
                return;
            }
            s.last = std::max(s.first, prev);
            stop(s, "");
        }
        ProfileRequest r;
        if (!new_request(s, r)) return;
        s.req = std::move(r);
        s.first = s.last = step;
        try {
            torch_profile_start(s.req.record_shapes, s.req.profile_memory);
        } catch (const std::exception& e) {
            fail(s, e.what());
            return;
        }
        s.active = true;
        log_info("profile: rank %d: recording steps %lld-%lld (request %s)", s.cfg.rank, static_cast<long long>(step),
                 static_cast<long long>(step + s.req.steps - 1), s.req.id.c_str());
    } catch (const std::exception& e) {  // nothing may reach the training loop
        log_warn("profile: rank %d: %s (training goes on)", s.cfg.rank, e.what());
    }
}

}  // namespace detail

}  // namespace tagflow::profile
