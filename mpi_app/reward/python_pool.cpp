// SPDX-License-Identifier: Apache-2.0
// python_pool: worker processes, the JSON Lines protocol and the dispatcher loop of
// `--reward-fn`. See python_pool.hpp for the threading model and the failure handling.
#include "reward/python_pool.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "common/error.hpp"
#include "common/log.hpp"

extern char** environ;

namespace tagflow::reward {
namespace {

using nlohmann::json;
constexpr std::size_t kMaxLine = 64u << 20;  // a result line longer than this is a broken worker

std::string errno_text(int e) { return std::strerror(e); }

std::string fmt_seconds(double s) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", s);
    return buf;
}

/// FILE.py[:NAME] -> (FILE.py, NAME); NAME defaults to compute_score, as in veRL.
std::pair<std::string, std::string> split_spec(const std::string& spec) {
    std::string path = spec, name = "compute_score";
    const auto colon = spec.rfind(':');
    if (colon != std::string::npos && spec.find('/', colon) == std::string::npos) {
        path = spec.substr(0, colon);
        name = spec.substr(colon + 1);
        if (name.empty()) throw ConfigError("--reward-fn " + spec + ": empty function name after ':'");
    }
    if (path.empty()) throw ConfigError("--reward-fn: empty file name");
    for (char c : name)
        if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_'))
            throw ConfigError("--reward-fn " + spec + ": '" + name + "' is not a Python identifier");
    if (std::isdigit(static_cast<unsigned char>(name[0])))
        throw ConfigError("--reward-fn " + spec + ": '" + name + "' is not a Python identifier");
    return {path, name};
}

std::string find_script(const std::string& given) {
    std::string s = given;
    if (s.empty()) {
        const char* env = std::getenv("TAGFLOW_REWARD_WORKER");
        s = (env && *env) ? env : TAGFLOW_REWARD_WORKER_SCRIPT;
    }
    if (access(s.c_str(), R_OK) != 0)
        throw ConfigError("reward worker script " + s + ": " + errno_text(errno) +
                          " (set TAGFLOW_REWARD_WORKER to share/python/tagflow_reward_worker.py)");
    return s;
}

std::string signal_name(int sig) {
    const char* d = strsignal(sig);
    return std::string("signal ") + std::to_string(sig) + (d ? std::string(" (") + d + ")" : "");
}

}  // namespace

PythonPool::PythonPool(const Options& opt)
    : Scorer(opt.on_error),
      python_(opt.python),
      log_path_(opt.log_path),
      timeout_s_(opt.timeout_s),
      startup_timeout_s_(opt.startup_timeout_s),
      batch_(static_cast<std::size_t>(opt.batch)) {
    std::tie(path_, name_) = split_spec(opt.fn);
    struct stat st {};
    if (stat(path_.c_str(), &st) != 0) throw ConfigError("--reward-fn " + path_ + ": " + errno_text(errno));
    if (!S_ISREG(st.st_mode)) throw ConfigError("--reward-fn " + path_ + ": not a regular file");
    if (access(python_.c_str(), X_OK) != 0) throw ConfigError("reward python " + python_ + ": " + errno_text(errno));
    script_ = find_script(opt.worker_script);
    if (!log_path_.empty()) {
        log_fd_ = open(log_path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0640);
        if (log_fd_ < 0) throw ConfigError("reward worker log " + log_path_ + ": " + errno_text(errno));
    }
    event_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (event_fd_ < 0) throw Error(std::string("eventfd: ") + errno_text(errno));
    workers_.resize(static_cast<std::size_t>(opt.workers));
    std::string problem;
    try {
        for (Worker& w : workers_) spawn(w);
        for (Worker& w : workers_) {
            problem = await_ready(w);
            if (!problem.empty()) break;
        }
    } catch (...) {
        for (Worker& w : workers_) reap(w, true);
        if (log_fd_ >= 0) close(log_fd_);
        close(event_fd_);
        throw;
    }
    if (!problem.empty()) {
        for (Worker& w : workers_) reap(w, true);
        if (log_fd_ >= 0) close(log_fd_);
        close(event_fd_);
        throw ConfigError("--reward-fn " + problem);
    }
    thread_ = std::thread([this] { loop(); });
}

PythonPool::~PythonPool() {
    stop_waiters();
    wake();
    if (thread_.joinable()) thread_.join();
    for (Worker& w : workers_) {
        if (w.fd >= 0) {
            close(w.fd);  // EOF: an idle worker leaves on its own
            w.fd = -1;
        }
    }
    const auto deadline = Clock::now() + std::chrono::milliseconds(300);
    for (Worker& w : workers_) {
        while (w.pid > 0 && Clock::now() < deadline) {
            int st = 0;
            if (waitpid(w.pid, &st, WNOHANG) == w.pid) w.pid = -1;
            else usleep(2000);
        }
        reap(w, true);
    }
    if (log_fd_ >= 0) close(log_fd_);
    close(event_fd_);
}

std::string PythonPool::describe() const {
    return "python " + path_ + ":" + name_ + " (" + std::to_string(workers_.size()) + " workers)";
}

void PythonPool::wake() {
    const std::uint64_t one = 1;
    ssize_t n = write(event_fd_, &one, sizeof one);
    (void)n;  // EAGAIN only when the counter is saturated: the loop is awake anyway
}

void PythonPool::spawn(Worker& w) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
        throw Error(std::string("reward worker socketpair: ") + errno_text(errno));
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    posix_spawn_file_actions_init(&fa);
    posix_spawnattr_init(&attr);
    posix_spawn_file_actions_adddup2(&fa, sv[1], 0);
    posix_spawn_file_actions_adddup2(&fa, sv[1], 1);
    if (log_fd_ >= 0) posix_spawn_file_actions_adddup2(&fa, log_fd_, 2);
    // Own process group (a terminal's ^C or a kill of tagflow's group is tagflow's to handle; a
    // timeout kills the whole group, children of the function included), default signal
    // actions and an empty mask (tagflow holds SIGTERM/SIGUSR1 blocked at times).
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &all);
    posix_spawnattr_setpgroup(&attr, 0);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);
    const std::string ppid = std::to_string(getpid());
    std::vector<std::string> args = {python_, "-u", script_, path_, name_, ppid, log_fd_ >= 0 ? "1" : "0"};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid = -1;
    const int rc = posix_spawn(&pid, python_.c_str(), &fa, &attr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    close(sv[1]);
    if (rc != 0) {
        close(sv[0]);
        throw Error("reward worker " + python_ + ": cannot start: " + errno_text(rc));
    }
    fcntl(sv[0], F_SETFL, fcntl(sv[0], F_GETFL) | O_NONBLOCK);
    w.pid = pid;
    w.fd = sv[0];
    w.state = State::kStarting;
    w.in.clear();
    w.out.clear();
    w.since = Clock::now();
}

std::string PythonPool::await_ready(Worker& w) {
    const auto deadline =
        w.since + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(startup_timeout_s_));
    for (;;) {
        const auto nl = w.in.find('\n');
        if (nl != std::string::npos) {
            const std::string line = w.in.substr(0, nl);
            w.in.erase(0, nl + 1);
            json j = json::parse(line, nullptr, false);
            if (j.is_object() && j.contains("ready")) {
                w.state = State::kReady;
                w.since = Clock::now();
                return "";
            }
            if (j.is_object() && j.contains("fatal") && j["fatal"].is_string()) return j["fatal"].get<std::string>();
            return path_ + ": the reward worker's first line is not its greeting: " + line.substr(0, 200);
        }
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
        if (left <= 0)
            return path_ + ": the reward worker did not finish importing it within " + fmt_seconds(startup_timeout_s_) +
                   " s";
        pollfd p{w.fd, POLLIN, 0};
        const int n = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 1000)));
        if (n < 0 && errno != EINTR) return std::string("poll: ") + errno_text(errno);
        if (n > 0 && !read_in(w)) {
            if (w.in.find('\n') != std::string::npos) continue;
            const std::string how = reap(w, false);
            return path_ + ": the reward worker ended before it was ready (" + how + ")" +
                   (log_path_.empty() ? "" : "; see " + log_path_);
        }
    }
}

void PythonPool::loop() {
    std::vector<pollfd> fds;
    while (!stopping()) {
        std::size_t ready = 0;
        for (const Worker& w : workers_) ready += w.state == State::kReady;
        for (Worker& w : workers_)
            if (w.state == State::kReady) feed(w, ready);

        fds.clear();
        fds.push_back({event_fd_, POLLIN, 0});
        auto next = Clock::now() + std::chrono::seconds(1);
        const auto per_sample = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s_));
        const auto startup =
            std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(startup_timeout_s_));
        for (const Worker& w : workers_) {
            if (w.fd < 0) continue;
            short ev = POLLIN;
            if (!w.out.empty()) ev |= POLLOUT;
            fds.push_back({w.fd, ev, 0});
            if (w.state == State::kStarting) next = std::min(next, w.since + startup);
            else if (!w.inflight.empty()) next = std::min(next, w.since + per_sample);
        }
        const auto wait_ms = std::max<long long>(
            0, std::chrono::duration_cast<std::chrono::milliseconds>(next - Clock::now()).count() + 1);
        const int n = ::poll(fds.data(), fds.size(), static_cast<int>(wait_ms));
        if (n < 0 && errno != EINTR) {
            mark_broken(std::string("reward pool poll: ") + errno_text(errno));
            return;
        }
        if (fds[0].revents & POLLIN) {
            std::uint64_t v;
            ssize_t r = read(event_fd_, &v, sizeof v);
            (void)r;
        }
        for (std::size_t i = 1; i < fds.size(); ++i) {
            auto it =
                std::find_if(workers_.begin(), workers_.end(), [&](const Worker& w) { return w.fd == fds[i].fd; });
            if (it == workers_.end()) continue;
            Worker& w = *it;
            const short re = fds[i].revents;
            if ((re & POLLOUT) && !flush_out(w)) {
                retire(w, "", false);
                continue;
            }
            if (re & (POLLIN | POLLHUP | POLLERR)) {
                const bool open = read_in(w);
                std::size_t nl;
                bool bad = false;
                while (w.fd >= 0 && (nl = w.in.find('\n')) != std::string::npos) {
                    const std::string line = w.in.substr(0, nl);
                    w.in.erase(0, nl + 1);
                    std::string why;
                    if (w.state == State::kStarting) {
                        json j = json::parse(line, nullptr, false);
                        if (j.is_object() && j.contains("ready")) {
                            w.state = State::kReady;
                            w.since = Clock::now();
                            continue;
                        }
                        on_restart_failed(w, j.is_object() && j.contains("fatal") && j["fatal"].is_string()
                                                 ? j["fatal"].get<std::string>()
                                                 : "bad greeting: " + line.substr(0, 200));
                        bad = true;
                        break;
                    }
                    if (!on_line(w, line, why)) {
                        retire(w,
                               "reward worker " + std::to_string(w.pid) + " sent a bad line (" + why +
                                   "); killed and restarted",
                               true);
                        bad = true;
                        break;
                    }
                }
                if (bad) continue;
                if (w.in.size() > kMaxLine) {
                    retire(w, "reward worker sent a line over 64 MiB; killed and restarted", true);
                    continue;
                }
                if (!open) {
                    if (w.state == State::kStarting) {
                        on_restart_failed(w, "the restarted worker ended before it was ready (" + reap(w, false) + ")");
                        continue;
                    }
                    retire(w, "", false);
                    continue;
                }
            }
        }
        // Deadlines.
        const auto now = Clock::now();
        for (Worker& w : workers_) {
            if (w.state == State::kStarting && now - w.since > startup) {
                on_restart_failed(w, "the restarted worker did not import " + path_ + " within " +
                                         fmt_seconds(startup_timeout_s_) + " s");
            } else if (w.state == State::kReady && !w.inflight.empty() && now - w.since > per_sample) {
                count(&Stats::timeouts);
                retire(w,
                       name_ + " timed out after " + fmt_seconds(timeout_s_) + " s (reward worker " +
                           std::to_string(w.pid) + " killed and restarted)",
                       true);
            }
        }
    }
}

void PythonPool::feed(Worker& w, std::size_t ready_workers) {
    // Keep a second batch waiting in the socket while the worker scores the first.
    if (w.inflight.size() > batch_ / 2) return;
    const std::size_t q = queued();
    if (q == 0) return;
    const std::size_t share = (q + ready_workers - 1) / std::max<std::size_t>(ready_workers, 1);
    std::vector<Request> reqs = take(std::max<std::size_t>(1, std::min(batch_, share)));
    if (reqs.empty()) return;
    json frame = json::object();
    json& items = frame["batch"] = json::array();
    const bool was_idle = w.inflight.empty();
    for (Request& r : reqs) {
        json item = {{"id", r.id}, {"data_source", r.data_source}, {"solution_str", r.solution_str}};
        json gt = json::parse(r.ground_truth, nullptr, false);
        json ei = json::parse(r.extra_info, nullptr, false);
        if (gt.is_discarded()) {
            fail(r, "ground_truth is not JSON text: " + r.ground_truth.substr(0, 80));
            continue;
        }
        if (ei.is_discarded()) {
            fail(r, "extra_info is not JSON text: " + r.extra_info.substr(0, 80));
            continue;
        }
        item["ground_truth"] = std::move(gt);
        item["extra_info"] = std::move(ei);
        items.push_back(std::move(item));
        w.inflight.push_back(std::move(r));
    }
    if (items.empty()) return;
    count(&Stats::batches);
    w.out += frame.dump(-1, ' ', false, json::error_handler_t::replace);
    w.out += '\n';
    if (was_idle) w.since = Clock::now();
    if (!flush_out(w)) retire(w, "", false);
}

bool PythonPool::flush_out(Worker& w) {
    while (!w.out.empty()) {
        const ssize_t n = send(w.fd, w.out.data(), w.out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            w.out.erase(0, static_cast<std::size_t>(n));
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EPIPE || errno == ECONNRESET)) {
            // The worker is gone. What it sent before it died is still to be read, and its EOF
            // comes with it: retiring it here would blame the oldest sample in flight, which may
            // be one it has already answered, instead of the one it died on.
            w.out.clear();
            return true;
        }
        return false;
    }
    return true;
}

bool PythonPool::read_in(Worker& w) {
    char buf[65536];
    for (;;) {
        const ssize_t n = recv(w.fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n > 0) {
            w.in.append(buf, static_cast<std::size_t>(n));
            if (w.in.size() > kMaxLine) return true;
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
        return false;  // EOF or error
    }
}

bool PythonPool::on_line(Worker& w, const std::string& line, std::string& why) {
    json j = json::parse(line, nullptr, false);
    if (!j.is_object()) {
        why = "not a JSON object: " + line.substr(0, 120);
        return false;
    }
    if (w.inflight.empty()) {
        why = "a result nobody asked for";
        return false;
    }
    Request req = std::move(w.inflight.front());
    w.inflight.pop_front();
    w.since = Clock::now();
    if (!j.contains("id") || !j["id"].is_number_unsigned() || j["id"].get<std::uint64_t>() != req.id) {
        w.inflight.push_front(std::move(req));
        why = "result for the wrong sample";
        return false;
    }
    if (j.contains("error")) {
        fail(req, j["error"].is_string() ? j["error"].get<std::string>() : j["error"].dump());
        return true;
    }
    const json* s = j.contains("score") ? &j["score"] : nullptr;
    if (!s || !s->is_number()) {
        fail(req, "reward worker sent no number for it");
        return true;
    }
    const double d = s->get<double>();
    if (!finite_in_float32(d)) {
        fail(req, name_ + " returned " + s->dump() + ", not finite in float32");
        return true;
    }
    Result r;
    r.id = req.id;
    r.row = req.row;
    r.ok = true;
    r.score = static_cast<float>(d);
    if (j.contains("extras") && j["extras"].is_object())
        r.extras = j["extras"].dump(-1, ' ', false, json::error_handler_t::replace);
    finish(std::move(r));
    return true;
}

void PythonPool::retire(Worker& w, const std::string& cause, bool killed) {
    const pid_t pid = w.pid;
    const std::string how = reap(w, killed);
    const bool restart = !stopping();
    if (restart) count(&Stats::restarts);  // before the failure is handed out: stats stay in step
    std::vector<Request> rest(std::make_move_iterator(w.inflight.begin()), std::make_move_iterator(w.inflight.end()));
    w.inflight.clear();
    if (!rest.empty()) {
        Request culprit = std::move(rest.front());
        rest.erase(rest.begin());
        if (!cause.empty()) {
            fail(culprit, cause);
        } else {
            count(&Stats::crashes);
            fail(culprit, "reward worker " + std::to_string(pid) + " died (" + how + ") while scoring it; restarted" +
                              (log_path_.empty() ? "" : " (see " + log_path_ + ")"));
        }
        put_back(std::move(rest));
    } else if (cause.empty()) {
        count(&Stats::crashes);
        log_warn("reward worker %d died (%s) while idle; restarting it", static_cast<int>(pid), how.c_str());
    }
    if (!restart) return;
    try {
        spawn(w);
    } catch (const std::exception& e) {
        on_restart_failed(w, e.what());
    }
}

std::string PythonPool::reap(Worker& w, bool kill_first) {
    if (w.fd >= 0) {
        close(w.fd);
        w.fd = -1;
    }
    w.state = State::kDead;
    std::string how = "gone";
    if (w.pid > 0) {
        int st = 0;
        pid_t r = 0;
        if (!kill_first) {
            // It closed its socket: give it a moment to become a zombie so its own status shows.
            for (int i = 0; i < 100 && (r = waitpid(w.pid, &st, WNOHANG)) == 0; ++i) usleep(2000);
        }
        if (r == 0) {
            kill(-w.pid, SIGKILL);
            kill(w.pid, SIGKILL);
            while ((r = waitpid(w.pid, &st, 0)) < 0 && errno == EINTR) {}
        }
        if (r == w.pid) {
            if (WIFEXITED(st)) how = "exit status " + std::to_string(WEXITSTATUS(st));
            else if (WIFSIGNALED(st)) how = "killed by " + signal_name(WTERMSIG(st));
        }
        w.pid = -1;
    }
    return how;
}

void PythonPool::on_restart_failed(Worker& w, const std::string& why) {
    reap(w, true);
    std::vector<Request> rest(std::make_move_iterator(w.inflight.begin()), std::make_move_iterator(w.inflight.end()));
    w.inflight.clear();
    put_back(std::move(rest));
    log_warn("reward worker cannot restart: %s", why.c_str());
    bool any = false;
    for (const Worker& o : workers_) any = any || o.state != State::kDead;
    if (!any) mark_broken("reward workers cannot restart: " + why);
}

}  // namespace tagflow::reward
