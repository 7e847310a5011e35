// SPDX-License-Identifier: Apache-2.0
// profile_command: `tagflow profile RUN_DIR --ranks LIST --steps N [--timeout S] [--no-wait]
// [--no-shapes] [--memory]` — asks ranks of a running `tagflow train --out RUN_DIR` to record
// their next N steps with LibTorch's profiler (on_demand.hpp), then waits for each asked rank's
// result record and reports it, naming the ranks that did not deliver. Checks the run directory
// through its live status record (health/status.hpp: a running tagflow job, its world size).
// Writes only RUN_DIR/profile.request (replaced atomically, never through a link). Does not
// contact the job (no MPI, no sockets) and does not write any profile itself.
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/error.hpp"
#include "common/log.hpp"
#include "common/safe_file.hpp"
#include "health/status.hpp"
#include "profile/on_demand.hpp"
#include "profile/profile_request.hpp"

namespace tagflow::profile {
namespace {

const char kHelp[] =
    "usage: tagflow profile RUN_DIR --ranks LIST --steps N [--timeout S] [--no-wait] [--no-shapes] [--memory]\n"
    "\n"
    "Asks ranks of a running `tagflow train --out RUN_DIR` to record their next N steps with LibTorch's\n"
    "profiler (operator times and input shapes; CUDA kernels where the build has CUDA). Each asked rank\n"
    "starts at its next step boundary and writes RUN_DIR/profiles/rank.R.step.S-T.json (Chrome trace\n"
    "JSON; `tagflow trace RUN_DIR/tagflow.h5` merges it with the run's timeline) and a result record.\n"
    "Profiling never stops the training: a rank that cannot profile says why in its record and log.\n"
    "\n"
    "  --ranks LIST   world ranks: 0,2,5-7 or all\n"
    "  --steps N      steps to record, 1..1000\n"
    "  --timeout S    seconds to wait for the ranks' results (default 300)\n"
    "  --no-wait      write the request and exit\n"
    "  --no-shapes    do not record operator input shapes (smaller traces)\n"
    "  --memory       record allocations too\n"
    "\n"
    "exit status: 0 every asked rank delivered its trace; 1 a rank failed or did not deliver within\n"
    "--timeout (named); 2 bad usage, or RUN_DIR is not the directory of a running tagflow train job.\n";

double wall_now() {
    timespec ts{};
    clock_gettime(CLOCK_REALTIME, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

int64_t parse_int(const std::string& s, const std::string& what) {
    if (s.empty() || s.size() > 9 || s.find_first_not_of("0123456789") != std::string::npos)
        throw ConfigError("profile: " + what + ": '" + s + "' is not a non-negative integer");
    return std::stoll(s);
}

/// "0,2,5-7" or "all" -> ranks ascending, each checked against world_size.
std::vector<int> parse_ranks(const std::string& list, int world_size) {
    std::vector<int> out;
    if (list == "all") {
        for (int r = 0; r < world_size; ++r) out.push_back(r);
        return out;
    }
    std::vector<bool> have(static_cast<size_t>(world_size), false);
    size_t b = 0;
    while (b <= list.size()) {
        size_t e = list.find(',', b);
        if (e == std::string::npos) e = list.size();
        const std::string item = list.substr(b, e - b);
        const size_t dash = item.find('-');
        const int64_t lo = parse_int(item.substr(0, dash), "--ranks " + list);
        const int64_t hi = dash == std::string::npos ? lo : parse_int(item.substr(dash + 1), "--ranks " + list);
        if (hi < lo) throw ConfigError("profile: --ranks " + list + ": range " + item + " is empty");
        if (hi >= world_size)
            throw ConfigError("profile: --ranks " + list + ": rank " + std::to_string(hi) +
                              " is out of range (the job has " + std::to_string(world_size) + " ranks: 0-" +
                              std::to_string(world_size - 1) + ")");
        for (int64_t r = lo; r <= hi; ++r) have[static_cast<size_t>(r)] = true;
        b = e + 1;
    }
    for (int r = 0; r < world_size; ++r)
        if (have[static_cast<size_t>(r)]) out.push_back(r);
    return out;
}

std::string new_id() {
    std::random_device rd;
    char b[40];
    std::snprintf(b, sizeof b, "p%08x%08x", rd(), rd());
    return b;
}

/// A result record, or an empty object while there is none (or it is not readable yet).
nlohmann::json read_result(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return nlohmann::json::object();
    struct stat st {};
    std::string text;
    if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size <= 65536) {
        text.resize(static_cast<size_t>(st.st_size));
        const ssize_t n = ::pread(fd, &text[0], text.size(), 0);
        text.resize(n > 0 ? static_cast<size_t>(n) : 0);
    }
    ::close(fd);
    nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object() || j.value("format", "") != kProfileResultFormat)
        return nlohmann::json::object();
    return j;
}

}  // namespace

ProfileRequest submit_profile_request(const std::string& dir, const std::string& ranks, int64_t steps,
                                      bool record_shapes, bool profile_memory) {
    if (ranks.empty()) throw ConfigError("profile: --ranks is empty (e.g. --ranks 0,1 or --ranks all)");
    if (steps < 1 || steps > kProfileMaxSteps)
        throw ConfigError("profile: --steps " + std::to_string(steps) + " is not in [1, " +
                          std::to_string(kProfileMaxSteps) + "]");
    // The run directory of a running job: its live status record (one line, exit 2, otherwise).
    const nlohmann::json st = health::load_status_record(dir);
    if (!st.contains("world_size") || !st["world_size"].is_number_integer() || st["world_size"].get<int64_t>() < 1 ||
        st["world_size"].get<int64_t>() > 1000000)
        throw ConfigError(dir + "/status.json: malformed status record (world_size missing or not a rank count)");
    if (st["run"]["done"].get<bool>())
        throw ConfigError(dir + ": the run has finished (status.json says done): nothing left to profile");
    ProfileRequest req;
    req.ranks = parse_ranks(ranks, static_cast<int>(st["world_size"].get<int64_t>()));
    req.steps = steps;
    req.record_shapes = record_shapes;
    req.profile_memory = profile_memory;
    req.id = new_id();
    req.t_unix = wall_now();
    const std::string profiles = dir + "/" + kProfilesDir;
    struct stat ps {};
    if (::lstat(profiles.c_str(), &ps) == 0 && !S_ISDIR(ps.st_mode))
        throw ConfigError(profiles +
                          ": not a directory (a link or file is in the way; the ranks could not write there)");
    try {
        write_file_replace(dir + "/" + kProfileRequestFile, request_to_json(req));
    } catch (const Error& e) {
        throw ConfigError(std::string("profile: cannot write the request: ") + e.what());
    }
    return req;
}

std::vector<ProfileResult> read_profile_results(const std::string& dir, const std::string& id,
                                                const std::vector<int>& ranks) {
    std::vector<ProfileResult> out;
    for (int r : ranks) {
        ProfileResult pr;
        pr.rank = r;
        const nlohmann::json j = read_result(dir + "/" + kProfilesDir + "/" + result_file_name(id, r));
        if (!j.empty()) {
            pr.status = j.value("status", "") == "done" ? "done" : "failed";
            pr.reason = j.value("reason", pr.status == "failed" ? "no reason given" : "");
            pr.trace = j.value("trace", "");
            pr.first_step = j.value("first_step", int64_t{-1});
            pr.last_step = j.value("last_step", int64_t{-1});
            pr.events = j.value("events", int64_t{0});
        }
        out.push_back(std::move(pr));
    }
    return out;
}

int profile_command(int argc, char** argv) {
    std::string dir, ranks_arg;
    int64_t steps = -1;
    double timeout = 300;
    bool wait = true, record_shapes = true, profile_memory = false;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto value = [&](const char* what) -> std::string {
            if (i + 1 >= argc)
                throw ConfigError("profile: " + a + " needs " + what + " (try `tagflow profile --help`)");
            return argv[++i];
        };
        if (a == "-h" || a == "--help") {
            print0("%s", kHelp);
            return 0;
        } else if (a == "--ranks") {
            ranks_arg = value("a list of ranks (e.g. 0,1 or all)");
            if (ranks_arg.empty()) throw ConfigError("profile: --ranks is empty (e.g. --ranks 0,1 or --ranks all)");
        } else if (a == "--steps") {
            steps = parse_int(value("a number of steps"), "--steps");
            if (steps < 1 || steps > kProfileMaxSteps)
                throw ConfigError("profile: --steps " + std::to_string(steps) + " is not in [1, " +
                                  std::to_string(kProfileMaxSteps) + "]");
        } else if (a == "--timeout") {
            const std::string v = value("seconds");
            char* e = nullptr;
            timeout = std::strtod(v.c_str(), &e);
            if (*e || v.empty() || !(timeout >= 0 && timeout <= 86400))
                throw ConfigError("profile: --timeout " + v + ": not a number of seconds in [0, 86400]");
        } else if (a == "--no-wait") {
            wait = false;
        } else if (a == "--no-shapes") {
            record_shapes = false;
        } else if (a == "--memory") {
            profile_memory = true;
        } else if (!a.empty() && a[0] == '-') {
            throw ConfigError("profile: unknown option " + a + " (try `tagflow profile --help`)");
        } else if (dir.empty()) {
            dir = a;
        } else {
            throw ConfigError("profile: one run directory only (got " + dir + " and " + a + ")");
        }
    }
    if (dir.empty()) throw ConfigError("profile: missing RUN_DIR (try `tagflow profile --help`)");
    if (ranks_arg.empty()) throw ConfigError("profile: missing --ranks (e.g. --ranks 0,1 or --ranks all)");
    if (steps < 0) throw ConfigError("profile: missing --steps N");
    if (log_rank() != 0) return 0;  // under mpirun: one process asks

    const ProfileRequest req = submit_profile_request(dir, ranks_arg, steps, record_shapes, profile_memory);
    const std::string profiles = dir + "/" + kProfilesDir;
    std::string names;
    for (int r : req.ranks) names += (names.empty() ? "" : ",") + std::to_string(r);
    printf("profile: asked rank(s) %s for %lld step(s) (request %s)\n", names.c_str(), static_cast<long long>(steps),
           req.id.c_str());
    fflush(stdout);
    if (!wait) return 0;

    // Wait for every asked rank's record.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout);
    std::vector<ProfileResult> got;
    for (;;) {
        got = read_profile_results(dir, req.id, req.ranks);
        size_t have = 0;
        for (const ProfileResult& g : got) have += g.status != "pending";
        if (have == got.size() || std::chrono::steady_clock::now() >= deadline) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    int bad = 0;
    for (const ProfileResult& g : got) {
        if (g.status == "pending") {
            printf(
                "rank %d: NOT DELIVERED: no result within %.0f s (the rank is stopped or lost, the run ended, or "
                "it started after the request)\n",
                g.rank, timeout);
            ++bad;
        } else if (g.status == "done") {
            printf("rank %d: steps %lld-%lld, %lld events -> %s/%s%s%s\n", g.rank, static_cast<long long>(g.first_step),
                   static_cast<long long>(g.last_step), static_cast<long long>(g.events), profiles.c_str(),
                   g.trace.c_str(), g.reason.empty() ? "" : " (", g.reason.empty() ? "" : (g.reason + ")").c_str());
        } else {
            printf("rank %d: FAILED: %s\n", g.rank, g.reason.c_str());
            ++bad;
        }
    }
    fflush(stdout);
    return bad ? 1 : 0;
}

}  // namespace tagflow::profile
