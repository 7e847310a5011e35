// SPDX-License-Identifier: Apache-2.0
#include "profile/timeline.hpp"

#include <time.h>

#include <atomic>
#include <utility>

namespace tagflow::profile {

namespace {
// The test-only clock skew of this rank (clock_sync.hpp: TAGFLOW_TEST_CLOCK_SKEW_S), in seconds,
// and its drift (seconds gained per second since g_base, the system time it was set at); 0 in
// real runs.
std::atomic<double> g_skew{0.0}, g_rate{0.0}, g_base{0.0};

double system_now() {
    timespec ts{};
    clock_gettime(CLOCK_REALTIME, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double skew_at(double sys) {
    const double rate = g_rate.load(std::memory_order_relaxed);
    const double s = g_skew.load(std::memory_order_relaxed);
    return rate == 0 ? s : s + rate * (sys - g_base.load(std::memory_order_relaxed));
}
}  // namespace

void set_clock_skew(double seconds, double rate) {
    g_base.store(system_now(), std::memory_order_relaxed);
    g_skew.store(seconds, std::memory_order_relaxed);
    g_rate.store(rate, std::memory_order_relaxed);
}
double clock_skew() { return skew_at(system_now()); }

double unix_now() {
    const double sys = system_now();
    return sys + skew_at(sys);
}

void Timeline::add(io::SpanKind kind, double t_start, double t_end, int32_t step) {
    io::SpanRecord s;
    s.rank = rank_;
    s.kind = kind;
    s.t_start = t_start;
    s.t_end = t_end;
    s.step = step;
    spans_.push_back(s);
}

double Timeline::total(io::SpanKind kind) const {
    double t = 0;
    for (const auto& s : spans_)
        if (s.kind == kind) t += s.t_end - s.t_start;
    return t;
}

std::vector<io::SpanRecord> Timeline::take() { return std::exchange(spans_, {}); }

}  // namespace tagflow::profile
