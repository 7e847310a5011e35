// SPDX-License-Identifier: Apache-2.0
// train_step_bench: tokens/s of one actor training step as `tagflow train` runs it — the Llama
// policy in a train::TorchEngine under the ActorWorker (micro-batched forward/backward of the PPO
// clipped loss, bucketed gradient all-reduce over the ranks, clipped AdamW) — per batch size, in
// fp32 or bf16 autocast (-O dtype=). Baseline in the same run: this rank's fp32 GEMM rate; the
// ratio `util` = achieved model FLOP/s (6 x params x tokens) / GEMM FLOP/s.
// #wrong = non-finite losses + ranks whose weights differ after the step.
#include <ATen/ATen.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdlib>
#include <cstring>

#include "bench_common.hpp"
#include "common/error.hpp"
#include "model/llama.hpp"
#include "cmd/gemm_check.hpp"
#include "train/collectives_mpi.hpp"
#include "train/workers.hpp"

using namespace tagflow;
using namespace tagflow::bench;

namespace {

struct Data {
    model::LlamaModel policy{nullptr};
    std::unique_ptr<train::ActorWorker> actor;
    std::unique_ptr<train::MpiCollectives> comm;
    std::vector<train::TrainSeq> batch;
    double loss = 0, gemm_gflops = 0, params = 0;
    int64_t seq = 0, vocab = 0;
};

void setup(BenchState& s) {
    Data& d = s.emplace<Data>();
    at::set_num_threads(1);
    const std::string dtype = s.args->opt("dtype", "fp32");
    if (dtype != "fp32" && dtype != "bf16") throw ConfigError("-O dtype=fp32|bf16");
    model::HfConfig c;
    c.model_type = "llama";
    c.hidden_size = s.args->opt_int("d_model", 128);
    c.num_hidden_layers = s.args->opt_int("layers", 2);
    c.num_attention_heads = s.args->opt_int("heads", 4);
    c.num_key_value_heads = s.args->opt_int("kv_heads", 2);
    c.head_dim = c.hidden_size / c.num_attention_heads;
    c.intermediate_size = s.args->opt_int("d_ff", 2 * c.hidden_size);
    d.vocab = c.vocab_size = s.args->opt_int("vocab", 64);
    d.seq = s.args->opt_int("seq", 32);
    c.max_position_embeddings = d.seq;
    c.abs_positions = s.args->opt_int("abs_positions", 0) != 0;
    d.policy = model::LlamaModel(c, 1);
    for (const auto& p : d.policy->parameters()) d.params += static_cast<double>(p.numel());
    train::TrainEngineConfig ec;
    ec.optim.lr = 1e-4;
    ec.micro_batch = s.args->opt_int("micro_batch", 1 << 20);
    ec.bf16 = dtype == "bf16";
    train::ActorConfig ac;
    const std::string ent = s.args->opt("entropy", "0");
    char* end = nullptr;
    ac.entropy_coef = std::strtod(ent.c_str(), &end);
    if (end == ent.c_str() || *end != '\0' || !(ac.entropy_coef >= 0))
        throw ConfigError("-O entropy=" + ent + ": expected a number >= 0");
    d.actor = std::make_unique<train::ActorWorker>(train::make_engine(train::policy_handle(d.policy), ec), ac);
    d.comm = std::make_unique<train::MpiCollectives>(MPI_COMM_WORLD, size_t{32} << 20);
    d.gemm_gflops = cmd::measure_gemm_gflops(0.2);
}

void init(BenchState& s, int rep) {
    Data& d = s.data<Data>();
    auto [first, n] = s.share(s.count);  // this rank's tokens
    size_t seqs = std::max<size_t>(1, n / static_cast<size_t>(d.seq));
    d.batch.clear();
    for (size_t i = 0; i < seqs; ++i) {
        std::vector<int32_t> tokens;
        for (int64_t k = 0; k < d.seq; ++k)
            tokens.push_back(
                static_cast<int32_t>((first + i * 7 + static_cast<size_t>(k) * 3 + static_cast<size_t>(rep)) %
                                     static_cast<size_t>(d.vocab)));
        const int32_t prompt_len = static_cast<int32_t>(d.seq / 2);
        std::vector<int32_t> prompt(tokens.begin(), tokens.begin() + prompt_len);
        std::vector<int32_t> response(tokens.begin() + prompt_len, tokens.end());
        train::TrainSeq t = train::make_train_seq(prompt, response, std::vector<float>(response.size(), -2.5f));
        t.advantages.assign(1, (i % 2) ? 1.f : -1.f);
        d.batch.push_back(std::move(t));
    }
}

void run(BenchState& s) {
    Data& d = s.data<Data>();
    d.loss = d.actor->update(d.batch, d.comm.get()).loss;
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
    op.description =
        "one actor step of the Llama policy (fwd+bwd+allreduce+AdamW), tokens/s; "
        "-O dtype=fp32|bf16 d_model= layers= heads= kv_heads= d_ff= vocab= seq= micro_batch= entropy= abs_positions=";
    op.type = "token";
    op.elem_size = 4;  // -b/-e are bytes: 4 bytes per token id
    op.setup = setup;
    op.init = init;
    op.run = run;
    op.check = check;
    op.op_options = {
        "-O dtype=fp32|bf16     bf16: autocast forward/backward, fp32 master weights (default fp32)",
        "-O d_model=N layers=N heads=N kv_heads=N d_ff=N vocab=N   model (default 128/2/4/2/256/64)",
        "-O seq=N               tokens per sequence, half prompt and half response (default 32)",
        "-O micro_batch=N       sequences per forward/backward (default: all of the rank's share)",
        "-O entropy=C           entropy bonus coefficient (default 0; tagflow train's default is 0.01)",
        "-O abs_positions=0|1   learned absolute positions beside RoPE (default 0; tagflow train's model: 1)"};
    op.extra_columns = {"tokens/s", "GFLOP/s/rk", "gemm/rk", "util"};
    op.extras = extras;
    return op;
}

}  // namespace

TAGFLOW_BENCH_MAIN(make_op)
