// SPDX-License-Identifier: Apache-2.0
// timeline_bench: what recording the timeline costs — per span, the scheduler's profile::Span
// (two clock reads and a push) plus the collective append of the rows to /timeline of a real
// run file (io::RunFile::append_timeline, parallel HDF5, as the schedulers write them at every
// step). "size" = spans per iteration (all ranks; 32 B a row). Baseline in the same run: one
// read of the run clock (profile::unix_now), the floor of any span. Columns: ns/span (record +
// write, per rank), record_ns (recording alone), clock_ns, x_clock = ns/span / clock_ns.
// tests/bench/timeline_cost.sh multiplies ns/span by the spans/s of a real run.
// #wrong: spans whose row does not come back from take() as recorded (kind, order, t_start <=
// t_end, no overlap with the previous one).
#include <unistd.h>

#include <chrono>
#include <memory>
#include <cstdio>
#include <string>
#include <vector>

#include "bench_common.hpp"
#include "io/run_file.hpp"
#include "profile/timeline.hpp"

using namespace tagflow;
using namespace tagflow::bench;

namespace {

constexpr io::SpanKind kKinds[] = {io::SpanKind::kRollout, io::SpanKind::kIdle, io::SpanKind::kTrain,
                                   io::SpanKind::kWeightSync};

struct Data {
    std::string path;
    profile::Clock clock;
    std::unique_ptr<profile::Timeline> tl;
    std::unique_ptr<io::RunFile> file;
    size_t mine = 0;  // spans this rank records per iteration
    std::vector<io::SpanRecord> last;
    double record_ns = 0, clock_ns = 0;
};

void record(Data& d, int32_t step) {
    for (size_t i = 0; i < d.mine; ++i) profile::Span sp(*d.tl, kKinds[i % 4], step);
}

void setup(BenchState& s) {
    Data& d = s.emplace<Data>();
    d.path = s.scratch_path("timeline_bench", "h5");
    io::RunAttributes attrs;
    attrs.config_json = "{}";
    attrs.tagflow_version = "timeline_bench";
    attrs.world_size = s.nranks;
    attrs.t0_unix = d.clock.t0_unix();
    d.file = std::make_unique<io::RunFile>(io::RunFile::create(s.comm, d.path, attrs));
    d.tl = std::make_unique<profile::Timeline>(d.clock, s.rank);
    d.mine = s.share(s.count).second;
    // The parts alone, untimed by the harness: recording without writing, and the clock.
    const int reps = 20;
    auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < reps; ++r) {
        record(d, r);
        d.tl->take();
    }
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    d.record_ns = d.mine ? sec / (reps * static_cast<double>(d.mine)) * 1e9 : 0;
    const int clocks = 100000;
    volatile double sink = 0;
    t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < clocks; ++i) sink = sink + profile::unix_now();
    d.clock_ns = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / clocks * 1e9;
}

void run(BenchState& s) {
    Data& d = s.data<Data>();
    record(d, 1);
    d.last = d.tl->take();
    d.file->append_timeline(d.last);
}

int64_t check(BenchState& s) {
    Data& d = s.data<Data>();
    int64_t wrong = d.last.size() == d.mine ? 0 : 1;
    for (size_t i = 0; i < d.last.size(); ++i) {
        const io::SpanRecord& r = d.last[i];
        if (r.kind != kKinds[i % 4] || r.rank != s.rank || r.t_start > r.t_end ||
            (i > 0 && r.t_start < d.last[i - 1].t_end))
            ++wrong;
    }
    return wrong;
}

void teardown(BenchState& s) {
    Data& d = s.data<Data>();
    d.file->close();
    if (s.rank == 0) unlink(d.path.c_str());
}

void extras(BenchState& s, double sec) {
    Data& d = s.data<Data>();
    const double per_span = d.mine ? sec / static_cast<double>(d.mine) * 1e9 : 0;
    s.extra = {per_span, d.record_ns, d.clock_ns, d.clock_ns > 0 ? per_span / d.clock_ns : 0};
}

BenchOp make_op() {
    BenchOp op;
    op.name = "timeline";
    op.description = "timeline recording: profile::Span + collective append to /timeline (size = spans x 32 B)";
    op.type = "span";
    op.elem_size = 32;
    op.setup = setup;
    op.run = run;
    op.check = check;
    op.teardown = teardown;
    op.extra_columns = {"ns/span", "record_ns", "clock_ns", "x_clock"};
    op.extras = extras;
    return op;
}

}  // namespace

TAGFLOW_BENCH_MAIN(make_op)
