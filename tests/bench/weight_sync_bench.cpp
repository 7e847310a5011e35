// SPDX-License-Identifier: Apache-2.0
// weight_sync_bench: GB/s of the train root -> receivers weight sync (train::WeightSync, dense or
// delta) per total weight size, against two baselines measured in the same run: one raw
// MPI_Bcast of the same bytes from one contiguous buffer, and a memcpy of the same bytes.
// Weights are Llama-shaped (embedding, per layer q/k/v/o + 3 MLP matrices + 2 norms, final norm,
// untied lm_head) or one flat tensor, separately allocated or (-O onebuf=1) views of one
// buffer. The root alternates between two weight sets A and B that
// differ exactly where the -O pattern says, so each iteration is a new version with that change
// and no mutation cost is timed. #wrong: every rank's weights vs the root's after a sync.
#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>

#include "bench_common.hpp"
#include "common/error.hpp"
#include "train/delta_sync_mpi.hpp"

using namespace tagflow;
using namespace tagflow::bench;

namespace {

struct Data {
    std::vector<at::Tensor> a, b, mine;  // root: the two versions; receivers: their weights
    std::vector<int64_t> sizes;          // numel per tensor
    std::unique_ptr<train::WeightSync> sync;
    int32_t version = 0;
    bool use_b = false;
    train::WeightSyncStats last;
    double frac = NAN;  // bytes / dense_bytes of the last timed sync
};

// Llama-like tensor sizes for `n` floats: d from n ~ 59 d^2 (4 layers, GQA k/v = d/4, d_ff =
// 11/4 d, vocab 8 d, untied lm_head); a last tensor takes the remainder. Tiny n: one tensor.
std::vector<int64_t> llama_sizes(int64_t n, int64_t* vocab_rows, int64_t* d_model, int layers) {
    int64_t d = static_cast<int64_t>(std::sqrt(static_cast<double>(n) / 59.0));
    std::vector<int64_t> s;
    *vocab_rows = 8 * d;
    *d_model = d;
    if (d < 4) return {n};
    int64_t ff = 11 * d / 4;
    s.push_back(8 * d * d);  // embedding
    for (int l = 0; l < layers; ++l) {
        s.push_back(d);                                                         // attention norm
        for (int64_t m : {d * d, d * d / 4, d * d / 4, d * d}) s.push_back(m);  // q k v o
        s.push_back(d);                                                         // mlp norm
        for (int k = 0; k < 3; ++k) s.push_back(d * ff);                        // gate up down
    }
    s.push_back(d);          // final norm
    s.push_back(8 * d * d);  // lm_head
    int64_t total = 0;
    for (int64_t x : s) total += x;
    if (total > n) return {n};
    if (total < n) s.push_back(n - total);
    return s;
}

void fill(std::vector<at::Tensor>& ts, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> nd(0.f, 0.02f);
    for (auto& t : ts) {
        float* p = t.data_ptr<float>();
        for (int64_t i = 0; i < t.numel(); ++i) p[i] = nd(rng);
    }
}

// B = A, then changes where the pattern says (all ranks compute the same).
void make_b(BenchState& s, Data& d) {
    const std::string pattern = s.args->opt("pattern", "random");
    for (size_t k = 0; k < d.a.size(); ++k) d.b[k].copy_(d.a[k]);
    std::mt19937_64 rng(99);
    if (pattern == "random") {
        double f = std::stod(s.args->opt("changed", "0.01"));
        if (!(f >= 0 && f <= 1)) throw ConfigError("-O changed must be a fraction in [0, 1]");
        std::bernoulli_distribution pick(f);
        for (auto& t : d.b) {
            float* p = t.data_ptr<float>();
            for (int64_t i = 0; i < t.numel(); ++i)
                if (pick(rng)) p[i] += 1e-3f;
        }
        return;
    }
    if (pattern != "llama") throw ConfigError("-O pattern=random|llama");
    // A GRPO step with AdamW (no weight decay) on a Llama: embedding rows of tokens in no batch
    // stay exactly unchanged, frozen layers never change, everything else changes.
    double rows = std::stod(s.args->opt("rows", "0.05"));
    double frozen = std::stod(s.args->opt("frozen", "0"));
    int layers = static_cast<int>(s.args->opt_int("layers", 4));
    int64_t vocab = 0, dm = 0;
    llama_sizes(static_cast<int64_t>(s.count), &vocab, &dm, layers);
    if (d.b.size() < 4) {  // too small for the layout: treat as one changed tensor
        d.b[0].add_(1e-3f);
        return;
    }
    std::bernoulli_distribution pick_row(rows);
    float* emb = d.b[0].data_ptr<float>();
    for (int64_t r = 0; r < vocab; ++r)
        if (pick_row(rng))
            for (int64_t c = 0; c < dm; ++c) emb[r * dm + c] += 1e-3f;
    const int per_layer = 9;
    int frozen_layers = static_cast<int>(frozen * layers + 0.5);
    for (size_t k = 1 + static_cast<size_t>(frozen_layers * per_layer); k < d.b.size(); ++k) d.b[k].add_(1e-3f);
}

void setup(BenchState& s) {
    Data& d = s.emplace<Data>();
    const std::string layout = s.args->opt("layout", "llama");
    int64_t vocab = 0, dm = 0;
    if (layout == "llama")
        d.sizes =
            llama_sizes(static_cast<int64_t>(s.count), &vocab, &dm, static_cast<int>(s.args->opt_int("layers", 4)));
    else if (layout == "flat") d.sizes = {static_cast<int64_t>(s.count)};
    else throw ConfigError("-O layout=llama|flat");
    const std::string mode = s.args->opt("mode", "dense");
    if (mode != "dense" && mode != "delta") throw ConfigError("-O mode=dense|delta");
    train::WeightSync::Options o;
    o.bucket_bytes = static_cast<size_t>(s.args->opt_int("bucket", 32 << 20));
    o.delta = mode == "delta";
    d.sync = std::make_unique<train::WeightSync>(o);
    auto make = [&] {
        std::vector<at::Tensor> ts;
        for (int64_t n : d.sizes) ts.push_back(at::empty({n}, at::kFloat));
        return ts;
    };
    const bool onebuf = s.args->opt_int("onebuf", 1) != 0;
    d.mine = make();
    if (onebuf) train::share_one_buffer(d.mine);
    if (s.rank == 0) {
        d.a = make();
        d.b = make();
        if (onebuf) {
            train::share_one_buffer(d.a);
            train::share_one_buffer(d.b);
        }
        fill(d.a, 7);
        make_b(s, d);
    } else {
        fill(d.mine, 1000 + static_cast<uint64_t>(s.rank));  // garbage until the first sync
    }
}

void run(BenchState& s) {
    Data& d = s.data<Data>();
    const std::vector<at::Tensor>& ts = s.rank == 0 ? (d.use_b ? d.b : d.a) : d.mine;
    d.last = d.sync->broadcast(ts, d.version++, s.comm, 0);
    d.use_b = !d.use_b;
}

void init(BenchState& s, int rep) {
    Data& d = s.data<Data>();
    if (rep == 1) d.frac = d.last.sent_fraction();  // before the checked sync
    // Dense: receivers start from garbage so the checked sync must move everything. Delta:
    // receivers keep what they hold (the protocol relies on it); the checked sync is a delta.
    if (rep == 1 && s.rank != 0 && !d.sync->options().delta) fill(d.mine, 5000 + static_cast<uint64_t>(s.rank));
}

int64_t check(BenchState& s) {
    Data& d = s.data<Data>();
    // The root's weights of the last sync (run() flipped use_b after it), by a plain broadcast.
    std::vector<float> want(s.count);
    if (s.rank == 0) train::FlatView(d.use_b ? d.a : d.b).gather(0, s.count, want.data());
    TAGFLOW_MPI_CHECK(MPI_Bcast(want.data(), static_cast<int>(s.count), MPI_FLOAT, 0, s.comm));
    std::vector<float> got(s.count);
    train::FlatView(s.rank == 0 ? (d.use_b ? d.a : d.b) : d.mine).gather(0, s.count, got.data());
    int64_t wrong = 0;
    for (size_t i = 0; i < s.count; ++i) wrong += std::memcmp(&want[i], &got[i], sizeof(float)) != 0;
    return wrong;
}

double reduced_max(double t, MPI_Comm comm) {
    double out = 0;
    TAGFLOW_MPI_CHECK(MPI_Allreduce(&t, &out, 1, MPI_DOUBLE, MPI_MAX, comm));
    return out;
}

// Baselines on the same bytes, same ranks, same iteration counts.
void extras(BenchState& s, double sec) {
    Data& d = s.data<Data>();
    const int iters = s.args->iters, warm = std::max(1, s.args->warmup);
    std::vector<float> buf(s.count, 1.f), dst(s.count, 0.f);
    auto bcast = [&] { TAGFLOW_MPI_CHECK(MPI_Bcast(buf.data(), static_cast<int>(s.count), MPI_FLOAT, 0, s.comm)); };
    for (int i = 0; i < warm; ++i) bcast();
    TAGFLOW_MPI_CHECK(MPI_Barrier(s.comm));
    double t0 = MPI_Wtime();
    for (int i = 0; i < iters; ++i) bcast();
    double raw = reduced_max((MPI_Wtime() - t0) / iters, s.comm);
    for (int i = 0; i < warm; ++i) std::memcpy(dst.data(), buf.data(), s.bytes);
    TAGFLOW_MPI_CHECK(MPI_Barrier(s.comm));
    t0 = MPI_Wtime();
    for (int i = 0; i < iters; ++i) {
        buf[static_cast<size_t>(i) % s.count] += 1.f;  // keep the copies from being elided
        std::memcpy(dst.data(), buf.data(), s.bytes);
    }
    double mc = reduced_max((MPI_Wtime() - t0) / iters, s.comm);
    auto gb = [&](double t) { return t > 0 ? static_cast<double>(s.bytes) / t / 1e9 : NAN; };
    double frac = std::isnan(d.frac) ? d.last.sent_fraction() : d.frac;  // same on every rank
    s.extra = {gb(raw), gb(mc), raw / sec, mc / sec, frac, static_cast<double>(d.sizes.size())};
}

BenchOp make_op() {
    BenchOp op;
    op.name = "weight_sync";
    op.description = "train root -> all weight sync (WeightSync dense|delta) vs raw MPI_Bcast and memcpy";
    op.type = "float";
    op.elem_size = sizeof(float);
    op.setup = setup;
    op.init = init;
    op.run = run;
    op.check = check;
    op.extra_columns = {"raw(GB/s)", "memcpy(GB/s)", "sync/raw", "sync/memcpy", "sent_frac", "tensors"};
    op.extras = extras;
    op.op_options = {"-O mode=dense|delta    WeightSync mode (default dense)",
                     "-O bucket=N            bucket bytes, K/M suffixes (default 32M, as tagflow train)",
                     "-O layout=llama|flat   Llama-shaped tensors or one flat tensor (default llama)",
                     "-O layers=N            layers of the llama layout (default 4)",
                     "-O onebuf=0|1          1: all tensors are views of one buffer (share_one_buffer, as tagflow "
                     "train) (default 1)",
                     "-O pattern=random|llama  what changes between versions (default random)",
                     "-O changed=F           random: fraction of weights changed per version (default 0.01)",
                     "-O rows=F              llama: fraction of embedding rows changed (default 0.05)",
                     "-O frozen=F            llama: fraction of layers frozen (default 0)"};
    return op;
}

}  // namespace

TAGFLOW_BENCH_MAIN(make_op)
