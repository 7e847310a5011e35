// SPDX-License-Identifier: Apache-2.0
// torch_profiler: LibTorch's profiler (KINETO state) on the calling thread, and its events as
// Chrome trace JSON. Event times: KinetoEvent::startUs() is microseconds since the Unix epoch
// by the system clock (checked against CLOCK_REALTIME); the trace holds them as µs since the
// run's t0_unix on this rank's clock (system clock + the test-only skew), the time base of the
// rank's /timeline spans, so that `tagflow trace` treats both alike (adds clock_offset).
#include "profile/torch_profiler.hpp"

#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/cuda.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <exception>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "common/error.hpp"
#include "common/safe_file.hpp"
#include "profile/trace_command.hpp"

namespace tagflow::profile {
namespace {

namespace tap = torch::autograd::profiler;
namespace tpi = torch::profiler::impl;

std::string first_line(const char* what) {
    std::string s(what);
    return s.substr(0, s.find('\n'));
}

std::set<tpi::ActivityType> activities() {
    std::set<tpi::ActivityType> a{tpi::ActivityType::CPU};
    if (torch::cuda::is_available()) a.insert(tpi::ActivityType::CUDA);
    return a;
}

}  // namespace

void torch_profile_start(bool shapes, bool memory) {
    try {
        const tpi::ProfilerConfig cfg(tpi::ProfilerState::KINETO, shapes, memory);
        const auto acts = activities();
        tap::prepareProfiler(cfg, acts);
        tap::enableProfiler(cfg, acts);
    } catch (const std::exception& e) {
        throw Error("LibTorch's profiler did not start: " + first_line(e.what()));
    }
}

void torch_profile_abort() noexcept {
    try {
        tap::disableProfiler();
    } catch (...) {}
}

int64_t torch_profile_stop_and_write(const std::string& path, const TraceHeader& h) {
    std::unique_ptr<tap::ProfilerResult> res;
    try {
        res = tap::disableProfiler();
    } catch (const std::exception& e) {
        throw Error("LibTorch's profiler did not stop: " + first_line(e.what()));
    }
    if (!res) throw Error("LibTorch's profiler returned no result");
    // µs since t0 on this rank's clock = system µs - (t0_unix - skew) * 1e6
    const double base_us = (h.t0_unix - h.clock_skew_s) * 1e6;
    const int pid = h.rank + 1;
    nlohmann::json events = nlohmann::json::array();
    int64_t n = 0;
    for (const tap::KinetoEvent& e : res->events()) {
        nlohmann::json ev;
        const bool gpu = e.deviceType() == c10::DeviceType::CUDA;
        ev["name"] = e.name();
        ev["ts"] = std::round((static_cast<double>(e.startUs()) - base_us) * 1e3) / 1e3;
        ev["pid"] = pid;
        ev["tid"] = gpu ? static_cast<int64_t>(1000 + e.deviceIndex()) : static_cast<int64_t>(e.startThreadId());
        nlohmann::json args = nlohmann::json::object();
        if (e.nBytes() != 0 && e.durationUs() == 0) {  // an allocation (profile_memory)
            ev["ph"] = "i";
            ev["s"] = "t";
            ev["cat"] = "memory";
            args["bytes"] = e.nBytes();
        } else {
            ev["ph"] = "X";
            ev["dur"] = e.durationUs();
            ev["cat"] = gpu ? "kernel" : "cpu_op";
            if (e.hasShapes()) {
                nlohmann::json dims = nlohmann::json::array();
                for (const auto& s : e.shapes()) dims.push_back(s);
                args["Input Dims"] = std::move(dims);
            }
            if (e.hasTypes()) {
                nlohmann::json types = nlohmann::json::array();
                for (const auto& t : e.dtypes()) types.push_back(t);
                args["Input type"] = std::move(types);
            }
            if (e.sequenceNr() >= 0) args["Sequence number"] = e.sequenceNr();
        }
        args["step_first"] = h.first_step;
        ev["args"] = std::move(args);
        events.push_back(std::move(ev));
        ++n;
    }
    // Whole µs from startUs()/durationUs(): an operator may end up to 1 µs after the one it runs in,
    // which Perfetto drops; end it with its parent (trace_command.hpp).
    const int64_t shortened = nest_complete_events(events);
    nlohmann::json other;
    other["generator"] = "tagflow profile";
    other["rank"] = h.rank;
    other["id"] = h.id;
    other["first_step"] = h.first_step;
    other["last_step"] = h.last_step;
    other["ends_shortened"] = shortened;  // operators ended with their parent (≤ 1 µs shorter)
    other["time"] = "ts and dur in microseconds since t0_unix on this rank's clock (clock_offset not applied)";
    std::string o = other.dump();
    char t0[64];
    std::snprintf(t0, sizeof t0, ",\"t0_unix\":%.6f}", h.t0_unix);  // µs precision (dump() rounds to 17 digits)
    o.pop_back();                                                   // the closing brace
    o += t0;
    // traceEvents before otherData: Perfetto stops at the first top-level key it does not know.
    const std::string doc =
        "{\"displayTimeUnit\":\"ms\",\n\"traceEvents\":" + events.dump() + ",\n\"otherData\":" + o + "}\n";
    write_file_replace(path, doc);
    return n;
}

}  // namespace tagflow::profile
