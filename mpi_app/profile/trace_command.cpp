// SPDX-License-Identifier: Apache-2.0
// trace_command: `tagflow trace`: the run file (read by trace_read.cpp) as Chrome trace JSON. See
// trace_command.hpp for what the trace holds. Times are handled as integer nanoseconds since
// t0_unix so that touching spans (one's end == the next one's start) stay touching after the
// conversion to the microseconds the format wants.
#include "profile/trace_command.hpp"

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "common/error.hpp"
#include "common/log.hpp"
#include "common/safe_file.hpp"
#include "profile/trace_read.hpp"

namespace tagflow::profile {
namespace {

using trace::first_line;
using trace::kCounterMetrics;
using trace::kStepMetrics;
using trace::Metric;
using trace::RankInfo;
using trace::read_run;
using trace::RunData;

namespace fs = std::filesystem;

// ------------------------------------------------------------------ writing JSON

/// `s` as a JSON string literal; bytes that are not valid UTF-8 become '?'.
std::string jstr(const std::string& s) {
    std::string o = "\"";
    const auto* p = reinterpret_cast<const unsigned char*>(s.data());
    const size_t n = s.size();
    for (size_t i = 0; i < n;) {
        const unsigned char c = p[i];
        if (c == '"' || c == '\\') {
            o += '\\';
            o += static_cast<char>(c);
            ++i;
        } else if (c < 0x20) {
            char b[8];
            std::snprintf(b, sizeof b, "\\u%04x", c);
            o += b;
            ++i;
        } else if (c < 0x80) {
            o += static_cast<char>(c);
            ++i;
        } else {
            const size_t len = (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
            bool ok = len > 0 && i + len <= n;
            for (size_t k = 1; ok && k < len; ++k) ok = (p[i + k] & 0xC0) == 0x80;
            if (ok) {
                o.append(s, i, len);
                i += len;
            } else {
                o += '?';
                ++i;
            }
        }
    }
    return o + "\"";
}

/// A number for JSON: non-finite values (no JSON literal) become null.
std::string jnum(double v) {
    if (!std::isfinite(v)) return "null";
    char b[32];
    std::snprintf(b, sizeof b, "%.9g", v);
    return b;
}

/// Unix seconds with microseconds (%.9g would round t0_unix to 10 s).
std::string seconds_str(double v) {
    if (!std::isfinite(v)) return "null";
    char b[48];
    std::snprintf(b, sizeof b, "%.6f", v);
    return b;
}

/// Integer nanoseconds since t0 -> microseconds with 3 decimals (exact).
std::string us(int64_t ns) {
    char b[40];
    const uint64_t a = ns < 0 ? static_cast<uint64_t>(-(ns + 1)) + 1 : static_cast<uint64_t>(ns);
    std::snprintf(b, sizeof b, "%s%" PRIu64 ".%03" PRIu64, ns < 0 ? "-" : "", a / 1000, a % 1000);
    return b;
}

int64_t to_ns(double seconds) { return std::llround(seconds * 1e9); }

/// Lane per interval so that intervals in one lane never overlap (touching is fine): the first
/// lane whose last interval ended by the start. `order` lists the intervals by start time.
std::vector<int> assign_lanes(const std::vector<std::pair<int64_t, int64_t>>& iv, const std::vector<size_t>& order,
                              int* lanes_used) {
    std::vector<int> lane(iv.size(), 0);
    std::vector<int64_t> lane_end;
    for (size_t i : order) {
        size_t l = 0;
        while (l < lane_end.size() && lane_end[l] > iv[i].first) ++l;
        if (l == lane_end.size()) lane_end.push_back(iv[i].second);
        lane_end[l] = std::max(lane_end[l], iv[i].second);
        lane[i] = static_cast<int>(l);
    }
    *lanes_used = static_cast<int>(lane_end.size());
    return lane;
}

class TraceWriter {
public:
    void event(const std::string& body) {
        out_ += first_ ? "\n" : ",\n";
        out_ += "{" + body + "}";
        first_ = false;
    }
    void meta(const char* name, int pid, int tid, const std::string& args) {
        event("\"name\":\"" + std::string(name) + "\",\"ph\":\"M\",\"pid\":" + std::to_string(pid) +
              ",\"tid\":" + std::to_string(tid) + ",\"args\":{" + args + "}");
    }
    std::string& text() { return out_; }

private:
    std::string out_;
    bool first_ = true;
};

std::string pid_tid(int pid, int tid) { return ",\"pid\":" + std::to_string(pid) + ",\"tid\":" + std::to_string(tid); }

void write_file(const std::string& path, const std::string& text) {
    try {
        write_file_replace(path, text);  // a random temporary renamed into place: never through a planted link
    } catch (const Error& e) {
        throw Error(std::string("cannot write ") + e.what());
    }
}

// ------------------------------------------------------------------ on-demand profiles

/// The bytes of a regular file (no link followed), at most `cap`; throws Error naming the problem.
std::string read_small_file(const std::string& path, size_t cap) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) throw Error(errno == ELOOP ? "a symbolic link" : std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        ::close(fd);
        throw Error("not a regular file");
    }
    if (static_cast<size_t>(st.st_size) > cap) {
        ::close(fd);
        throw Error(std::to_string(st.st_size) + " bytes, over the " + std::to_string(cap >> 20) + " MiB limit");
    }
    std::string text(static_cast<size_t>(st.st_size), '\0');
    size_t got = 0;
    while (got < text.size()) {
        const ssize_t n = ::pread(fd, &text[got], text.size() - got, static_cast<off_t>(got));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        got += static_cast<size_t>(n);
    }
    ::close(fd);
    text.resize(got);
    return text;
}

/// Merges RUN_DIR/profiles/rank.R.step.S-T.json (on_demand.hpp) into the trace: every event on
/// the rank's process, on a thread of its own per profile (and profiler thread), with the rank's
/// clock_offset added like the spans'. A file that is not such a profile of this run is skipped
/// with one note; it never fails the trace.
void merge_profiles(const std::string& run_h5, const RunData& r, TraceWriter& w, int& next_tid, TraceSummary& sum,
                    std::vector<std::string>& notes) {
    const fs::path dir = fs::path(run_h5).parent_path() / "profiles";
    std::error_code ec;
    const fs::file_status ls = fs::symlink_status(dir, ec);
    if (ec || !fs::exists(ls)) return;
    if (!fs::is_directory(ls)) {
        notes.push_back(dir.string() + ": not a directory (a link or a file); no profiles merged");
        return;
    }
    std::vector<std::string> names;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
        const std::string n = it->path().filename().string();
        if (n.rfind("rank.", 0) == 0 && n.find(".step.") != std::string::npos && n.size() > 5 &&
            n.compare(n.size() - 5, 5, ".json") == 0)
            names.push_back(n);
    }
    std::sort(names.begin(), names.end());
    for (const std::string& name : names) {
        const std::string path = (dir / name).string();
        try {
            const nlohmann::json j = nlohmann::json::parse(read_small_file(path, size_t{1} << 30), nullptr, false);
            if (j.is_discarded() || !j.is_object()) throw Error("not JSON");
            const auto other = j.find("otherData");
            if (other == j.end() || !other->is_object() || other->value("generator", "") != "tagflow profile")
                throw Error("not a tagflow profile (no otherData.generator \"tagflow profile\")");
            const auto ev = j.find("traceEvents");
            if (ev == j.end() || !ev->is_array()) throw Error("no traceEvents list");
            const nlohmann::json& o = *other;
            if (!o.contains("rank") || !o["rank"].is_number_integer() || !o.contains("t0_unix") ||
                !o["t0_unix"].is_number())
                throw Error("otherData lacks rank or t0_unix");
            const int64_t rank = o["rank"].get<int64_t>();
            if (std::fabs(o["t0_unix"].get<double>() - r.t0_unix) > 1e-3)
                throw Error("recorded by another run (t0_unix differs from the run file's)");
            const auto ri = r.ranks.find(static_cast<int32_t>(rank));
            if (rank < 0 || ri == r.ranks.end()) throw Error("rank " + std::to_string(rank) + " is not in the run");
            const double off_us = ri->second.clock_offset * 1e6;
            const int pid = static_cast<int>(rank) + 1;
            const std::string steps = std::to_string(o.value("first_step", int64_t{-1})) + "-" +
                                      std::to_string(o.value("last_step", int64_t{-1}));
            std::map<int64_t, int> tids;  // profiler thread -> trace thread
            nlohmann::json merged = nlohmann::json::array();
            for (const nlohmann::json& e : *ev) {
                if (!e.is_object() || !e.contains("ts") || !e["ts"].is_number() || !e.contains("ph") ||
                    !e["ph"].is_string())
                    continue;
                const double ts = e["ts"].get<double>();
                if (!std::isfinite(ts)) continue;
                const int64_t t = e.contains("tid") && e["tid"].is_number_integer() ? e["tid"].get<int64_t>() : 0;
                auto [it, fresh] = tids.emplace(t, 0);
                if (fresh) {
                    it->second = next_tid++;
                    std::string tname = "torch ops, steps " + steps;
                    if (tids.size() > 1) tname += " (thread " + std::to_string(t) + ")";
                    w.meta("thread_name", pid, it->second, "\"name\":" + jstr(tname));
                    w.meta("thread_sort_index", pid, it->second, "\"sort_index\":" + std::to_string(100 + it->second));
                }
                nlohmann::json c = e;
                c["ts"] = std::round((ts + off_us) * 1e3) / 1e3;
                c["pid"] = pid;
                c["tid"] = it->second;
                merged.push_back(std::move(c));
            }
            // Profiles written before torch_profiler.cpp nested the operators itself: the same repair here.
            nest_complete_events(merged);
            for (const nlohmann::json& c : merged) {
                const std::string body = c.dump();
                w.event(body.substr(1, body.size() - 2));
            }
            sum.profile_events += static_cast<int64_t>(merged.size());
            ++sum.profiles;
        } catch (const std::exception& e) {
            notes.push_back("skipped " + path + ": " + first_line(e.what()));
        }
    }
}

}  // namespace

int64_t nest_complete_events(nlohmann::json& events, double tolerance_us) {
    if (!events.is_array()) return 0;
    struct Slice {
        int64_t ts, dur;  // ns
        size_t i;
    };
    std::map<std::pair<int64_t, int64_t>, std::vector<Slice>> threads;  // (pid, tid) -> its X events
    for (size_t i = 0; i < events.size(); ++i) {
        const nlohmann::json& e = events[i];
        if (!e.is_object()) continue;
        const auto ph = e.find("ph"), ts = e.find("ts"), dur = e.find("dur");
        if (ph == e.end() || *ph != "X" || ts == e.end() || !ts->is_number() || dur == e.end() || !dur->is_number())
            continue;
        const double t = ts->get<double>(), d = dur->get<double>();
        if (!std::isfinite(t) || !std::isfinite(d) || d < 0) continue;
        const auto pid = e.find("pid"), tid = e.find("tid");
        const int64_t p = pid != e.end() && pid->is_number_integer() ? pid->get<int64_t>() : 0;
        const int64_t q = tid != e.end() && tid->is_number_integer() ? tid->get<int64_t>() : 0;
        threads[{p, q}].push_back({std::llround(t * 1e3), std::llround(d * 1e3), i});
    }
    const int64_t tol = std::llround(tolerance_us * 1e3);
    int64_t shortened = 0;
    for (auto& kv : threads) {
        std::vector<Slice>& v = kv.second;
        std::sort(v.begin(), v.end(), [](const Slice& a, const Slice& b) {
            return a.ts != b.ts ? a.ts < b.ts : a.dur != b.dur ? a.dur > b.dur : a.i < b.i;
        });
        std::vector<std::pair<int64_t, int64_t>> open;  // (end, dur) of the slices holding the current one
        for (Slice& s : v) {
            // Perfetto closes a slice that ended before this one begins, or where it begins (unless both are empty).
            while (!open.empty() && (open.back().first < s.ts ||
                                     (open.back().first == s.ts && !(open.back().second == 0 && s.dur == 0))))
                open.pop_back();
            int64_t end = s.ts + s.dur;
            if (!open.empty() && end > open.back().first) {
                if (end - open.back().first > tol) continue;  // a real overlap: left as it is (Perfetto drops it)
                end = open.back().first;
                s.dur = end - s.ts;
                events[s.i]["dur"] = static_cast<double>(s.dur) / 1e3;
                ++shortened;
            }
            open.emplace_back(end, s.dur);
        }
    }
    return shortened;
}

TraceSummary write_chrome_trace(const std::string& run_h5, const std::string& out_json) {
    std::error_code ec;
    if (fs::exists(out_json, ec) && fs::exists(run_h5, ec) && fs::equivalent(out_json, run_h5, ec))
        throw Error(out_json + ": is the run file itself (choose another -o)");
    const RunData r = read_run(run_h5);
    TraceSummary sum;
    const int max_rank = r.ranks.empty() ? -1 : r.ranks.rbegin()->first;
    const int run_pid = max_rank + 2;
    int next_tid = run_pid + 2;  // run_pid: steps, run_pid + 1: syncs, then extra lanes

    // Spans: integer ns (clock offset applied), lanes per rank.
    const size_t n = r.rank.size();
    std::vector<std::pair<int64_t, int64_t>> iv(n);
    for (size_t i = 0; i < n; ++i) {
        const double off = r.ranks.at(r.rank[i]).clock_offset;
        iv[i].first = to_ns(r.t_start[i] + off);
        iv[i].second = std::max(iv[i].first, to_ns(r.t_end[i] + off));
    }
    std::vector<size_t> order(n);
    for (size_t i = 0; i < n; ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
        return r.rank[a] != r.rank[b] ? r.rank[a] < r.rank[b] : iv[a] < iv[b];
    });
    std::vector<int> lane(n, 0);
    std::map<int32_t, std::vector<int>> lane_tids;  // rank -> tid per lane
    for (size_t b = 0; b < n;) {
        size_t e = b;
        while (e < n && r.rank[order[e]] == r.rank[order[b]]) ++e;
        std::vector<size_t> part(order.begin() + static_cast<std::ptrdiff_t>(b),
                                 order.begin() + static_cast<std::ptrdiff_t>(e));
        int used = 0;
        std::vector<int> l = assign_lanes(iv, part, &used);
        for (size_t i : part) lane[i] = l[i];
        std::vector<int>& tids = lane_tids[r.rank[order[b]]];
        tids.push_back(r.rank[order[b]] + 1);
        for (int k = 1; k < used; ++k) tids.push_back(next_tid++);
        sum.overlap_threads += used - 1;
        b = e;
    }

    TraceWriter w;
    // Ranks: process and thread names.
    for (const auto& [rank, ri] : r.ranks) {
        const int pid = rank + 1;
        const std::string label = "rank " + std::to_string(rank) + " (" + ri.host + ": " + ri.tags + ")";
        w.meta("process_name", pid, pid,
               "\"name\":" + jstr(label) + ",\"rank\":" + std::to_string(rank) + ",\"host\":" + jstr(ri.host) +
                   ",\"tags\":" + jstr(ri.tags) + ",\"tag_source\":" + jstr(ri.tag_source) +
                   ",\"gpus\":" + std::to_string(ri.gpus) + ",\"clock_offset\":" + jnum(ri.clock_offset));
        w.meta("process_labels", pid, pid,
               "\"labels\":" + jstr("host " + ri.host + ", tags " + ri.tags + " (" + ri.tag_source + "), " +
                                    std::to_string(ri.gpus) + " GPUs"));
        w.meta("process_sort_index", pid, pid, "\"sort_index\":" + std::to_string(pid));
        std::vector<int> tids = lane_tids.count(rank) ? lane_tids[rank] : std::vector<int>{pid};
        for (size_t k = 0; k < tids.size(); ++k) {
            const std::string tname = k == 0 ? "spans" : "spans (overlapping " + std::to_string(k) + ")";
            w.meta("thread_name", pid, tids[k], "\"name\":" + jstr(tname));
            w.meta("thread_sort_index", pid, tids[k], "\"sort_index\":" + std::to_string(k));
        }
        ++sum.ranks;
    }
    // One X event per /timeline row.
    for (size_t i : order) {
        const uint8_t k = r.kind[i];
        const std::string kname = k < r.kind_names.size() ? r.kind_names[k] : "kind " + std::to_string(k);
        const int pid = r.rank[i] + 1;
        w.event("\"name\":" + jstr(kname) + ",\"cat\":\"timeline\",\"ph\":\"X\",\"ts\":" + us(iv[i].first) +
                ",\"dur\":" + us(iv[i].second - iv[i].first) + pid_tid(pid, lane_tids[r.rank[i]][lane[i]]) +
                ",\"args\":{\"rank\":" + std::to_string(r.rank[i]) + ",\"step\":" + std::to_string(r.step[i]) +
                ",\"row\":" + std::to_string(i) + "}");
        ++sum.spans;
    }

    // LibTorch profiles that `tagflow profile` had the ranks record, on the same clock.
    merge_profiles(run_h5, r, w, next_tid, sum, sum.notes);

    // The run process: steps (X), step metrics (C), train group changes (i), weight syncs (i).
    w.meta("process_name", run_pid, run_pid, "\"name\":\"run: steps, metrics, weight syncs\"");
    w.meta("process_sort_index", run_pid, run_pid, "\"sort_index\":0");
    w.meta("thread_name", run_pid, run_pid, "\"name\":\"steps\"");
    w.meta("thread_name", run_pid, run_pid + 1, "\"name\":\"weight syncs\"");
    const size_t ns = r.step_no.size();
    std::vector<std::pair<int64_t, int64_t>> siv(ns);
    std::vector<size_t> sorder(ns);
    for (size_t i = 0; i < ns; ++i) {
        sorder[i] = i;
        siv[i].first = std::isfinite(r.step_start[i]) ? to_ns(r.step_start[i]) : 0;
        siv[i].second = std::isfinite(r.step_end[i]) ? std::max(siv[i].first, to_ns(r.step_end[i])) : siv[i].first;
    }
    std::stable_sort(sorder.begin(), sorder.end(), [&](size_t a, size_t b) { return siv[a] < siv[b]; });
    int step_lanes = 0;
    const std::vector<int> slane = assign_lanes(siv, sorder, &step_lanes);
    std::vector<int> step_tids{run_pid};
    for (int k = 1; k < step_lanes; ++k) {
        step_tids.push_back(next_tid++);
        w.meta("thread_name", run_pid, step_tids.back(),
               "\"name\":" + jstr("steps (overlapping " + std::to_string(k) + ")"));
    }
    for (size_t i : sorder) {
        std::string args = "\"step\":" + std::to_string(r.step_no[i]);
        for (const auto& [name, v] : r.metrics) args += ",\"" + name + "\":" + jnum(v[i]);
        if (!r.step_group[i].empty()) args += ",\"train_group\":" + jstr(r.step_group[i]);
        if (r.step_regroup[i] != "none") args += ",\"regroup\":" + jstr(r.step_regroup[i]);
        w.event("\"name\":" + jstr("step " + std::to_string(r.step_no[i])) + ",\"cat\":\"step\",\"ph\":\"X\",\"ts\":" +
                us(siv[i].first) + ",\"dur\":" + us(siv[i].second - siv[i].first) +
                pid_tid(run_pid, step_tids[slane[i]]) + ",\"args\":{" + args + "}");
        for (const auto& [name, v] : r.metrics) {
            const bool counter =
                std::find(kStepMetrics, kStepMetrics + kCounterMetrics, name) != kStepMetrics + kCounterMetrics;
            if (counter && std::isfinite(v[i]))
                w.event("\"name\":" + jstr(name) + ",\"cat\":\"step\",\"ph\":\"C\",\"ts\":" + us(siv[i].first) +
                        pid_tid(run_pid, run_pid) + ",\"args\":{\"value\":" + jnum(v[i]) + "}");
        }
        ++sum.steps;
    }
    // --rebalance-every: an instant event where a step's train group differs from the step before's.
    for (size_t k = 1; k < sorder.size(); ++k) {
        const size_t i = sorder[k], prev = sorder[k - 1];
        if (r.step_group[i].empty() || r.step_group[prev].empty() || r.step_group[i] == r.step_group[prev]) continue;
        std::string args = "\"step\":" + std::to_string(r.step_no[i]) + ",\"from\":" + jstr(r.step_group[prev]) +
                           ",\"to\":" + jstr(r.step_group[i]) + ",\"regroup\":" + jstr(r.step_regroup[i]);
        for (const auto& [name, v] : r.metrics)
            if (name == "predicted_s" || name == "predicted_current_s" || name == "resplit_s" ||
                name == "resplit_bytes")
                args += ",\"" + name + "\":" + jnum(v[i]);
        w.event("\"name\":" + jstr("train group " + r.step_group[prev] + " -> " + r.step_group[i]) +
                ",\"cat\":\"resplit\",\"ph\":\"i\",\"s\":\"t\",\"ts\":" + us(siv[i].first) + pid_tid(run_pid, run_pid) +
                ",\"args\":{" + args + "}");
        ++sum.regroups;
    }
    for (size_t i = 0; i < r.sync_version.size(); ++i) {
        if (!std::isfinite(r.sync_start[i])) continue;
        const double secs = r.sync_end[i] - r.sync_start[i];
        w.event("\"name\":" + jstr("weight sync v" + std::to_string(r.sync_version[i])) +
                ",\"cat\":\"sync\",\"ph\":\"i\",\"s\":\"t\",\"ts\":" + us(to_ns(r.sync_start[i])) +
                pid_tid(run_pid, run_pid + 1) + ",\"args\":{\"version\":" + std::to_string(r.sync_version[i]) +
                ",\"bytes\":" + std::to_string(r.sync_bytes[i]) + ",\"mode\":" + jstr(r.sync_mode[i]) +
                ",\"seconds\":" + jnum(secs) + "}");
        ++sum.syncs;
    }

    // Coverage: per rank, the union of its spans over [first span start, last span end].
    if (n > 0) {
        int64_t lo = iv[0].first, hi = iv[0].second;
        for (const auto& p : iv) lo = std::min(lo, p.first), hi = std::max(hi, p.second);
        sum.coverage.assign(static_cast<size_t>(max_rank + 1), 0.0);
        int64_t covered = 0, cur_end = lo;
        for (size_t j = 0; j < n; ++j) {
            const size_t i = order[j];
            if (j == 0 || r.rank[i] != r.rank[order[j - 1]]) covered = 0, cur_end = lo;
            const int64_t s = std::max(iv[i].first, cur_end);
            if (iv[i].second > s) covered += iv[i].second - s, cur_end = iv[i].second;
            if (hi > lo)
                sum.coverage[static_cast<size_t>(r.rank[i])] =
                    static_cast<double>(covered) / static_cast<double>(hi - lo);
        }
    }

    // traceEvents before otherData: Perfetto's tokenizer stops at the first top-level key it does
    // not know (older versions do not know otherData), so nothing of value may follow one.
    std::string doc = "{\"displayTimeUnit\":\"ms\",\n\"traceEvents\":[";
    doc += w.text();
    doc += "\n],\n\"otherData\":{\"generator\":\"tagflow trace\",\"run_file\":" + jstr(run_h5) +
           ",\"tagflow_version\":" + jstr(r.tagflow_version) + ",\"world_size\":" + std::to_string(r.world_size) +
           ",\"t0_unix\":" + seconds_str(r.t0_unix) + ",\"slurm_job_id\":" + jstr(r.slurm_job_id) +
           ",\"time\":\"ts and dur in microseconds since t0_unix, clock_offset applied (spans and profiles)\"}}\n";
    write_file(out_json, doc);
    return sum;
}

int trace_command(int argc, char** argv) {
    static const char kHelp[] =
        "usage: tagflow trace RUN.h5 [-o trace.json]\n"
        "Writes the run file's per-rank timeline as Chrome trace JSON (Trace Event Format): open it in\n"
        "ui.perfetto.dev or chrome://tracing. One process per rank (its host and tags from /ranks), one\n"
        "slice per /timeline span, and a \"run\" process with the steps, per-step counters (reward_mean,\n"
        "samples_per_s, idle_frac, ...) and the weight syncs. Reads the file serially; run it without mpirun.\n"
        "\n"
        "options:\n"
        "  -o, --output FILE  the trace file (default: RUN.h5's stem + .trace.json, beside RUN.h5)\n"
        "  -h, --help         print this help and exit\n";
    std::string run, out;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "-h" || a == "--help") {
            print0("%s", kHelp);
            return 0;
        }
        std::string value;
        if (a == "-o" || a == "--output") {
            if (i + 1 >= argc) throw ConfigError("trace: " + a + " needs a file name (e.g. -o trace.json)");
            value = argv[++i];
        } else if (a.rfind("--output=", 0) == 0) {
            value = a.substr(9);
        } else if (a.size() > 2 && a.rfind("-o", 0) == 0 && a[2] != '-') {
            value = a.substr(2);
        } else if (!a.empty() && a[0] == '-') {
            throw ConfigError("trace: unknown option '" + a + "' (try `tagflow trace --help`)");
        } else {
            if (!run.empty()) throw ConfigError("trace: unexpected argument '" + a + "' (one run file only)");
            run = a;
            continue;
        }
        if (value.empty()) throw ConfigError("trace: -o needs a file name (e.g. -o trace.json)");
        if (!out.empty()) throw ConfigError("trace: -o given twice");
        out = value;
    }
    if (run.empty()) throw ConfigError("trace: missing the run file (usage: tagflow trace RUN.h5 [-o trace.json])");
    if (out.empty()) out = fs::path(run).replace_extension(".trace.json").string();

    if (log_rank() != 0) return 0;  // one process reads and writes; other ranks have nothing to do
    TraceSummary s;
    try {
        s = write_chrome_trace(run, out);
    } catch (const Error& e) {
        log_error("trace: %s", first_line(e.what()).c_str());
        return 1;
    }
    std::string cov;
    for (size_t k = 0; k < s.coverage.size(); ++k) {
        char b[48];
        std::snprintf(b, sizeof b, "%s%zu %.1f%%", k ? ", " : "", k, 100.0 * s.coverage[k]);
        cov += b;
    }
    print0("trace: %" PRId64 " spans on %d ranks, %" PRId64 " steps, %" PRId64 " weight syncs -> %s\n", s.spans,
           s.ranks, s.steps, s.syncs, out.c_str());
    if (s.regroups > 0) print0("train group changes (--rebalance-every): %" PRId64 "\n", s.regroups);
    if (!cov.empty()) print0("span coverage per rank (first to last span): %s\n", cov.c_str());
    if (s.profiles > 0)
        print0("profiles: %" PRId64 " LibTorch profile(s), %" PRId64 " events merged\n", s.profiles, s.profile_events);
    for (const std::string& note : s.notes) print0("note: %s\n", note.c_str());
    if (s.overlap_threads > 0)
        print0("note: %d extra thread(s) hold spans that overlap others on the same rank\n", s.overlap_threads);
    return 0;
}

}  // namespace tagflow::profile
