// SPDX-License-Identifier: Apache-2.0
// train_step_bench: tokens/s of one GRPO training step (forward, backward, bucketed gradient
// all-reduce across ranks, AdamW) per batch size, as tagflow's sync mode runs it. Baseline in the
// same run: this rank's fp32 GEMM rate; the ratio `util` = achieved model FLOP/s (6 x params x
// tokens) / GEMM FLOP/s. #wrong = non-finite losses + ranks whose weights differ after the step.
#include <ATen/ATen.h>
#include <torch/torch.h>

#include <cmath>
#include <cstring>

#include "bench_common.hpp"
#include "model/policy.hpp"
#include "sched/gemm_check.hpp"
#include "train/grpo.hpp"
#include "train/weight_sync_mpi.hpp"

using namespace tagflow;
using namespace tagflow::bench;

namespace {

struct Data {
    model::Policy policy{nullptr};
    std::unique_ptr<train::GrpoLearner> learner;
    std::vector<train::TrainSample> batch;
    double loss = 0, gemm_gflops = 0, params = 0;
    int64_t seq = 0;
};

void setup(BenchState& s) {
    Data& d = s.emplace<Data>();
    at::set_num_threads(1);
    model::PolicyConfig pc;
    pc.vocab = 13;
    pc.d_model = s.args->opt_int("d_model", 64);
    pc.n_layers = s.args->opt_int("layers", 2);
    pc.n_heads = 4;
    pc.d_ff = 4 * pc.d_model;
    d.seq = s.args->opt_int("seq", 16);
    pc.max_seq = d.seq;
    d.policy = model::Policy(pc, 1);
    d.params = static_cast<double>(d.policy->num_parameters());
    train::GrpoConfig gc;
    gc.micro_batch = 1 << 20;
    d.learner = std::make_unique<train::GrpoLearner>(d.policy, gc);
    d.gemm_gflops = sched::measure_gemm_gflops(0.2);
}

void init(BenchState& s, int rep) {
    Data& d = s.data<Data>();
    auto [first, n] = s.share(s.count);  // this rank's tokens
    size_t seqs = std::max<size_t>(1, n / static_cast<size_t>(d.seq));
    d.batch.clear();
    for (size_t i = 0; i < seqs; ++i) {
        train::TrainSample t;
        for (int64_t k = 0; k < d.seq; ++k)
            t.tokens.push_back(static_cast<int32_t>((first + i * 7 + static_cast<size_t>(k) * 3 + static_cast<size_t>(rep)) % 13));
        t.prompt_len = static_cast<int32_t>(d.seq / 2);
        t.old_logprobs.assign(static_cast<size_t>(d.seq - t.prompt_len), -2.5f);
        t.advantage = (i % 2) ? 1.f : -1.f;
        d.batch.push_back(std::move(t));
    }
}

void run(BenchState& s) {
    Data& d = s.data<Data>();
    double global = static_cast<double>(s.count);
    auto st = d.learner->accumulate(d.batch, global);
    train::allreduce_sum(d.learner->gradients(), MPI_COMM_WORLD, 4u << 20);
    d.learner->step();
    d.loss = st.loss;
}

int64_t check(BenchState& s) {
    Data& d = s.data<Data>();
    int64_t wrong = std::isfinite(d.loss) ? 0 : 1;
    // Every rank applied the same reduced gradients: weights must be identical everywhere.
    double sum = 0;
    for (auto& p : d.policy->parameters()) sum += p.data().sum().item<double>();
    double mx = sum, mn = sum;
    MPI_Allreduce(MPI_IN_PLACE, &mx, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &mn, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
    if (mx != mn && s.rank == 0) ++wrong;
    return wrong;
}

void extras(BenchState& s, double sec) {
    Data& d = s.data<Data>();
    double tok_s = static_cast<double>(s.count) / sec;
    double gflops = 6.0 * d.params * tok_s / 1e9 / s.nranks;  // per rank
    s.extra = {tok_s, gflops, d.gemm_gflops, gflops / d.gemm_gflops};
}

BenchOp make_op() {
    BenchOp op;
    op.name = "train_step";
    op.description = "one GRPO step (fwd+bwd+allreduce+AdamW), tokens/s; -O d_model= layers= seq=";
    op.type = "token";
    op.elem_size = 4;  // -b/-e are bytes: 4 bytes per token id
    op.setup = setup;
    op.init = init;
    op.run = run;
    op.check = check;
    op.extra_columns = {"tokens/s", "GFLOP/s/rk", "gemm/rk", "util"};
    op.extras = extras;
    return op;
}

}  // namespace

TAGFLOW_BENCH_MAIN(make_op)
