// SPDX-License-Identifier: Apache-2.0
// status_command: `tagflow status RUN_DIR [--json] [--watch [--interval S]]` — prints the live
// status record <RUN_DIR>/status.json that a running `tagflow train` rewrites (status.hpp), and
// says plainly when the record or a rank's part of it is stale. Reads only; one process (under
// mpirun only rank 0 prints). Does not contact the job (no MPI, no sockets).
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "common/error.hpp"
#include "common/log.hpp"
#include "health/status.hpp"

namespace tagflow::health {
namespace {

const char kHelp[] =
    "usage: tagflow status RUN_DIR [--json] [--watch] [--interval S]\n"
    "\n"
    "Prints the live status of a running `tagflow train --out RUN_DIR`: per rank its host, tags, active\n"
    "role (rollout, train, weight_sync, resplit, idle, io, checkpoint), step, policy version, engine slots\n"
    "in use, tokens/s and queue; the run's step, samples/s, staleness, stale drops and ETA. The job\n"
    "rewrites RUN_DIR/status.json every second; a record or a rank's part older than a few refresh\n"
    "periods is reported as stale (a stopped or lost rank, or a job that is no longer running).\n"
    "\n"
    "  --json        print the record as JSON (plus record_age_s and record_stale)\n"
    "  --watch       reprint every --interval seconds until interrupted\n"
    "  --interval S  refresh period of --watch (default 1)\n"
    "\n"
    "exit status: 0 the job is running and every rank is fresh, or it finished; 1 the record or a rank\n"
    "is stale; 2 bad usage, or RUN_DIR holds no readable tagflow status record.\n";

double wall_now() {
    timespec ts{};
    clock_gettime(CLOCK_REALTIME, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

}  // namespace

nlohmann::json load_status_record(const std::string& dir) {
    struct stat st {};
    if (::stat(dir.c_str(), &st) != 0)
        throw ConfigError(dir + ": " + (errno == ENOENT ? "no such run directory" : std::string(std::strerror(errno))));
    if (!S_ISDIR(st.st_mode))
        throw ConfigError(dir + ": not a directory (give the run directory, --out of tagflow train)");
    const std::string path = dir + "/status.json";
    int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        if (errno == ENOENT)
            throw ConfigError(dir +
                              ": no status record status.json (not a run directory of tagflow train, or the run "
                              "has not started yet)");
        if (errno == ELOOP) throw ConfigError(path + ": is a symbolic link, not a status record (refused)");
        throw ConfigError("cannot read " + path + ": " + std::strerror(errno));
    }
    std::string text;
    const size_t kCap = 4 << 20;
    bool regular = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
    if (regular && static_cast<size_t>(st.st_size) <= kCap) {
        text.resize(static_cast<size_t>(st.st_size));
        ssize_t n = ::pread(fd, &text[0], text.size(), 0);
        if (n < 0) {
            const int err = errno;
            ::close(fd);
            throw ConfigError("cannot read " + path + ": " + std::strerror(err));
        }
        text.resize(static_cast<size_t>(n));
    }
    ::close(fd);
    if (!regular) throw ConfigError(path + ": not a regular file, not a status record");
    if (static_cast<size_t>(st.st_size) > kCap)
        throw ConfigError(path + ": " + std::to_string(st.st_size) +
                          " bytes, not a status record (they are a few KiB)");
    nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object())
        throw ConfigError(path + ": not a tagflow status record (not a JSON object)");
    if (!j.contains("format") || !j["format"].is_string() || j["format"].get<std::string>() != kStatusFormat)
        throw ConfigError(path + ": not a tagflow status record (no \"format\": \"" + kStatusFormat + "\")");
    if (!j.contains("version") || !j["version"].is_number_integer() || j["version"].get<int64_t>() != kStatusVersion)
        throw ConfigError(path + ": status record version " +
                          (j.contains("version") ? j["version"].dump() : "missing") + ", this tagflow reads " +
                          std::to_string(kStatusVersion));
    // The fields the printout uses, with their types.
    auto need = [&](const nlohmann::json& o, const char* key, bool (nlohmann::json::*is)() const noexcept,
                    const std::string& where) {
        if (!o.is_object() || !o.contains(key) || !(o[key].*is)())
            throw ConfigError(path + ": malformed status record (" + where + key + " missing or of the wrong type)");
    };
    need(j, "updated_unix", &nlohmann::json::is_number, "");
    need(j, "refresh_s", &nlohmann::json::is_number, "");
    need(j, "stale_after_s", &nlohmann::json::is_number, "");
    need(j, "mode", &nlohmann::json::is_string, "");
    need(j, "run", &nlohmann::json::is_object, "");
    need(j, "ranks", &nlohmann::json::is_array, "");
    for (const char* k : {"step", "steps", "samples_per_s", "staleness_mean", "stale_dropped", "eta_s"})
        need(j["run"], k, &nlohmann::json::is_number, "run.");
    need(j["run"], "done", &nlohmann::json::is_boolean, "run.");
    for (size_t i = 0; i < j["ranks"].size(); ++i) {
        const std::string w = "ranks[" + std::to_string(i) + "].";
        const nlohmann::json& r = j["ranks"][i];
        for (const char* k : {"rank", "age_s"}) need(r, k, &nlohmann::json::is_number, w);
        for (const char* k : {"host", "tags", "role"}) need(r, k, &nlohmann::json::is_string, w);
        need(r, "stale", &nlohmann::json::is_boolean, w);
    }
    return j;
}

namespace {

nlohmann::json load(const std::string& dir) { return load_status_record(dir); }

std::string num(const nlohmann::json& o, const char* key, const char* fmt = "%.0f") {
    if (!o.contains(key) || !o[key].is_number()) return "-";
    const double v = o[key].get<double>();
    if (v < 0) return "-";
    char b[64];
    snprintf(b, sizeof b, fmt, v);
    return b;
}

std::string str(const nlohmann::json& o, const char* key) {
    return o.contains(key) && o[key].is_string() ? o[key].get<std::string>() : "-";
}

// Prints the record; returns the exit status (0 fresh or finished, 1 something stale).
int print(const std::string& dir, nlohmann::json j, bool json) {
    const double age = std::max(0.0, wall_now() - j["updated_unix"].get<double>());
    const double stale_after = j["stale_after_s"].get<double>();
    const bool done = j["run"]["done"].get<bool>();
    const bool record_stale = !done && age > stale_after;
    bool any_stale = record_stale;
    for (const auto& r : j["ranks"]) any_stale = any_stale || (!done && r["stale"].get<bool>());
    if (json) {
        j["record_age_s"] = age;
        j["record_stale"] = record_stale;
        printf("%s\n", j.dump(1).c_str());
        fflush(stdout);
        return any_stale ? 1 : 0;
    }
    const nlohmann::json& run = j["run"];
    std::string eta = done                             ? "finished"
                      : run["eta_s"].get<double>() < 0 ? "ETA unknown"
                                                       : "ETA " + num(run, "eta_s") + " s";
    printf("%s: mode %s, step %s/%s, %s samples/s, staleness %s, %s stale drops, %s (updated %.1f s ago)\n",
           dir.c_str(), str(j, "mode").c_str(), num(run, "step").c_str(), num(run, "steps").c_str(),
           num(run, "samples_per_s", "%.1f").c_str(), num(run, "staleness_mean", "%.2f").c_str(),
           num(run, "stale_dropped").c_str(), eta.c_str(), age);
    printf("%4s  %-16s %-20s %-11s %5s %7s %5s %7s %9s %6s  %s\n", "rank", "host", "tags", "role", "step", "version",
           "slots", "waiting", "tokens/s", "queue", "state");
    for (const auto& r : j["ranks"]) {
        std::string state = r["stale"].get<bool>() && !done ? "STALE" : r.value("missing", false) ? "no record" : "ok";
        char age_s[32];
        snprintf(age_s, sizeof age_s, " (%.1f s)", r["age_s"].get<double>());
        printf("%4s  %-16s %-20s %-11s %5s %7s %5s %7s %9s %6s  %s%s\n", num(r, "rank").c_str(), str(r, "host").c_str(),
               str(r, "tags").c_str(), str(r, "role").c_str(), num(r, "step").c_str(), num(r, "policy_version").c_str(),
               num(r, "engine_slots").c_str(), num(r, "engine_waiting").c_str(), num(r, "tokens_per_s", "%.1f").c_str(),
               num(r, "queue").c_str(), state.c_str(), age_s);
    }
    // Where each rank's time went since it started (role_s): a multiplexed rank switches roles
    // faster than any refresh can show, this says how it splits its time.
    for (const auto& r : j["ranks"]) {
        if (!r.contains("role_s") || !r["role_s"].is_object()) continue;
        double total = 0;
        for (const auto& [k, v] : r["role_s"].items())
            if (v.is_number()) total += std::max(0.0, v.get<double>());
        if (total <= 0) continue;
        std::string line;
        for (const auto& [k, v] : r["role_s"].items()) {
            const double sec = v.is_number() ? v.get<double>() : 0.0;
            if (sec <= 0) continue;
            char b[96];
            snprintf(b, sizeof b, "%s%s %.1f s (%.0f%%)", line.empty() ? "" : ", ", k.c_str(), sec,
                     100.0 * sec / total);
            line += b;
        }
        printf("rank %s time by role: %s\n", num(r, "rank").c_str(), line.c_str());
    }
    if (done) printf("the run finished at step %s\n", num(run, "step").c_str());
    if (record_stale)
        printf(
            "STALE: the record was last updated %.0f s ago (it is rewritten every %.0f s): the job is not running, "
            "or its coordinator (rank %s) is stopped or lost\n",
            age, j["refresh_s"].get<double>(), num(j, "coordinator").c_str());
    for (const auto& r : j["ranks"])
        if (r["stale"].get<bool>() && !done)
            printf("STALE: rank %s (host %s) has not updated its status for %.0f s%s: stopped or lost\n",
                   num(r, "rank").c_str(), str(r, "host").c_str(), r["age_s"].get<double>(),
                   record_stale ? " (as of the last record)" : "");
    fflush(stdout);
    return any_stale ? 1 : 0;
}

}  // namespace

int status_command(int argc, char** argv) {
    std::string dir;
    bool json = false, watch = false;
    double interval = 1.0;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "-h" || a == "--help") {
            print0("%s", kHelp);
            return 0;
        } else if (a == "--json") {
            json = true;
        } else if (a == "--watch") {
            watch = true;
        } else if (a == "--interval") {
            if (i + 1 >= argc) throw ConfigError("--interval: missing value (seconds)");
            char* e = nullptr;
            interval = std::strtod(argv[++i], &e);
            if (*e || !(interval >= 0.1 && interval <= 3600))
                throw ConfigError(std::string("--interval ") + argv[i] + ": not a number of seconds in [0.1, 3600]");
        } else if (!a.empty() && a[0] == '-') {
            throw ConfigError("status: unknown option " + a + " (try `tagflow status --help`)");
        } else if (dir.empty()) {
            dir = a;
        } else {
            throw ConfigError("status: one run directory only (got " + dir + " and " + a + ")");
        }
    }
    if (dir.empty()) throw ConfigError("status: missing RUN_DIR (try `tagflow status --help`)");
    if (log_rank() != 0) return 0;  // under mpirun: one printout
    if (!watch) return print(dir, load(dir), json);
    for (;;) {
        nlohmann::json j = load(dir);  // a record that goes bad ends the watch with its one line
        if (!json) printf("\033[H\033[2J");
        print(dir, std::move(j), json);
        std::this_thread::sleep_for(std::chrono::duration<double>(interval));
    }
}

}  // namespace tagflow::health
