// SPDX-License-Identifier: Apache-2.0
// train_step_bench: tokens/s of one actor training step as `tagflow train` runs it — the Llama
// policy in a train::TorchEngine under the ActorWorker (micro-batched forward/backward of the PPO
// clipped loss, bucketed gradient all-reduce over the ranks, clipped AdamW) — per batch size, in
// fp32 or bf16 autocast (-O dtype=). Baseline in the same run: this rank's fp32 GEMM rate; the
// ratio `util` = achieved model FLOP/s (6 x params x tokens) / GEMM FLOP/s.
// -O lengths=lognormal draws `longtail`-like response lengths (p99/median 10) and -O pack=on trains
// them packed (train/engine.hpp); then the padded step on the same batch is timed in the same run
// (the baseline, after the timed loop) and `x_pad` = packed real tokens/s / padded real tokens/s.
// -O ckpt=on trains with activation checkpointing (model/layer_checkpoint.hpp); after the loop the
// same step without it (the baseline, same starting weights) and both steps' peak resident memory
// above the memory before the step (the kernel's high-water mark, reset through
// /proc/self/clear_refs; for this measurement, after the timings, large blocks are given back to
// the kernel when freed): base_MiB, ckpt_MiB, x_mem = ckpt / base and x_time = ckpt step time /
// base step time.
// #wrong = non-finite losses + ranks whose weights differ after the step.
#include <ATen/ATen.h>
#include <malloc.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>

#include "bench_common.hpp"
#include "common/error.hpp"
#include "common/malloc_tuning.hpp"
#include "model/llama.hpp"
#include "cmd/gemm_check.hpp"
#include "sched/sched_policy.hpp"
#include "train/collectives_mpi.hpp"
#include "train/workers.hpp"

using namespace tagflow;
using namespace tagflow::bench;

namespace {

struct Data {
    model::LlamaModel policy{nullptr};
    std::unique_ptr<train::ActorWorker> actor;
    std::unique_ptr<train::ActorWorker> padded;  // -O pack=on: the baseline (same weights at the start)
    std::unique_ptr<train::ActorWorker> plain;   // -O ckpt=on: the baseline without checkpointing
    std::unique_ptr<train::MpiCollectives> comm;
    std::vector<train::TrainSeq> batch;
    double loss = 0, gemm_gflops = 0, params = 0;
    int64_t seq = 0, vocab = 0;
    bool lognormal = false;
    int64_t median = 32, prompt = 16;
    double ratio = 10;           // -O ratio=: p99 / median of the lognormal responses
    double real = 0, slots = 0;  // all ranks' tokens and token slots of the last timed step
};

// A field of /proc/self/status in KiB ("VmRSS:", "VmHWM:").
long status_kib(const std::string& key) {
    std::ifstream f("/proc/self/status");
    for (std::string line; std::getline(f, line);)
        if (line.compare(0, key.size(), key) == 0) return std::strtol(line.c_str() + key.size(), nullptr, 10);
    throw Error("/proc/self/status has no " + key);
}

// Peak resident memory while fn() runs, above the resident memory before it (MiB), the largest
// over the ranks.
double peak_mib(const std::function<void()>& fn) {
    malloc_trim(0);
    {
        std::ofstream clear("/proc/self/clear_refs");
        clear << "5";  // resets VmHWM to the current VmRSS
    }
    const long before = status_kib("VmRSS:");
    if (status_kib("VmHWM:") > before + 1024)
        throw Error("cannot reset the peak resident memory (/proc/self/clear_refs): no memory figures");
    fn();
    double mib = static_cast<double>(status_kib("VmHWM:") - before) / 1024.0;
    MPI_Allreduce(MPI_IN_PLACE, &mib, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return mib;
}

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
    d.lognormal = s.args->opt("lengths", "fixed") == "lognormal";
    if (!d.lognormal && s.args->opt("lengths", "fixed") != "fixed") throw ConfigError("-O lengths=fixed|lognormal");
    d.seq = s.args->opt_int("seq", d.lognormal ? 512 : 32);
    d.median = s.args->opt_int("median", 32);
    d.prompt = s.args->opt_int("prompt", 16);
    const std::string ratio = s.args->opt("ratio", "10");
    char* ratio_end = nullptr;
    d.ratio = std::strtod(ratio.c_str(), &ratio_end);
    if (ratio_end == ratio.c_str() || *ratio_end != '\0' || !(d.ratio >= 1))
        throw ConfigError("-O ratio=" + ratio + ": expected a number >= 1 (p99 / median)");
    if (d.lognormal && (d.prompt < 1 || d.median < 1 || d.prompt + 1 >= d.seq))
        throw ConfigError("-O lengths=lognormal needs prompt >= 1, median >= 1 and prompt + 1 < seq");
    const std::string pack = s.args->opt("pack", "off");
    if (pack != "on" && pack != "off") throw ConfigError("-O pack=on|off");
    const std::string ckpt = s.args->opt("ckpt", "off");
    if (ckpt != "on" && ckpt != "off") throw ConfigError("-O ckpt=on|off");
    c.max_position_embeddings = d.seq;
    c.abs_positions = s.args->opt_int("abs_positions", 0) != 0;
    d.policy = model::LlamaModel(c, 1);
    for (const auto& p : d.policy->parameters()) d.params += static_cast<double>(p.numel());
    train::TrainEngineConfig ec;
    ec.optim.lr = 1e-4;
    ec.micro_batch = s.args->opt_int("micro_batch", 1 << 20);
    ec.bf16 = dtype == "bf16";
    ec.micro_batch_tokens = s.args->opt_int("micro_tokens", 0);
    ec.pack = pack == "on";
    train::ActorConfig ac;
    const std::string ent = s.args->opt("entropy", "0");
    char* end = nullptr;
    ac.entropy_coef = std::strtod(ent.c_str(), &end);
    if (end == ent.c_str() || *end != '\0' || !(ac.entropy_coef >= 0))
        throw ConfigError("-O entropy=" + ent + ": expected a number >= 0");
    if (ckpt == "on") {
        d.plain = std::make_unique<train::ActorWorker>(
            train::make_engine(train::policy_handle(train::clone_llama(d.policy)), ec), ac);
        d.policy->model->activation_checkpointing = true;
    }
    d.actor = std::make_unique<train::ActorWorker>(train::make_engine(train::policy_handle(d.policy), ec), ac);
    if (ec.pack) {
        train::TrainEngineConfig pc = ec;
        pc.pack = false;
        pc.micro_batch_tokens = 0;
        d.padded = std::make_unique<train::ActorWorker>(
            train::make_engine(train::policy_handle(train::clone_llama(d.policy)), pc), ac);
    }
    d.comm = std::make_unique<train::MpiCollectives>(MPI_COMM_WORLD, size_t{32} << 20);
    d.gemm_gflops = cmd::measure_gemm_gflops(0.2);
}

void init(BenchState& s, int rep) {
    Data& d = s.data<Data>();
    auto [first, n] = s.share(s.count);  // this rank's tokens
    d.batch.clear();
    if (d.lognormal) {  // prompt + lognormal response (p99/median 10, capped at seq) until n tokens;
        // the same lengths at every repetition (the check run and the baseline train the timed batch)
        size_t total = 0;
        for (int64_t id = static_cast<int64_t>(first); total < std::max<size_t>(n, 1); ++id) {
            const int32_t r = sched::sched_policy::lognormal_length(static_cast<double>(d.median), d.ratio,
                                                                    static_cast<double>(d.seq - d.prompt), 17, id);
            std::vector<int32_t> prompt, response;
            for (int64_t k = 0; k < d.prompt; ++k) prompt.push_back(static_cast<int32_t>((id * 7 + k * 3) % d.vocab));
            for (int32_t k = 0; k < r; ++k) response.push_back(static_cast<int32_t>((id * 5 + k * 11) % d.vocab));
            train::TrainSeq t = train::make_train_seq(prompt, response, std::vector<float>(response.size(), -2.5f));
            t.advantages.assign(1, (id % 2) ? 1.f : -1.f);
            total += t.tokens.size();
            d.batch.push_back(std::move(t));
        }
        return;
    }
    size_t seqs = std::max<size_t>(1, n / static_cast<size_t>(d.seq));
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
    const train::ActorStats st = d.actor->update(d.batch, d.comm.get());
    d.loss = st.loss;
    d.real = static_cast<double>(st.real_tokens);  // the whole group's
    d.slots = static_cast<double>(st.token_slots);
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
    // Real tokens/s: input slots holding a token (the last target of each sequence is not one).
    const double real_s = d.real / sec, fill = d.slots > 0 ? d.real / d.slots : 0.0;
    double pad_s = 0;
    if (d.padded) {  // the baseline: the padded step on the same batch, same number of repetitions
        const long reps = std::max<long>(1, s.args->opt_int("base_reps", 2));
        d.padded->update(d.batch, d.comm.get());  // warm-up
        MPI_Barrier(MPI_COMM_WORLD);
        const double t0 = MPI_Wtime();
        double real = 0;
        for (long i = 0; i < reps; ++i) real = static_cast<double>(d.padded->update(d.batch, d.comm.get()).real_tokens);
        double dt = (MPI_Wtime() - t0) / reps;
        MPI_Allreduce(MPI_IN_PLACE, &dt, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        pad_s = real / dt;
    }
    double base_mib = 0, ckpt_mib = 0, x_time = 0;
    // The batch's mean sequence length (prompt + response tokens), over all ranks' sequences: to
    // set a lognormal batch beside an equal-length one of the same mean (-O ratio=1).
    double len[2] = {0, static_cast<double>(d.batch.size())};
    for (const train::TrainSeq& t : d.batch) len[0] += static_cast<double>(t.tokens.size());
    MPI_Allreduce(MPI_IN_PLACE, len, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    if (d.plain) {  // the baseline: the same step without checkpointing; then both steps' peaks
        const long reps = std::max<long>(1, s.args->opt_int("base_reps", 2));
        d.plain->update(d.batch, d.comm.get());  // warm-up: its optimiser state exists before the peaks
        MPI_Barrier(MPI_COMM_WORLD);
        const double t0 = MPI_Wtime();
        for (long i = 0; i < reps; ++i) d.plain->update(d.batch, d.comm.get());
        double dt = (MPI_Wtime() - t0) / reps;
        MPI_Allreduce(MPI_IN_PLACE, &dt, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        x_time = sec / dt;  // sec: the checkpointed step's time in the timed loop
        // For the peaks, freed tensors go back to the kernel at once, so resident memory follows
        // what the step holds: blocks over 256 KiB are mmapped again (tagflow's tuning,
        // common/malloc_tuning.hpp, keeps them in the heap for speed, as in the timings above)
        // with a fixed threshold, and the heap is trimmed.
        mallopt(M_MMAP_MAX, 1 << 20);
        mallopt(M_MMAP_THRESHOLD, 256 * 1024);
        mallopt(M_TRIM_THRESHOLD, 1 << 20);
        base_mib = peak_mib([&] { d.plain->update(d.batch, d.comm.get()); });
        ckpt_mib = peak_mib([&] { d.actor->update(d.batch, d.comm.get()); });
        keep_freed_memory();  // back to tagflow's setting: the next size's timings run as tagflow does
    }
    s.extra = {tok_s,
               gflops,
               d.gemm_gflops,
               gflops / d.gemm_gflops,
               real_s,
               fill,
               pad_s,
               pad_s > 0 ? real_s / pad_s : 0,
               base_mib,
               ckpt_mib,
               base_mib > 0 ? ckpt_mib / base_mib : 0,
               x_time,
               len[1] > 0 ? len[0] / len[1] : 0};
}

BenchOp make_op() {
    BenchOp op;
    op.name = "train_step";
    op.description =
        "one actor step of the Llama policy (fwd+bwd+allreduce+AdamW), tokens/s; "
        "-O dtype=fp32|bf16 d_model= layers= heads= kv_heads= d_ff= vocab= seq= micro_batch= entropy= abs_positions= "
        "lengths=fixed|lognormal median= ratio= prompt= pack=on|off micro_tokens= base_reps= ckpt=on|off";
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
        "-O abs_positions=0|1   learned absolute positions beside RoPE (default 0; tagflow train's model: 1)",
        "-O lengths=lognormal   prompt= tokens + a response of lognormal length (median=, p99/median ratio=, capped at",
        "                       seq - prompt; defaults 16, 32, seq 512) until the rank's share of tokens",
        "-O pack=on             packed micro-batches (micro_tokens= slots each, 0 = all rows); the padded step on",
        "                       the same batch is timed after the loop (base_reps=, default 2): pad_real/s, x_pad",
        "-O ckpt=on             activation checkpointing; the step without it is timed after the loop (base_reps=)",
        "                       and both steps' peak memory measured: base_MiB, ckpt_MiB, x_mem, x_time",
        "-O ratio=R             lengths=lognormal: p99 / median of the responses (default 10)",
        "seq_len (column)       the batch's mean tokens per sequence (prompt + response)"};
    op.extra_columns = {"tokens/s", "GFLOP/s/rk", "gemm/rk",  "util",  "real/s", "fill",   "pad_real/s",
                        "x_pad",    "base_MiB",   "ckpt_MiB", "x_mem", "x_time", "seq_len"};
    op.extras = extras;
    return op;
}

}  // namespace

TAGFLOW_BENCH_MAIN(make_op)
