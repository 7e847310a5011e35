// SPDX-License-Identifier: Apache-2.0
// sft_command: `tagflow sft`. Step s trains on the task's training prompts s*B .. s*B+B-1
// paired with their reference solutions; rank r takes every size-th of them. The loss is
// the summed cross-entropy of the response tokens (prompt and padding masked out); the
// gradients and the token count travel in one bucketed all-reduce and the gradients are
// divided by the global token count, so every rank applies the same AdamW update to the
// same weights (rank 0's, broadcast at the start). Held-out accuracy is greedy exact match.
#include "cmd/sft_command.hpp"
#include "cmd/sft_data.hpp"

#include <ATen/Parallel.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <chrono>
#include <cstring>
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
#include "io/run_file.hpp"
#include "config/options.hpp"
#include "model/hf_export.hpp"
#include "model/llama.hpp"
#include "rollout/agent_loop.hpp"
#include "rollout/engine.hpp"
#include "rollout/task.hpp"
#include "sched/agent_rollout.hpp"
#include "train/workers.hpp"
#include "sched/validation.hpp"
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
    // ---- --data (share/doc/data.md, "Supervised fine-tuning on a data set") ----
    std::string data, val_data, chat_template, reward, reward_fn;
    int64_t epochs = 0;             // 0: one epoch, or --steps when given
    int64_t max_prompt_tokens = 0;  // 0 = no limit
    int32_t val_samples = 1;        // K of mean@K (1 = greedy only)
    double val_temperature = 1.0;
    int32_t val_max_tokens = 0;  // 0 = the longest response of the data
    int32_t reward_workers = 2;
};

template <typename T>
po::typed_value<T>* val(T* field) {
    return po::value<T>(field)->default_value(*field);
}

po::options_description describe(SftOptions& o) {
    po::options_description d("tagflow sft options");
    // clang-format off
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
    // clang-format on
    po::options_description data("Data set instead of --task (share/doc/data.md)");
    // clang-format off
    data.add_options()
        ("data", po::value<std::string>(&o.data), "train on this JSON Lines file (plain or .gz; veRL rows with a "
                                                  "\"response\" or extra_info.answer); needs --tokenizer or an --init "
                                                  "directory with a tokenizer.json")
        ("val-data", po::value<std::string>(&o.val_data), "score the model on these rows at the start, every "
                                                          "--eval-every steps and at the end (greedy; mean@K with "
                                                          "--val-samples K); written to OUT/tagflow.h5 /eval")
        ("epochs", val(&o.epochs), "passes over --data, each in a seeded shuffle (0 = one, or until --steps when "
                                   "given); --steps, when given too, can end the run earlier")
        ("max-prompt-tokens", val(&o.max_prompt_tokens), "rows whose rendered prompt is longer are skipped and counted "
                                                         "(0 = no limit)")
        ("chat-template", po::value<std::string>(&o.chat_template), "a Jinja chat template file instead of the "
                                                                     "tokenizer's")
        ("reward", po::value<std::string>(&o.reward), "validation scorer builtin:NAME (exact, gsm8k, math) for every "
                                                      "row (default: by each row's data_source)")
        ("reward-fn", po::value<std::string>(&o.reward_fn), "validation scorer FILE.py[:NAME] with veRL's signature "
                                                            "compute_score(data_source, solution_str, ground_truth, "
                                                            "extra_info)")
        ("reward-workers", val(&o.reward_workers), "Python worker processes per rank (--reward-fn)")
        ("val-samples", val(&o.val_samples), "K: also sample K responses per validation row and report mean@K")
        ("val-temperature", val(&o.val_temperature), "sampling temperature of --val-samples")
        ("val-max-tokens", val(&o.val_max_tokens), "validation response budget (0 = the longest response of the data, "
                                                   "end token included)");
    // clang-format on
    d.add(data);
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
             "       tagflow sft --data FILE [--val-data FILE] --tokenizer PATH --out DIR [options]\n"
             "Supervised warm start on the task's reference solutions, or on a data set's responses\n"
             "(data-parallel under mpirun).\n\n"
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
        throw ConfigError("--heads " + std::to_string(o.heads) + ": must divide --d-model " +
                          std::to_string(o.d_model));
    if ((o.d_model / o.heads) % 2 != 0)
        throw ConfigError("--d-model / --heads must be even (RoPE head dimension), got " +
                          std::to_string(o.d_model / o.heads));
    if (o.heads % o.kv_heads != 0)
        throw ConfigError("--kv-heads " + std::to_string(o.kv_heads) + ": must divide --heads " +
                          std::to_string(o.heads));
    if (!o.init.empty() && !fs::exists(fs::path(o.init) / "config.json"))
        throw ConfigError("--init " + o.init + ": no config.json there (expected a Hugging Face checkpoint directory)");
    (void)model::parse_export_dtype(o.export_dtype, "");  // the value; the source's dtype is read later
    if (o.data.empty()) {
        for (const char* only : {"val-data", "epochs", "max-prompt-tokens", "chat-template", "reward", "reward-fn",
                                 "val-samples", "val-temperature", "val-max-tokens"})
            if (vm.count(only) && !vm[only].defaulted())
                throw ConfigError(std::string("--") + only + ": only with --data FILE");
    } else {
        if (!vm["task"].defaulted() || !vm["digits"].defaulted())
            throw ConfigError("--data " + o.data + ": the rows are the task; drop --task/--digits");
        check_range<int64_t>("epochs", o.epochs, 0, 1000000);
        check_range<int64_t>("max-prompt-tokens", o.max_prompt_tokens, 0, 100000000);
        check_range<int32_t>("val-samples", o.val_samples, 1, 1024);
        check_range<int32_t>("val-max-tokens", o.val_max_tokens, 0, 1000000);
        check_range<int32_t>("reward-workers", o.reward_workers, 1, 256);
        if (!(o.val_temperature > 0 && o.val_temperature <= 100))
            throw ConfigError("--val-temperature " + std::to_string(o.val_temperature) + ": must be in (0, 100]");
    }
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
    if (!o.tokenizer.empty())
        model::apply_tokenizer_vocab(c, model::resolve_tokenizer_json(o.tokenizer), task.vocab_size());
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

// Pads `seqs` with `pad` into a Batch; the loss covers the tokens after each prompt (those whose
// `resp_mask` entry is 0 excepted, when given: a multi-turn demonstration's tool tokens).
Batch pack(const std::vector<SftSeq>& seqs, const std::vector<std::vector<uint8_t>>* resp_mask, int32_t pad) {
    size_t longest = 0;
    for (const SftSeq& q : seqs) longest = std::max(longest, q.ids.size());
    Batch b;
    const auto rows = static_cast<int64_t>(seqs.size());
    const auto T = static_cast<int64_t>(longest);
    b.tokens = torch::full({rows, T}, pad, torch::kLong);
    b.mask = torch::zeros({rows, std::max<int64_t>(T - 1, 0)}, torch::kFloat);
    auto tok = b.tokens.accessor<int64_t, 2>();
    auto msk = b.mask.accessor<float, 2>();
    for (size_t r = 0; r < seqs.size(); ++r) {
        const SftSeq& q = seqs[r];
        for (size_t t = 0; t < q.ids.size(); ++t) tok[static_cast<int64_t>(r)][static_cast<int64_t>(t)] = q.ids[t];
        // position t predicts token t+1; response tokens are t+1 >= prompt_len
        for (size_t t = q.prompt_len - 1; t + 1 < q.ids.size(); ++t) {
            if (resp_mask && !(*resp_mask)[r].at(t + 1 - q.prompt_len)) continue;
            msk[static_cast<int64_t>(r)][static_cast<int64_t>(t)] = 1.0f;
            ++b.response_tokens;
        }
    }
    return b;
}

Batch make_batch(const rollout::Task& task, int64_t first, int64_t count, int rank, int size) {
    std::vector<SftSeq> seqs;
    // Multi-turn tasks: the demonstration's tool/environment tokens stay out of the loss.
    const rollout::AgentLoop* loop = rollout::as_agent_loop(task);
    std::vector<std::vector<uint8_t>> resp_mask;
    for (int64_t j = rank; j < count; j += size) {
        SftSeq q;
        q.ids = task.train_prompt(first + j);
        q.prompt_len = q.ids.size();
        if (loop) resp_mask.push_back(loop->demonstration(q.ids).loss_mask);
        const std::vector<int32_t> sol = task.solution(q.ids);
        q.ids.insert(q.ids.end(), sol.begin(), sol.end());
        seqs.push_back(std::move(q));
    }
    return pack(seqs, loop ? &resp_mask : nullptr, task.eos_token());
}

// The logits [N, V] of the positions where `mask` [B, T] is 1, for tokens [B, T]: the decoder as
// LlamaModelImpl::forward runs it, but the output projection only on those positions (a data
// set's prompts are most of each sequence, and a 150k-token vocabulary makes the projection the
// step's main cost).
torch::Tensor masked_logits(model::LlamaModelImpl& m, const torch::Tensor& tokens, const torch::Tensor& mask) {
    return train::policy_logits_rows(m, tokens, mask.reshape({-1}).nonzero().squeeze(1));
}

// One optimizer step on this rank's share `b` (collective over MPI_COMM_WORLD): the summed
// response-token cross-entropy and the token count travel with the gradients in one bucketed
// all-reduce; the gradients are divided by the global count. Returns {global loss sum, tokens}.
// `only_masked`: the projection on the response positions only (masked_logits).
std::pair<double, double> sft_step(model::LlamaModelImpl& m, torch::optim::AdamW& opt, train::MpiCollectives& coll,
                                   std::vector<at::Tensor>& params, const Batch& b, double lr, double grad_clip,
                                   bool only_masked = false) {
    for (auto& g : opt.param_groups()) static_cast<torch::optim::AdamWOptions&>(g.options()).lr(lr);
    opt.zero_grad();
    torch::Tensor stats = torch::zeros({2}, torch::kFloat);
    if (only_masked && b.response_tokens > 0) {
        const torch::Tensor logits = masked_logits(m, b.tokens.slice(1, 0, -1), b.mask);  // [N, V]
        const torch::Tensor at = b.mask.reshape({-1}).nonzero().squeeze(1);
        const torch::Tensor target = b.tokens.slice(1, 1).reshape({-1}).index_select(0, at);
        const torch::Tensor loss_sum = torch::nn::functional::cross_entropy(
            logits, target, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum));
        loss_sum.backward();
        stats[0] = loss_sum.item<float>();
    } else if (!only_masked && b.tokens.size(0) > 0 && b.tokens.size(1) > 1) {  // no rows (short last batch): zeros
        const torch::Tensor logits = m.forward(b.tokens.slice(1, 0, -1));       // [b, T-1, V]
        const torch::Tensor ce = torch::nn::functional::cross_entropy(
            logits.reshape({-1, logits.size(-1)}), b.tokens.slice(1, 1).reshape({-1}),
            torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
        const torch::Tensor loss_sum = (ce * b.mask.reshape({-1})).sum();
        loss_sum.backward();
        stats[0] = loss_sum.item<float>();
    }
    std::vector<at::Tensor> bufs;
    for (auto& p : params) {
        if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
        bufs.push_back(p.grad());
    }
    stats[1] = static_cast<float>(b.response_tokens);
    bufs.push_back(stats);
    coll.allreduce_sum(bufs);
    const double global_tokens = std::max(1.0, stats[1].item<double>());
    {
        torch::NoGradGuard no_grad;
        for (auto& p : params) p.grad().div_(global_tokens);
    }
    if (grad_clip > 0) torch::nn::utils::clip_grad_norm_(params, grad_clip);
    opt.step();
    return {stats[0].item<double>(), stats[1].item<double>()};
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

// `tagflow sft --data`: the same optimisation as the task path, on the rows of a data set in a
// seeded shuffle per epoch, validated on --val-data, with OUT/tagflow.h5 (/steps, /eval).
int sft_data_run(SftOptions o, const po::variables_map& vm, int rank, int size) {
    SftDataOptions dopt;
    dopt.data = o.data;
    dopt.val_data = o.val_data;
    dopt.tokenizer = o.tokenizer;
    dopt.init = o.init;
    dopt.chat_template = o.chat_template;
    dopt.max_prompt_tokens = o.max_prompt_tokens;
    const bool steps_given = !vm["steps"].defaulted(), epochs_given = !vm["epochs"].defaulted() && o.epochs > 0;
    dopt.epochs = epochs_given ? o.epochs : (steps_given ? 0 : 1);
    dopt.seed = o.seed;
    dopt.reward = o.reward;
    dopt.reward_fn = o.reward_fn;
    dopt.reward_workers = o.reward_workers;
    dopt.val_rows = vm["eval-prompts"].defaulted() ? 0 : o.eval_prompts;
    if (!o.init.empty()) (void)check_pretrained_on_every_rank(o.init, "--init");  // a one-line error, not an abort
    SftData d = SftData::load(dopt, rank, size);
    const int64_t rows = static_cast<int64_t>(d.train().size());
    if (dopt.epochs > 0) {
        const int64_t all = (rows * dopt.epochs + o.batch - 1) / o.batch;
        o.steps = steps_given ? std::min(o.steps, all) : all;
    }
    const int32_t val_budget = o.val_max_tokens > 0 ? o.val_max_tokens : std::max<int32_t>(1, d.longest_response());

    const std::string model_dir = o.out + "/model";
    int exists = 0;
    if (rank == 0) exists = fs::exists(model_dir);
    TAGFLOW_MPI_CHECK(MPI_Bcast(&exists, 1, MPI_INT, 0, MPI_COMM_WORLD));
    if (exists && !o.overwrite)
        throw ConfigError("--out " + o.out + ": " + model_dir + " already exists (use a new --out, or --overwrite)");

    std::shared_ptr<model::LlamaModelImpl> m;
    if (o.init.empty()) {
        model::HfConfig c;
        c.model_type = "llama";
        c.hidden_size = o.d_model;
        c.intermediate_size = o.d_ff;
        c.num_hidden_layers = o.layers;
        c.num_attention_heads = o.heads;
        c.num_key_value_heads = o.kv_heads;
        c.head_dim = o.d_model / o.heads;
        model::apply_tokenizer_vocab(c, model::resolve_tokenizer_json(d.tokenizer_path()), 0);
        c.max_position_embeddings =
            round64(std::max<int64_t>(d.longest_sequence(), d.longest_val_prompt() + val_budget));
        c.rms_norm_eps = 1e-6;
        c.rope_theta = 10000.0;
        c.validate("tagflow sft");
        m = std::make_shared<model::LlamaModelImpl>(c, static_cast<uint64_t>(o.seed));
    } else {
        m = model::LlamaModelImpl::from_pretrained(o.init);
        const model::HfConfig& c = m->config();
        if (!o.tokenizer.empty())
            model::check_tokenizer_fits(model::resolve_tokenizer_json(o.tokenizer), c.vocab_size, o.init);
        if (d.longest_sequence() > c.max_position_embeddings)
            throw ConfigError("--data " + o.data + ":" + std::to_string(d.longest_sequence_line()) +
                              ": prompt + response is " + std::to_string(d.longest_sequence()) +
                              " tokens, over --init " + o.init + "'s max_position_embeddings " +
                              std::to_string(c.max_position_embeddings));
        if (d.has_val() && d.longest_val_prompt() >= c.max_position_embeddings)
            throw ConfigError("--val-data " + o.val_data + ": a prompt of " + std::to_string(d.longest_val_prompt()) +
                              " tokens leaves no room to answer in --init " + o.init + "'s " +
                              std::to_string(c.max_position_embeddings) + " positions");
    }
    model::HfExport out_export;
    out_export.dtype = model::parse_export_dtype(o.export_dtype, o.init.empty() ? "" : m->config().torch_dtype);
    out_export.source_dir = o.init;
    out_export.tokenizer_json = model::export_tokenizer(o.tokenizer, o.init);
    for (int32_t id : d.stop_ids()) out_export.stop_ids.push_back(id);

    // ---- inputs checked: OUT and its run file from here on ----
    if (rank == 0) make_run_dirs(o.out);
    TAGFLOW_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    nlohmann::ordered_json cfg_json = {{"command", "sft"},
                                       {"data", o.data},
                                       {"val_data", o.val_data},
                                       {"tokenizer", d.tokenizer_path()},
                                       {"init", o.init},
                                       {"steps", o.steps},
                                       {"epochs", dopt.epochs},
                                       {"batch", o.batch},
                                       {"lr", o.lr},
                                       {"warmup", o.warmup},
                                       {"seed", o.seed},
                                       {"val_samples", o.val_samples},
                                       {"val_max_tokens", val_budget},
                                       {"reward", d.scorer_name()}};
    io::RunAttributes attrs;
    attrs.config_json = cfg_json.dump();
    attrs.tagflow_version = TAGFLOW_VERSION;
    attrs.world_size = size;
    attrs.t0_unix = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    io::RunFile run = io::RunFile::create(MPI_COMM_WORLD, o.out + "/tagflow.h5", attrs);

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
    train::bump_versions(params);
    const model::HfConfig& cfg = m->config();
    print0(
        "tagflow %s sft: data %s (%ld rows, %lu skipped over --max-prompt-tokens), %d rank%s x %d thread%s, model %s "
        "d=%ld layers=%ld heads=%ld/%ld ff=%ld vocab=%ld positions=%ld (%ld parameters)%s%s\n",
        TAGFLOW_VERSION, o.data.c_str(), static_cast<long>(rows),
        static_cast<unsigned long>(d.train().skipped_over_limit()), size, size == 1 ? "" : "s", threads,
        threads == 1 ? "" : "s", cfg.model_type.c_str(), static_cast<long>(cfg.hidden_size),
        static_cast<long>(cfg.num_hidden_layers), static_cast<long>(cfg.num_attention_heads),
        static_cast<long>(cfg.num_key_value_heads), static_cast<long>(cfg.intermediate_size),
        static_cast<long>(cfg.vocab_size), static_cast<long>(cfg.max_position_embeddings), static_cast<long>(n_params),
        o.init.empty() ? "" : ", from ", o.init.c_str());
    const std::string epochs_text = dopt.epochs > 0
                                        ? std::to_string(dopt.epochs) + " epoch" + (dopt.epochs == 1 ? "" : "s")
                                        : std::string("epochs until --steps");
    print0(
        "steps %ld (%s), batch %ld, lr %g (warm-up %ld, cosine to %g), weight decay %g, seed %ld; "
        "tokenizer %s\n",
        static_cast<long>(o.steps), epochs_text.c_str(), static_cast<long>(o.batch), o.lr, static_cast<long>(o.warmup),
        o.lr / 10, o.weight_decay, static_cast<long>(o.seed), d.tokenizer_path().c_str());
    if (d.has_val()) {
        const std::string kinds = o.val_samples > 1 ? " and mean@" + std::to_string(o.val_samples) : std::string();
        print0("validation: %s (%ld rows), greedy%s, budget %d tokens, reward %s\n", o.val_data.c_str(),
               static_cast<long>(d.val_total()), kinds.c_str(), val_budget, d.scorer_name().c_str());
    }

    const auto t_start = std::chrono::steady_clock::now();
    auto seconds = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count(); };
    std::unique_ptr<rollout::InferenceEngine> engine;
    ValOptions vo;
    vo.max_tokens = val_budget;
    vo.samples = o.val_samples;
    vo.temperature = o.val_temperature;
    vo.seed = static_cast<uint64_t>(o.seed);
    vo.positions = cfg.max_position_embeddings;
    std::vector<std::pair<int64_t, ValResult>> curve;
    auto do_eval = [&](int64_t step) {
        if (!d.has_val()) return std::string();
        if (!engine) {
            rollout::InferenceConfig ec;
            ec.max_batch = 128;
            engine = std::make_unique<rollout::InferenceEngine>(model::LlamaModel(m), ec);
        }
        m->eval();
        ValResult local = validate(*engine, d.tokenizer(), d.val_rows(), *d.val_scorer(), vo);
        m->train();
        ValResult all = reduce_validation(local, MPI_COMM_WORLD);
        run.append_eval(rank == 0 ? eval_records(all, static_cast<int32_t>(step), val_task_name(o.val_data))
                                  : std::vector<io::EvalRecord>{});
        run.flush();
        curve.emplace_back(step, all);
        return describe(all);
    };
    const std::string v0 = do_eval(0);
    if (d.has_val()) print0("step 0/%ld: val %s, %.1fs\n", static_cast<long>(o.steps), v0.c_str(), seconds());

    torch::optim::AdamW opt(m->parameters(),
                            torch::optim::AdamWOptions(o.lr).betas({0.9, 0.98}).weight_decay(o.weight_decay));
    const int64_t log_every = o.log_every > 0 ? o.log_every : std::max<int64_t>(1, o.steps / 20);
    auto unix_now = [] {
        return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    };
    double loss_acc = 0, tok_acc = 0, last_loss = 0;
    int64_t steps_done = 0;
    for (int64_t step = 0; step < o.steps; ++step) {
        const double t0 = unix_now();
        int64_t taken = 0;
        const std::vector<SftSeq> seqs = d.next_batch(o.batch, rank, size, &taken);
        if (taken == 0) break;  // the epochs are done
        const Batch b = pack(seqs, nullptr, d.stop_ids().front());
        const auto [loss_sum, tokens] = sft_step(*m, opt, coll, params, b, lr_at(o, step), o.grad_clip, true);
        last_loss = loss_sum / std::max(1.0, tokens);
        loss_acc += loss_sum;
        tok_acc += tokens;
        steps_done = step + 1;
        io::StepRecord sr;
        sr.step = static_cast<int32_t>(step + 1);
        sr.t_start = t0 - attrs.t0_unix;
        sr.t_end = unix_now() - attrs.t0_unix;
        sr.policy_version = static_cast<int32_t>(step + 1);
        sr.samples = taken;
        sr.tokens = static_cast<int64_t>(tokens);
        sr.loss = static_cast<float>(last_loss);
        run.append_steps(rank == 0 ? std::vector<io::StepRecord>{sr} : std::vector<io::StepRecord>{});
        const bool last = step + 1 == o.steps || d.sampler().finished();
        const bool eval_now = (o.eval_every > 0 && (step + 1) % o.eval_every == 0) || last;
        const std::string v = eval_now ? do_eval(step + 1) : std::string();
        if ((step + 1) % log_every == 0 || last || !v.empty()) {
            print0("step %ld/%ld: loss %.4f per response token, lr %.2e, epoch %lu%s%s, %.1fs\n",
                   static_cast<long>(step + 1), static_cast<long>(o.steps), loss_acc / std::max(1.0, tok_acc),
                   lr_at(o, step), static_cast<unsigned long>(d.sampler().completed_epochs()),
                   v.empty() ? "" : ", val ", v.c_str(), seconds());
            loss_acc = tok_acc = 0;
        }
        if (!eval_now) run.flush();
        if (last) break;
    }
    const double elapsed = seconds();

    if (rank == 0) {
        (void)model::write_hf_dir(*m, model_dir, out_export);
        nlohmann::ordered_json j = cfg_json;
        j["rows"] = rows;
        j["steps_done"] = steps_done;
        j["world_size"] = size;
        j["parameters"] = n_params;
        j["final_loss"] = last_loss;
        j["seconds"] = elapsed;
        j["model"] = model_dir;
        j["eval"] = nlohmann::ordered_json::array();
        for (const auto& [step, r] : curve) {
            nlohmann::ordered_json e = {{"step", step}, {"score", r.overall.greedy()}, {"n", r.overall.n}};
            if (r.k > 1) e["mean_at_k"] = r.overall.mean_at_k();
            for (const auto& [src, v] : r.sources) e["data_sources"][src] = v.greedy();
            j["eval"].push_back(e);
        }
        if (!curve.empty()) {
            j["val_before"] = curve.front().second.overall.greedy();
            j["val_after"] = curve.back().second.overall.greedy();
        }
        std::ofstream f(o.out + "/sft.json");
        f << j.dump(2) << "\n";
        if (!f) throw Error("cannot write " + o.out + "/sft.json");
    }
    run.close();
    TAGFLOW_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    if (!curve.empty()) {
        const ValResult& last = curve.back().second;
        if (!last.greedy.empty() && rank == 0)
            print0("sample (validation row %lu, score %.2f): %s\n", static_cast<unsigned long>(last.greedy[0].row),
                   last.greedy[0].score, last.greedy[0].text.substr(0, 200).c_str());
        print0("summary: %ld steps in %.1fs; validation greedy %.3f -> %.3f (%ld rows)\n",
               static_cast<long>(steps_done), elapsed, curve.front().second.overall.greedy(), last.overall.greedy(),
               static_cast<long>(last.overall.n));
    } else {
        print0("summary: %ld steps in %.1fs; final loss %.4f per response token\n", static_cast<long>(steps_done),
               elapsed, last_loss);
    }
    print0("checkpoint: %s\n", model_dir.c_str());
    return 0;
}

}  // namespace

std::vector<std::vector<int32_t>> greedy_decode(model::LlamaModelImpl& model,
                                                const std::vector<std::vector<int32_t>>& prompts, int32_t max_tokens,
                                                int32_t eos, int64_t batch_size) {
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
                for (size_t t = 0; t < len; ++t)
                    acc[static_cast<int64_t>(r - lo)][static_cast<int64_t>(t)] = prompts[all[r]][t];
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
    if (const rollout::AgentLoop* loop = rollout::as_agent_loop(task))
        return score_agent_greedy(model, task, *loop, indices);
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
    if (!o.data.empty()) return sft_data_run(o, vm, rank, size);

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
            throw ConfigError("--init " + o.init + ": vocab_size " + std::to_string(c.vocab_size) +
                              " is smaller than task " + o.task + "'s " + std::to_string(task->vocab_size()));
        const int64_t need = task->max_prompt_tokens() + task->max_response_tokens();
        if (c.max_position_embeddings < need)
            throw ConfigError("--init " + o.init + ": max_position_embeddings " +
                              std::to_string(c.max_position_embeddings) + " is below task " + o.task + "'s " +
                              std::to_string(need) + " tokens");
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
    print0(
        "tagflow %s sft: task %s, %d rank%s x %d thread%s, model %s d=%ld layers=%ld heads=%ld/%ld ff=%ld vocab=%ld "
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
    double loss_acc = 0, tok_acc = 0, last_loss = 0;
    for (int64_t step = 0; step < o.steps; ++step) {
        const double lr = lr_at(o, step);
        const auto [loss_sum, global_tokens] =
            sft_step(*m, opt, coll, params, make_batch(*task, step * o.batch, o.batch, rank, size), lr, o.grad_clip);
        last_loss = loss_sum / global_tokens;
        loss_acc += loss_sum;
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
