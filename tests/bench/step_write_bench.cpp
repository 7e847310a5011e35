// SPDX-License-Identifier: Apache-2.0
// step_write_bench: what one training step's run-file writes cost the writer — the rows the
// schedulers append after every step (io::RunFile: the step's samples with their per-token
// columns and text, /consumed, one /steps row, the step's /timeline spans) and the flush that
// makes them durable, into a real parallel-HDF5 run file. Run it on 1 rank for the async modes
// (the coordinator writes alone) and on the run's ranks for sync (every rank writes its own
// samples, collectively). "size" = the step's tokens over all ranks (4 B each); a sample is
// `-O prompt=7` prompt tokens + `-O len=50` response tokens (the simulator-vs-real workload's:
// lognormal responses of median 32, p99 10x, capped at 320, average 50.6), so samples per step =
// count / (prompt + len). Baseline in the same run: the flush
// alone of a file with nothing new (flush_ms); x_flush = the step's time / flush_ms.
// tests/bench/sim_calibrate.sh turns it into the simulator's step_io_s.
// #wrong: tables whose row counts did not grow by what the iteration appended.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "bench_common.hpp"
#include "common/error.hpp"
#include "io/run_file.hpp"

using namespace tagflow;
using namespace tagflow::bench;

namespace {

struct Data {
    std::string path;
    std::unique_ptr<io::RunFile> file;
    std::vector<io::SampleRecord> samples;
    std::vector<io::ConsumedRecord> consumed;
    std::vector<io::StepRecord> steps;  // rank 0 writes the step's row
    std::vector<io::SpanRecord> spans;
    int64_t total_samples = 0, total_tokens = 0, total_spans = 0;
    io::TableSizes before, after;
    int32_t step = 0;
    double flush_ms = 0;
};

void setup(BenchState& s) {
    Data& d = s.emplace<Data>();
    d.path = s.scratch_path("step_write_bench", "h5");
    io::RunAttributes attrs;
    attrs.config_json = "{}";
    attrs.tagflow_version = "step_write_bench";
    attrs.world_size = s.nranks;
    d.file = std::make_unique<io::RunFile>(io::RunFile::create(s.comm, d.path, attrs));
    const long prompt = s.args->opt_int("prompt", 7), len = s.args->opt_int("len", 50);
    if (prompt < 1 || len < 1) throw ConfigError("step_write_bench: -O prompt and -O len must be >= 1");
    const auto per = static_cast<size_t>(prompt + len);
    d.total_samples = static_cast<int64_t>(std::max<size_t>(1, s.count / per));
    const auto [first, n] = s.share(static_cast<size_t>(d.total_samples));
    for (size_t i = 0; i < n; ++i) {
        io::SampleRecord r;
        r.id = static_cast<int64_t>(first + i);
        r.group = r.id / 8;
        r.task = "longtail";
        r.reward = 0.5f;
        r.rank = s.rank;
        r.tokens.resize(per);
        r.logprobs.resize(per);
        r.versions.resize(per);
        r.loss_mask.resize(per);
        for (size_t k = 0; k < per; ++k) {
            const bool resp = static_cast<long>(k) >= prompt;
            r.tokens[k] = static_cast<int32_t>((r.id * 31 + static_cast<int64_t>(k)) % 14);
            r.logprobs[k] = resp ? -1.0f - 0.01f * static_cast<float>(k) : std::nanf("");
            r.versions[k] = resp ? 0 : -1;
            r.loss_mask[k] = resp ? 1 : 0;
        }
        r.prompt_text = "0 1 2 3 4 5 6";
        r.response_text = std::string(static_cast<size_t>(len) * 2, 'a');
        d.samples.push_back(std::move(r));
        d.consumed.push_back({static_cast<int64_t>(first + i), 0, 0.25f, 1.f});
    }
    if (s.rank == 0) d.steps.resize(1);
    for (int k = 0; k < 4; ++k) d.spans.push_back({s.rank, static_cast<io::SpanKind>(k % 2), 0.0, 0.0, 0});
    d.total_tokens = d.total_samples * static_cast<int64_t>(per);
    d.total_spans = 4 * static_cast<int64_t>(s.nranks);
    // The baseline, untimed by the harness: the flush alone, the file unchanged since the last one.
    d.file->flush();
    const int reps = 5;
    const auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < reps; ++r) d.file->flush();
    d.flush_ms = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps * 1e3;
}

void run(BenchState& s) {
    Data& d = s.data<Data>();
    d.before = d.file->sizes();
    for (auto& c : d.consumed) c.step = d.step;
    for (auto& r : d.steps) r.step = d.step;
    for (auto& sp : d.spans) sp.step = d.step;
    ++d.step;
    d.file->append_samples(d.samples);
    d.file->append_consumed(d.consumed);
    d.file->append_steps(d.steps);
    d.file->append_timeline(d.spans);
    d.file->flush();
    d.after = d.file->sizes();
}

int64_t check(BenchState& s) {
    Data& d = s.data<Data>();
    const io::TableSizes& a = d.after;
    const io::TableSizes& b = d.before;
    return (a.samples - b.samples != d.total_samples) + (a.tokens - b.tokens != d.total_tokens) +
           (a.consumed - b.consumed != d.total_samples) + (a.steps - b.steps != 1) +
           (a.timeline - b.timeline != d.total_spans);
}

void teardown(BenchState& s) {
    Data& d = s.data<Data>();
    d.file->close();
    if (s.rank == 0) unlink(d.path.c_str());
}

void extras(BenchState& s, double sec) {
    Data& d = s.data<Data>();
    s.extra = {static_cast<double>(d.total_samples), d.flush_ms, d.flush_ms > 0 ? sec * 1e3 / d.flush_ms : 0};
}

BenchOp make_op() {
    BenchOp op;
    op.name = "step_write";
    op.description = "one step's run-file rows (samples, /consumed, /steps, /timeline) + flush (size = tokens x 4 B)";
    op.type = "int32";
    op.elem_size = 4;
    op.setup = setup;
    op.run = run;
    op.check = check;
    op.teardown = teardown;
    op.extra_columns = {"samples", "flush_ms", "x_flush"};
    op.extras = extras;
    return op;
}

}  // namespace

TAGFLOW_BENCH_MAIN(make_op)
