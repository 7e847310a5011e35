// SPDX-License-Identifier: Apache-2.0
// timeline: a common run clock and the per-rank span recorder behind /timeline.
// t = seconds since the run's t0 (wall clock of rank 0 at start, broadcast to every rank).
// Does not write anything: the scheduler hands take() to io::RunFile::append_timeline.
#pragma once
#include <cstdint>
#include <vector>

#include "health/status.hpp"
#include "io/run_file.hpp"
#include "profile/on_demand.hpp"

namespace tagflow::profile {

/// Wall-clock seconds since the Unix epoch (CLOCK_REALTIME), plus the test-only skew (and drift)
/// that clock_sync.hpp's init_test_clock_skew() may set (0 in real runs).
double unix_now();

/// unix_now() minus the system clock at this moment: the test-only skew (0 in real runs).
double clock_skew();

class Clock {
public:
    explicit Clock(double t0_unix = unix_now()) : t0_unix_(t0_unix) {}
    double t0_unix() const { return t0_unix_; }
    /// Seconds since t0.
    double now() const { return unix_now() - t0_unix_; }

private:
    double t0_unix_;
};

class Timeline {
public:
    Timeline(const Clock& clock, int rank) : clock_(clock), rank_(rank) {}
    void add(io::SpanKind kind, double t_start, double t_end, int32_t step);
    /// Total seconds of spans of `kind` recorded since the last take().
    double total(io::SpanKind kind) const;
    /// Returns and clears the spans recorded so far.
    std::vector<io::SpanRecord> take();
    const Clock& clock() const { return clock_; }

private:
    const Clock& clock_;
    int rank_;
    std::vector<io::SpanRecord> spans_;
};

/// Records one span from construction to destruction (or to end()). The first span of a new
/// step is where on-demand profiling looks for a request and starts or stops (note_step, before
/// the span's start is read: a profile being written lands between spans, not in one).
class Span {
public:
    Span(Timeline& tl, io::SpanKind kind, int32_t step)
        : tl_(tl), kind_(kind), step_(step), t0_((note_step(step), tl.clock().now())) {
        health::status_board().set_role(static_cast<int>(kind), step);  // live status
    }
    ~Span() { end(); }
    Span(const Span&) = delete;
    Span& operator=(const Span&) = delete;
    /// Ends the piece so far now and goes on as a span of `kind` (same step) from now; returns
    /// the ended piece's length in seconds (0 after end()). Pieces of length 0 are not recorded.
    double switch_to(io::SpanKind kind) {
        if (done_) return 0.0;
        const double t1 = tl_.clock().now();
        if (t1 > t0_) tl_.add(kind_, t0_, t1, step_);
        const double d = t1 - t0_;
        kind_ = kind;
        t0_ = t1;
        health::status_board().set_role(static_cast<int>(kind), step_);
        return d;
    }
    /// Ends the span now; returns its length in seconds.
    double end() {
        if (done_) return 0.0;
        done_ = true;
        double t1 = tl_.clock().now();
        tl_.add(kind_, t0_, t1, step_);
        return t1 - t0_;
    }

private:
    Timeline& tl_;
    io::SpanKind kind_;
    int32_t step_;
    double t0_;
    bool done_ = false;
};

}  // namespace tagflow::profile
