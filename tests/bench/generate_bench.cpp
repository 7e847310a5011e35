// SPDX-License-Identifier: Apache-2.0
// generate_bench: tokens/s of the rollout engine (rollout::InferenceEngine, continuous batching over
// LlamaSlotDecoder) per batch size ("size" = batch = requests in flight; -b 1 -e 256 -f 4).
// Each timed iteration generates `new` greedy tokens for `batch` prompts of `prompt` tokens
// (prefill included). Baselines in the same run: (a) generate_ref.py, a plain PyTorch eager loop
// with a KV cache on the same safetensors checkpoint and thread count (column py/s, ratio
// `x_py`); (b) this process's fp32 GEMM rate (512x512), against which the decode's model FLOP/s
// (2 x matmul params + attention, per token) gives `util`. #wrong: tokens that differ from the
// Python loop where its top-2 logit gap is >= 1e-3 (a smaller gap is a legitimate float tie),
// plus logprobs that differ by > 1e-3. One rank only: the engine is per rank.
// -O temperature=T (> 0, with -O py=0): samples as `tagflow train` does (temperature T, a seed
// per request) instead of greedy; sim_calibrate.sh measures the decode step that way.
#include <ATen/Parallel.h>
#include <dlfcn.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "bench_common.hpp"
#include "common/error.hpp"
#include "model/llama.hpp"
#include "rollout/engine.hpp"
#include "cmd/gemm_check.hpp"

#ifndef TAGFLOW_BENCH_SOURCE_DIR
#define TAGFLOW_BENCH_SOURCE_DIR "tests/bench"
#endif

using namespace tagflow;
using namespace tagflow::bench;

namespace {

struct Data {
    model::LlamaModel model{nullptr};
    std::unique_ptr<rollout::InferenceEngine> engine;
    std::vector<std::vector<int32_t>> prompts;
    std::vector<rollout::GenResult> res;
    nlohmann::json ref;
    double py_tok_s = NAN, py_best = NAN, gemm = 0, flops_per_request = 0;
    double best_sec = 1e30;  ///< fastest run() of this size
    int32_t new_tokens = 0;
    double temperature = 0;  ///< 0 = greedy
};

model::HfConfig bench_config(const BenchArgs& a, int64_t positions) {
    model::HfConfig c;
    c.model_type = "llama";
    c.hidden_size = a.opt_int("d_model", 128);
    c.num_hidden_layers = a.opt_int("layers", 4);
    c.num_attention_heads = a.opt_int("heads", 4);
    c.num_key_value_heads = a.opt_int("kv_heads", 2);
    c.head_dim = c.hidden_size / c.num_attention_heads;
    c.intermediate_size = a.opt_int("ffn", 3 * c.hidden_size);
    c.vocab_size = a.opt_int("vocab", 512);
    c.max_position_embeddings = positions;
    c.abs_positions = a.opt_int("abs_positions", 0) != 0;  // tagflow train's size-built models have them
    c.rope_theta = 10000.0;
    c.rms_norm_eps = 1e-5;
    return c;
}

void setup(BenchState& s) {
    if (s.nranks != 1) throw ConfigError("generate_bench measures one rank's engine: run it with 1 rank");
    Data& d = s.emplace<Data>();
    const BenchArgs& a = *s.args;
    const int threads = static_cast<int>(a.opt_int("threads", 1));
    at::set_num_threads(threads);
    // OpenBLAS (libblas.so.3 here) keeps its own thread pool, sized to the cores unless
    // OPENBLAS_NUM_THREADS is set; at::set_num_threads does not touch it. Pin it to `threads`
    // on both sides (2 BLAS threads on a busy 2-core VM made batch-64 decode ~1.6x slower).
    using SetThreads = void(int);
    if (auto* f = reinterpret_cast<SetThreads*>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) f(threads);
    const int64_t P = a.opt_int("prompt", 16);
    d.new_tokens = static_cast<int32_t>(a.opt_int("new", 32));
    const std::string temp = a.opt("temperature", "0");
    char* end = nullptr;
    d.temperature = std::strtod(temp.c_str(), &end);
    if (end == temp.c_str() || *end != '\0' || !(d.temperature >= 0) || d.temperature > 100)
        throw ConfigError("-O temperature=" + temp + ": expected a number in [0, 100] (0 = greedy)");
    if (d.temperature > 0 && a.opt_int("py", 1) != 0)
        throw ConfigError("-O temperature=" + temp +
                          ": sampled tokens cannot be checked against the greedy Python loop; add -O py=0");
    const auto B = static_cast<int64_t>(s.count);
    const model::HfConfig c = bench_config(a, P + d.new_tokens + 8);
    d.model = model::LlamaModel(c, 0);
    d.model->reset_parameters(1234, std::atof(a.opt("std", "0.1").c_str()));
    const std::string dir = a.dir + "/generate_ckpt";
    d.model->save_pretrained(dir);
    for (int64_t b = 0; b < B; ++b) {
        std::vector<int32_t> p;
        for (int64_t t = 0; t < P; ++t) p.push_back(static_cast<int32_t>((7 * b + 13 * t + 3) % c.vocab_size));
        d.prompts.push_back(p);
    }
    rollout::InferenceConfig ec;
    ec.max_batch = B;
    ec.bf16 = a.opt_int("bf16", 0) != 0;
    d.engine = std::make_unique<rollout::InferenceEngine>(d.model, ec);

    // Model FLOPs per request and iteration: every matmul weight twice (multiply-add) for each
    // token that passes through the model (the prompt, then each fed-back token), lm_head for
    // each sampled token, QK^T and PV over the causal context (prefill and decode).
    const double H = static_cast<double>(c.num_attention_heads), KV = static_cast<double>(c.num_key_value_heads);
    const double D = static_cast<double>(c.head_dim), dm = static_cast<double>(c.hidden_size);
    const double Lf = static_cast<double>(c.num_hidden_layers), Pf = static_cast<double>(P), Nf = d.new_tokens;
    const double per_layer = dm * (H + 2 * KV) * D + H * D * dm + 3 * dm * static_cast<double>(c.intermediate_size);
    const double ctx_sum = Pf * (Pf + 1) / 2 + (Nf - 1) * (Pf + 1 + (Nf - 2) / 2);  // keys seen, summed over tokens
    d.flops_per_request = 2.0 * Lf * per_layer * (Pf + Nf - 1) + 2.0 * dm * static_cast<double>(c.vocab_size) * Nf +
                          Lf * 4.0 * H * D * ctx_sum;
    d.gemm = cmd::measure_gemm_gflops(0.2);

    if (a.opt_int("py", 1) != 0) {
        const std::string script = a.opt("py_script", std::string(TAGFLOW_BENCH_SOURCE_DIR) + "/generate_ref.py");
        const std::string out = dir + "/ref_" + std::to_string(B) + ".json";
        const std::string cmd = "OPENBLAS_NUM_THREADS=" + std::to_string(threads) + " " +
                                a.opt("python", "/usr/bin/python3") + " " + script + " --model " + dir + " --batch " +
                                std::to_string(B) + " --prompt-len " + std::to_string(P) + " --new-tokens " +
                                std::to_string(d.new_tokens) + " --iters " + std::to_string(std::max(1, a.iters)) +
                                " --warmup " + std::to_string(a.warmup) + " --threads " + std::to_string(threads) +
                                " --out " + out + " > " + out + ".log 2>&1";
        if (std::system(cmd.c_str()) != 0)
            throw Error("generate_bench: the Python baseline failed: " + cmd + " (see " + out + ".log)");
        std::ifstream in(out);
        d.ref = nlohmann::json::parse(in);
        d.py_tok_s = d.ref.at("tokens_per_s").get<double>();
        d.py_best = d.ref.at("best_tokens_per_s").get<double>();
    }
}

void run(BenchState& s) {
    Data& d = s.data<Data>();
    const auto t0 = std::chrono::steady_clock::now();
    for (std::size_t i = 0; i < d.prompts.size(); ++i) {
        rollout::GenRequest r;
        r.id = static_cast<int64_t>(i);
        r.prompt = d.prompts[i];
        r.params.temperature = d.temperature;
        r.params.seed = static_cast<uint64_t>(i) + 1;
        r.params.max_tokens = d.new_tokens;
        d.engine->submit(std::move(r));
    }
    d.res = d.engine->run();
    d.best_sec = std::min(d.best_sec, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

int64_t check(BenchState& s) {
    Data& d = s.data<Data>();
    int64_t wrong = 0;
    const double tol = s.args->opt_int("bf16", 0) ? 0.1 : 1e-3;
    for (std::size_t b = 0; b < d.res.size(); ++b) {
        const auto& r = d.res[b];
        if (r.response.size() != static_cast<std::size_t>(d.new_tokens)) {
            ++wrong;
            continue;
        }
        for (float lp : r.logprobs) wrong += std::isfinite(lp) && lp <= 0 ? 0 : 1;
        if (d.ref.is_null()) continue;
        const auto& toks = d.ref["tokens"][b];
        const auto& lps = d.ref["logprobs"][b];
        const auto& gaps = d.ref["gaps"][b];
        for (std::size_t t = 0; t < r.response.size(); ++t) {
            if (r.response[t] != toks[t].get<int32_t>()) {
                if (gaps[t].get<double>() >= 1e-3) ++wrong;  // a real disagreement, not a near tie
                break;                                       // the sequences diverge from here on
            }
            if (std::abs(r.logprobs[t] - lps[t].get<double>()) > tol) ++wrong;
        }
    }
    return wrong;
}

void extras(BenchState& s, double sec) {
    Data& d = s.data<Data>();
    const double tok_s = static_cast<double>(s.count) * d.new_tokens / sec;
    const double best = static_cast<double>(s.count) * d.new_tokens / d.best_sec;
    const double gflops = static_cast<double>(s.count) * d.flops_per_request / d.best_sec / 1e9;
    s.extra = {tok_s,  d.py_tok_s, tok_s / d.py_tok_s, best, d.py_best, best / d.py_best,
               gflops, d.gemm,     gflops / d.gemm};
}

BenchOp make_op() {
    BenchOp op;
    op.name = "generate";
    op.description = "rollout engine greedy decode, tokens/s vs a PyTorch eager KV-cache loop and the GEMM rate";
    op.type = "batch";
    op.elem_size = 1;  // -b/-e are batch sizes
    op.setup = setup;
    op.run = run;
    op.check = check;
    op.extra_columns = {"tokens/s", "py/s", "x_py", "best/s", "py_best/s", "x_py_best", "GFLOP/s", "gemm", "util"};
    op.extras = extras;
    op.op_options = {"d_model=128 layers=4 heads=4 kv_heads=2 ffn=3*d_model vocab=512: the Llama config",
                     "prompt=16 new=32: prompt and generated tokens per request",
                     "threads=1: torch and OpenBLAS threads (the Python loop uses the same)",
                     "bf16=0: engine in bf16",
                     "py=1: run the Python baseline (python=/usr/bin/python3 py_script=...)",
                     "std=0.1: init std of the random weights"};
    return op;
}

}  // namespace

TAGFLOW_BENCH_MAIN(make_op)
