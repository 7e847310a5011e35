// SPDX-License-Identifier: Apache-2.0
// sft_command: `tagflow sft`. Step s trains on the task's training prompts s*B .. s*B+B-1
// paired with their reference solutions; rank r takes every size-th of them. The loss is
// the summed cross-entropy of the response tokens (prompt and padding masked out); the
// gradients and the token count travel in one bucketed all-reduce and the gradients are
// divided by the global token count, so every rank applies the same AdamW update to the
// same weights (rank 0's, broadcast at the start). Held-out accuracy is greedy exact match.
#include "cmd/sft_command.hpp"

#include <ATen/Parallel.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <thread>

#include <torch/nn/functional/loss.h>
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/adamw.h>
#include <torch/torch.h>

#include "common/error.hpp"
#include "common/log.hpp"
#include "common/mpi_env.hpp"
#include "common/safe_file.hpp"
#include "config/options.hpp"
#include "model/hf_export.hpp"
#include "model/llama.hpp"
#include "rollout/agent_loop.hpp"
#include "rollout/task.hpp"
#include "sched/agent_rollout.hpp"
#include "cmd/train_command.hpp"
#include "tagflow/config.hpp"
#include "train/collectives_mpi.hpp"
#include "train/delta_sync.hpp"

namespace po = boost::program_options;
namespace fs = std::filesystem;

namespace tagflow::sched {
namespace {

struct SftOptions {
    std::string task = "addition";
    std::string out;
    std::string init;
    std::string tokenizer;              // --tokenizer: a fresh model's vocabulary; OUT/model's tokenizer files
    std::string export_dtype = "auto";  // --export-dtype: OUT/model's weights (model/hf_export.hpp)
    bool overwrite = false;
    bool allow_shared_dir = false;
    int32_t digits = 0;  // 0 = the task's default
    int64_t steps = 1000;
    int64_t batch = 64;
    double lr = 3e-3;
    double weight_decay = 0.01;
    double grad_clip = 1.0;
    int64_t warmup = 100;
    int64_t seed = 1;
    int64_t d_model = 128;
    int64_t layers = 2;
    int64_t heads = 4;
    int64_t kv_heads = 2;
    int64_t d_ff = 256;
    int64_t eval_prompts = 256;
    int64_t eval_every = 0;
    int64_t log_every = 0;
    int32_t threads = 0;
};

template <typename T>
po::typed_value<T>* val(T* field) {
    return po::value<T>(field)->default_value(*field);
}

po::options_description describe(SftOptions& o) {
    po::options_description d("tagflow sft options");
    d.add_options()
        ("help,h", "print this help and exit")
        ("task", val(&o.task), "task (needs a reference solution): addition, longtail, reverse, sort or a registered one")
        ("out", po::value<std::string>(&o.out), "output directory (required): OUT/model (HF checkpoint) and OUT/sft.json")
        ("overwrite", val(&o.overwrite)->implicit_value(true), "replace an existing OUT/model")
        ("allow-shared-dir", val(&o.allow_shared_dir)->implicit_value(true),
         "accept an --out directory owned by another user or writable by others without the sticky bit")
        ("digits", val(&o.digits), "task digits (0 = the task's default: addition 3, reverse/sort 5)")
        ("steps", val(&o.steps), "optimizer steps")
        ("batch", val(&o.batch), "sequences per step, over all ranks")
        ("lr", po::value<double>(&o.lr)->default_value(o.lr, "0.003"), "AdamW peak learning rate (linear warm-up, then cosine decay to lr/10)")
        ("warmup", val(&o.warmup), "warm-up steps")
        ("weight-decay", val(&o.weight_decay), "AdamW weight decay")
        ("grad-clip", val(&o.grad_clip), "global gradient-norm clip (0 = off)")
        ("seed", val(&o.seed), "seed of the weights and of the prompt order")
        ("init", po::value<std::string>(&o.init), "start from this HF checkpoint directory instead of random weights")
        ("tokenizer", val(&o.tokenizer), "a tokenizer.json (or a directory holding one): a new model takes its vocabulary "
                                         "and bos/eos ids from it; OUT/model carries its files (default: --init's own)")
        ("export-dtype", val(&o.export_dtype), "dtype of OUT/model's weights: bf16, fp32, or auto (bf16 when --init's "
                                               "torch_dtype is bfloat16, else fp32)")
        ("d-model", val(&o.d_model), "hidden size (new model)")
        ("layers", val(&o.layers), "decoder layers (new model)")
        ("heads", val(&o.heads), "attention heads (must divide d-model)")
        ("kv-heads", val(&o.kv_heads), "key/value heads (must divide heads)")
        ("d-ff", val(&o.d_ff), "SwiGLU intermediate size (new model)")
        ("eval-prompts", val(&o.eval_prompts), "held-out prompts per greedy evaluation")
        ("eval-every", val(&o.eval_every), "also evaluate every N steps (0 = only at the start and the end)")
        ("log-every", val(&o.log_every), "progress line every N steps (0 = about 20 lines)")
        ("threads", val(&o.threads), "torch threads per rank (0 = cores / ranks on this node)");
    return d;
}

template <typename T>
void check_range(const char* name, T v, T lo, T hi) {
    if (v < lo || v > hi) {
        std::ostringstream m;
        m << "--" << name << " " << v << ": must be in [" << lo << ", " << hi << "]";
        throw ConfigError(m.str());
    }
}

// Parses argv (argv[0] = "sft"); returns false for --help (after printing it).
bool parse(int argc, char** argv, SftOptions& o, po::variables_map& vm) {
    po::options_description desc = describe(o);
    try {
        po::parsed_options parsed = po::command_line_parser(argc, argv).options(desc).run();
        for (const auto& opt : parsed.options)
            if (opt.position_key >= 0 || opt.string_key.empty())
                throw ConfigError("unexpected argument '" + opt.value.at(0) + "' (options start with --)");
        po::store(parsed, vm);
        po::notify(vm);
    } catch (const po::unknown_option& e) {
        throw ConfigError("unknown option '" + e.get_option_name() + "' (see `tagflow sft --help`)");
    } catch (const po::error& e) {
        throw ConfigError(e.what());
    }
    if (vm.count("help")) {
        std::ostringstream s;
        s << "usage: tagflow sft --task NAME --out DIR [options]\n"
             "Supervised warm start on the task's reference solutions (data-parallel under mpirun).\n\n"
          << desc;
        print0("%s", s.str().c_str());
        return false;
    }
    if (o.out.empty()) throw ConfigError("--out: missing (the output directory is required)");
    check_range<int64_t>("steps", o.steps, 0, 100000000);
    check_range<int64_t>("batch", o.batch, 1, 1000000);
    check_range<int64_t>("warmup", o.warmup, 0, 100000000);
    check_range<int64_t>("eval-prompts", o.eval_prompts, 1, 1000000);
    check_range<int64_t>("eval-every", o.eval_every, 0, 100000000);
    check_range<int64_t>("log-every", o.log_every, 0, 100000000);
    check_range<int32_t>("threads", o.threads, 0, 1024);
    check_range<int32_t>("digits", o.digits, 0, 64);
    check_range<double>("weight-decay", o.weight_decay, 0.0, 10.0);
    check_range<double>("grad-clip", o.grad_clip, 0.0, 1e6);
    if (!(o.lr > 0 && std::isfinite(o.lr)) || o.lr > 1.0)
        throw ConfigError("--lr " + std::to_string(o.lr) + ": must be in (0, 1]");
    for (const char* size_opt : {"d-model", "layers", "heads", "kv-heads", "d-ff"})
        if (!o.init.empty() && !vm[size_opt].defaulted())
            throw ConfigError(std::string("--") + size_opt + ": model sizes come from --init " + o.init +
                              "'s config.json; drop one of the two");
    check_range<int64_t>("d-model", o.d_model, 2, 65536);
    check_range<int64_t>("layers", o.layers, 1, 1024);
    check_range<int64_t>("heads", o.heads, 1, 1024);
    check_range<int64_t>("kv-heads", o.kv_heads, 1, 1024);
    check_range<int64_t>("d-ff", o.d_ff, 1, 1 << 20);
    if (o.d_model % o.heads != 0)
        throw ConfigError("--heads " + std::to_string(o.heads) + ": must divide --d-model " + std::to_string(o.d_model));
    if ((o.d_model / o.heads) % 2 != 0)
        throw ConfigError("--d-model / --heads must be even (RoPE head dimension), got " +
                          std::to_string(o.d_model / o.heads));
    if (o.heads % o.kv_heads != 0)
        throw ConfigError("--kv-heads " + std::to_string(o.kv_heads) + ": must divide --heads " + std::to_string(o.heads));
    if (!o.init.empty() && !fs::exists(fs::path(o.init) / "config.json"))
        throw ConfigError("--init " + o.init + ": no config.json there (expected a Hugging Face checkpoint directory)");
    (void)model::parse_export_dtype(o.export_dtype, "");  // the value; the source's dtype is read later
    return true;
}

// cores this rank may use, shared among the ranks of its node
int choose_threads(int requested) {
    if (requested > 0) return requested;
    MPI_Comm node = MPI_COMM_NULL;
    TAGFLOW_MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
    Comm node_comm = Comm::adopt(node);
    const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    return std::max(1, hw / node_comm.size());
}

std::vector<int32_t> before_eos(const std::vector<int32_t>& r, int32_t eos) {
    return {r.begin(), std::find(r.begin(), r.end(), eos)};
}

// round up to a multiple of 64
int64_t round64(int64_t x) { return (x + 63) / 64 * 64; }

model::HfConfig new_config(const SftOptions& o, const rollout::Task& task) {
    model::HfConfig c;
    c.model_type = "llama";
    c.hidden_size = o.d_model;
    c.intermediate_size = o.d_ff;
    c.num_hidden_layers = o.layers;
    c.num_attention_heads = o.heads;
    c.num_key_value_heads = o.kv_heads;
    c.head_dim = o.d_model / o.heads;
    c.vocab_size = task.vocab_size();
    if (!o.tokenizer.empty()) model::apply_tokenizer_vocab(c, model::resolve_tokenizer_json(o.tokenizer), task.vocab_size());
    c.max_position_embeddings = round64(task.max_prompt_tokens() + task.max_response_tokens());
    c.rms_norm_eps = 1e-6;
    c.rope_theta = 10000.0;
    c.validate("tagflow sft");
    return c;
}

// One step's local share of the batch as a padded [b, T] token tensor plus a [b, T-1]
// mask of the positions whose *next* token is a response token.
struct Batch {
    torch::Tensor tokens, mask;
    int64_t response_tokens = 0;
};

Batch make_batch(const rollout::Task& task, int64_t first, int64_t count, int rank, int size) {
    std::vector<std::vector<int32_t>> seqs;
    std::vector<size_t> prompt_len;
    size_t longest = 0;
    // Multi-turn tasks: the demonstration's tool/environment tokens stay out of the loss.
    const rollout::AgentLoop* loop = rollout::as_agent_loop(task);
    std::vector<std::vector<uint8_t>> resp_mask;
    for (int64_t j = rank; j < count; j += size) {
        std::vector<int32_t> s = task.train_prompt(first + j);
        prompt_len.push_back(s.size());
        if (loop) resp_mask.push_back(loop->demonstration(s).loss_mask);
        const std::vector<int32_t> sol = task.solution(s);
        s.insert(s.end(), sol.begin(), sol.end());
        longest = std::max(longest, s.size());
        seqs.push_back(std::move(s));
    }
    Batch b;
    const auto rows = static_cast<int64_t>(seqs.size());
    const auto T = static_cast<int64_t>(longest);
    b.tokens = torch::full({rows, T}, task.eos_token(), torch::kLong);
    b.mask = torch::zeros({rows, std::max<int64_t>(T - 1, 0)}, torch::kFloat);
    auto tok = b.tokens.accessor<int64_t, 2>();
    auto msk = b.mask.accessor<float, 2>();
    for (size_t r = 0; r < seqs.size(); ++r) {
        for (size_t t = 0; t < seqs[r].size(); ++t) tok[static_cast<int64_t>(r)][static_cast<int64_t>(t)] = seqs[r][t];
        // position t predicts token t+1; response tokens are t+1 >= prompt_len
        for (size_t t = prompt_len[r] - 1; t + 1 < seqs[r].size(); ++t) {
            if (loop && !resp_mask[r].at(t + 1 - prompt_len[r])) continue;
            msk[static_cast<int64_t>(r)][static_cast<int64_t>(t)] = 1.0f;
            ++b.response_tokens;
        }
    }
    return b;
}

struct EvalPoint {
    int64_t step = 0;
    double accuracy = 0, reward = 0;
};

// Collective over MPI_COMM_WORLD: every rank scores every size-th held-out prompt.
EvalPoint evaluate(model::LlamaModelImpl& m, const rollout::Task& task, int64_t n, int rank, int size, int64_t step) {
    std::vector<int64_t> idx;
    for (int64_t i = rank; i < n; i += size) idx.push_back(i);
    const GreedyScore s = score_greedy(m, task, idx);
    double local[2] = {static_cast<double>(s.exact), s.reward_sum}, global[2] = {0, 0};
    TAGFLOW_MPI_CHECK(MPI_Allreduce(local, global, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
    return {step, global[0] / static_cast<double>(n), global[1] / static_cast<double>(n)};
}

double lr_at(const SftOptions& o, int64_t step) {
    if (step < o.warmup) return o.lr * static_cast<double>(step + 1) / static_cast<double>(o.warmup);
    const double span = static_cast<double>(std::max<int64_t>(1, o.steps - o.warmup));
    const double p = std::min(1.0, static_cast<double>(step - o.warmup) / span);
    return o.lr * (0.1 + 0.9 * 0.5 * (1.0 + std::cos(M_PI * p)));
}

}  // namespace

std::vector<std::vector<int32_t>> greedy_decode(model::LlamaModelImpl& model,
                                                const std::vector<std::vector<int32_t>>& prompts,
                                                int32_t max_tokens, int32_t eos, int64_t batch_size) {
    torch::NoGradGuard no_grad;
    std::vector<std::vector<int32_t>> out(prompts.size());
    std::map<size_t, std::vector<size_t>> by_len;
    for (size_t i = 0; i < prompts.size(); ++i) by_len[prompts[i].size()].push_back(i);
    for (const auto& [len, all] : by_len) {
        if (len == 0) throw Error("greedy_decode: empty prompt");
        for (size_t lo = 0; lo < all.size(); lo += static_cast<size_t>(batch_size)) {
            const size_t hi = std::min(all.size(), lo + static_cast<size_t>(batch_size));
            const auto rows = static_cast<int64_t>(hi - lo);
            torch::Tensor input = torch::empty({rows, static_cast<int64_t>(len)}, torch::kLong);
            auto acc = input.accessor<int64_t, 2>();
            for (size_t r = lo; r < hi; ++r)
                for (size_t t = 0; t < len; ++t) acc[static_cast<int64_t>(r - lo)][static_cast<int64_t>(t)] = prompts[all[r]][t];
            model::LlamaKVCache cache = model.make_cache();
            torch::Tensor next = model.forward_cached(input, cache).select(1, -1).argmax(-1);
            std::vector<bool> done(static_cast<size_t>(rows), false);
            for (int32_t step = 0; step < max_tokens; ++step) {
                auto nx = next.accessor<int64_t, 1>();
                bool all_done = true;
                for (int64_t r = 0; r < rows; ++r) {
                    if (done[static_cast<size_t>(r)]) continue;
                    const auto t = static_cast<int32_t>(nx[r]);
                    out[all[lo + static_cast<size_t>(r)]].push_back(t);
                    done[static_cast<size_t>(r)] = t == eos;
                    all_done = all_done && t == eos;
                }
                if (all_done || step + 1 == max_tokens) break;
                next = model.forward_cached(next.unsqueeze(1), cache).select(1, 0).argmax(-1);
            }
        }
    }
    return out;
}

GreedyScore score_greedy(model::LlamaModelImpl& model, const rollout::Task& task, const std::vector<int64_t>& indices) {
    // Multi-turn tasks: greedy sessions with the tool (sched/agent_rollout.hpp).
    if (const rollout::AgentLoop* loop = rollout::as_agent_loop(task)) return score_agent_greedy(model, task, *loop, indices);
    std::vector<std::vector<int32_t>> prompts;
    for (int64_t i : indices) prompts.push_back(task.eval_prompt(i));
    const auto responses = greedy_decode(model, prompts, task.max_response_tokens(), task.eos_token());
    GreedyScore s;
    for (size_t i = 0; i < prompts.size(); ++i) {
        const auto want = before_eos(task.solution(prompts[i]), task.eos_token());
        s.exact += before_eos(responses[i], task.eos_token()) == want;
        s.reward_sum += task.reward(prompts[i], responses[i]);
        ++s.n;
    }
    return s;
}

int sft_command(int argc, char** argv) {
    SftOptions o;
    po::variables_map vm;
    if (!parse(argc, argv, o, vm)) return 0;
    Comm world = Comm::world();
    const int rank = world.rank(), size = world.size();
    if (o.batch < size)
        throw ConfigError("--batch " + std::to_string(o.batch) + ": smaller than the " + std::to_string(size) +
                          " ranks (every rank needs a share)");

    rollout::TaskParams tp;
    tp.digits = o.digits;
    std::unique_ptr<rollout::Task> task = rollout::make_task(o.task, static_cast<uint64_t>(o.seed), tp);
    try {
        (void)task->solution(task->train_prompt(0));
    } catch (const Error&) {
        throw ConfigError("--task " + o.task + ": has no reference solution, so it cannot be used by sft");
    }

    const std::string model_dir = o.out + "/model";
    // An --out others may write to could hold planted links (common/safe_file.hpp): refused on
    // rank 0, the same one-line verdict on every rank.
    std::string dir_error;
    if (rank == 0) {
        try {
            check_run_dir(o.out, o.allow_shared_dir);
        } catch (const ConfigError& e) {
            dir_error = e.what();
        }
    }
    int dir_bad = dir_error.empty() ? 0 : 1;
    TAGFLOW_MPI_CHECK(MPI_Bcast(&dir_bad, 1, MPI_INT, 0, MPI_COMM_WORLD));
    if (dir_bad) {
        if (rank == 0) log_error("%s", dir_error.c_str());
        throw ConfigError("");
    }
    int exists = 0;
    if (rank == 0) exists = fs::exists(model_dir);
    TAGFLOW_MPI_CHECK(MPI_Bcast(&exists, 1, MPI_INT, 0, MPI_COMM_WORLD));
    if (exists && !o.overwrite)
        throw ConfigError("--out " + o.out + ": " + model_dir + " already exists (use a new --out, or --overwrite)");

    // The model: same weights everywhere (rank 0's are broadcast, whatever the source).
    std::shared_ptr<model::LlamaModelImpl> m;
    if (o.init.empty()) {
        m = std::make_shared<model::LlamaModelImpl>(new_config(o, *task), static_cast<uint64_t>(o.seed));
    } else {
        (void)check_pretrained_on_every_rank(o.init, "--init");  // a one-line error, not an abort
        m = model::LlamaModelImpl::from_pretrained(o.init);
        const model::HfConfig& c = m->config();
        if (c.vocab_size < task->vocab_size())
            throw ConfigError("--init " + o.init + ": vocab_size " + std::to_string(c.vocab_size) + " is smaller than task " +
                              o.task + "'s " + std::to_string(task->vocab_size()));
        const int64_t need = task->max_prompt_tokens() + task->max_response_tokens();
        if (c.max_position_embeddings < need)
            throw ConfigError("--init " + o.init + ": max_position_embeddings " + std::to_string(c.max_position_embeddings) +
                              " is below task " + o.task + "'s " + std::to_string(need) + " tokens");
        if (!o.tokenizer.empty())
            model::check_tokenizer_fits(model::resolve_tokenizer_json(o.tokenizer), c.vocab_size, o.init);
    }
    // How OUT/model is written (model/hf_export.hpp): sft samples nothing (its evaluation is
    // greedy), so generation_config.json gets the ids, no sampling defaults.
    model::HfExport out_export;
    out_export.dtype = model::parse_export_dtype(o.export_dtype, o.init.empty() ? "" : m->config().torch_dtype);
    out_export.source_dir = o.init;
    out_export.tokenizer_json = model::export_tokenizer(o.tokenizer, o.init);
    out_export.stop_ids = {task->eos_token()};

    // ---- from here on errors abort the job ----
    const int threads = choose_threads(o.threads);
    at::set_num_threads(threads);
    train::MpiCollectives coll(MPI_COMM_WORLD, 16u << 20);
    std::vector<at::Tensor> params;
    int64_t n_params = 0;
    for (auto& p : m->parameters()) {
        params.push_back(p);
        n_params += p.numel();
    }
    {
        torch::NoGradGuard no_grad;
        coll.broadcast(params, 0);
    }
    train::bump_versions(params);  // written by MPI, behind the version counters
    const model::HfConfig& cfg = m->config();
    print0("tagflow %s sft: task %s, %d rank%s x %d thread%s, model %s d=%ld layers=%ld heads=%ld/%ld ff=%ld vocab=%ld "
           "(%ld parameters)%s%s\n",
           TAGFLOW_VERSION, o.task.c_str(), size, size == 1 ? "" : "s", threads, threads == 1 ? "" : "s",
           cfg.model_type.c_str(), static_cast<long>(cfg.hidden_size), static_cast<long>(cfg.num_hidden_layers),
           static_cast<long>(cfg.num_attention_heads), static_cast<long>(cfg.num_key_value_heads),
           static_cast<long>(cfg.intermediate_size), static_cast<long>(cfg.vocab_size), static_cast<long>(n_params),
           o.init.empty() ? "" : ", from ", o.init.c_str());
    print0("steps %ld, batch %ld, lr %g (warm-up %ld, cosine to %g), weight decay %g, grad clip %g, seed %ld\n",
           static_cast<long>(o.steps), static_cast<long>(o.batch), o.lr, static_cast<long>(o.warmup), o.lr / 10,
           o.weight_decay, o.grad_clip, static_cast<long>(o.seed));

    const auto t_start = std::chrono::steady_clock::now();
    auto seconds = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count(); };
    std::vector<EvalPoint> curve;
    auto do_eval = [&](int64_t step) {
        m->eval();
        curve.push_back(evaluate(*m, *task, o.eval_prompts, rank, size, step));
        m->train();
        print0("eval step %ld: held-out greedy exact match %.3f, mean reward %.3f (%ld prompts, %.1fs)\n",
               static_cast<long>(step), curve.back().accuracy, curve.back().reward, static_cast<long>(o.eval_prompts),
               seconds());
    };
    do_eval(0);

    torch::optim::AdamW opt(m->parameters(),
                            torch::optim::AdamWOptions(o.lr).betas({0.9, 0.98}).weight_decay(o.weight_decay));
    const int64_t log_every = o.log_every > 0 ? o.log_every : std::max<int64_t>(1, o.steps / 20);
    torch::Tensor stats = torch::zeros({2}, torch::kFloat);
    double loss_acc = 0, tok_acc = 0, last_loss = 0;
    for (int64_t step = 0; step < o.steps; ++step) {
        const double lr = lr_at(o, step);
        for (auto& g : opt.param_groups()) static_cast<torch::optim::AdamWOptions&>(g.options()).lr(lr);
        opt.zero_grad();
        Batch b = make_batch(*task, step * o.batch, o.batch, rank, size);
        const torch::Tensor logits = m->forward(b.tokens.slice(1, 0, -1));  // [b, T-1, V]
        const torch::Tensor ce = torch::nn::functional::cross_entropy(
            logits.reshape({-1, logits.size(-1)}), b.tokens.slice(1, 1).reshape({-1}),
            torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
        const torch::Tensor loss_sum = (ce * b.mask.reshape({-1})).sum();
        loss_sum.backward();
        std::vector<at::Tensor> bufs;
        for (auto& p : params) {
            if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
            bufs.push_back(p.grad());
        }
        stats[0] = loss_sum.item<float>();
        stats[1] = static_cast<float>(b.response_tokens);
        bufs.push_back(stats);
        coll.allreduce_sum(bufs);
        const double global_tokens = stats[1].item<double>();
        {
            torch::NoGradGuard no_grad;
            for (auto& p : params) p.grad().div_(global_tokens);
        }
        if (o.grad_clip > 0) torch::nn::utils::clip_grad_norm_(params, o.grad_clip);
        opt.step();
        last_loss = stats[0].item<double>() / global_tokens;
        loss_acc += stats[0].item<double>();
        tok_acc += global_tokens;
        if ((step + 1) % log_every == 0 || step + 1 == o.steps) {
            print0("step %ld/%ld: loss %.4f per response token, lr %.2e, %.1fs\n", static_cast<long>(step + 1),
                   static_cast<long>(o.steps), loss_acc / tok_acc, lr, seconds());
            loss_acc = tok_acc = 0;
        }
        if (o.eval_every > 0 && (step + 1) % o.eval_every == 0 && step + 1 != o.steps) do_eval(step + 1);
    }
    if (o.steps > 0) do_eval(o.steps);
    const double elapsed = seconds();

    if (rank == 0) {
        make_run_dirs(o.out);  // 0750, like tagflow train's
        (void)model::write_hf_dir(*m, model_dir, out_export);
        std::ostringstream j;
        j << "{\n  \"task\": " << config::json_string(o.task) << ",\n  \"digits\": " << o.digits
          << ",\n  \"steps\": " << o.steps << ",\n  \"batch\": " << o.batch << ",\n  \"lr\": " << o.lr
          << ",\n  \"seed\": " << o.seed << ",\n  \"world_size\": " << size
          << ",\n  \"init\": " << config::json_string(o.init) << ",\n  \"parameters\": " << n_params
          << ",\n  \"eval_prompts\": " << o.eval_prompts << ",\n  \"accuracy_before\": " << curve.front().accuracy
          << ",\n  \"accuracy_after\": " << curve.back().accuracy << ",\n  \"reward_before\": " << curve.front().reward
          << ",\n  \"reward_after\": " << curve.back().reward << ",\n  \"final_loss\": " << last_loss
          << ",\n  \"seconds\": " << elapsed << ",\n  \"model\": " << config::json_string(model_dir)
          << ",\n  \"eval\": [";
        for (size_t i = 0; i < curve.size(); ++i)
            j << (i ? ", " : "") << "{\"step\": " << curve[i].step << ", \"accuracy\": " << curve[i].accuracy
              << ", \"reward\": " << curve[i].reward << "}";
        j << "]\n}\n";
        write_file_replace(o.out + "/sft.json", j.str());  // never through a link planted there
    }
    TAGFLOW_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    print0("summary: %ld steps in %.1fs; held-out greedy exact match %.3f -> %.3f (mean reward %.3f -> %.3f)\n",
           static_cast<long>(o.steps), elapsed, curve.front().accuracy, curve.back().accuracy, curve.front().reward,
           curve.back().reward);
    print0("checkpoint: %s\n", model_dir.c_str());
    return 0;
}

}  // namespace tagflow::sched
