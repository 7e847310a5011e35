// SPDX-License-Identifier: Apache-2.0
// sft_command: `tagflow sft`. With --task, step s trains on the task's training prompts
// s*B .. s*B+B-1 paired with their reference solutions, rank r taking every size-th of them; with
// --data, on a data set's rows in a seeded shuffle per epoch (sft_data.hpp), validated on
// --val-data into OUT/tagflow.h5. Every rank starts from rank 0's weights; one step is
// sft_step.hpp's; the options are sft_options.hpp's. Held-out accuracy is greedy exact match; the
// result is a Hugging Face checkpoint directory, OUT/model.
#include "cmd/sft_command.hpp"
#include "cmd/sft_data.hpp"
#include "cmd/sft_options.hpp"
#include "cmd/sft_step.hpp"

#include <ATen/Parallel.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <chrono>
#include <cstring>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
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
#include "step/validation.hpp"
#include "cmd/train_command.hpp"
#include "tagflow/config.hpp"
#include "train/collectives_mpi.hpp"
#include "train/delta_sync.hpp"

namespace po = boost::program_options;
namespace fs = std::filesystem;

namespace tagflow::cmd {
namespace {

// The progress line's loss over a logging window: per response token of the steps that were
// applied, or a note when every step of the window was skipped (a NaN/inf loss or gradient).
std::string window_loss(double loss_acc, double tok_acc) {
    if (tok_acc <= 0) return "loss n/a (every step since the last line skipped: non-finite loss or gradient)";
    char b[64];
    std::snprintf(b, sizeof b, "loss %.4f per response token", loss_acc / tok_acc);
    return b;
}

std::vector<int32_t> before_eos(const std::vector<int32_t>& r, int32_t eos) {
    return {r.begin(), std::find(r.begin(), r.end(), eos)};
}

// round up to a multiple of 64
int64_t round64(int64_t x) { return (x + 63) / 64 * 64; }

model::FreshShape shape(const SftOptions& o) { return {o.d_model, o.d_ff, o.layers, o.heads, o.kv_heads}; }

model::HfConfig new_config(const SftOptions& o, const rollout::Task& task) {
    model::HfConfig c = model::fresh_config(shape(o), task.vocab_size(),
                                            o.tokenizer.empty() ? "" : model::resolve_tokenizer_json(o.tokenizer),
                                            round64(task.max_prompt_tokens() + task.max_response_tokens()));
    c.validate("tagflow sft");
    return c;
}

struct EvalPoint {
    int64_t step = 0;
    double accuracy = 0, reward = 0;
};

// Collective over MPI_COMM_WORLD: every rank scores every size-th held-out prompt.
EvalPoint evaluate(model::LlamaModelImpl& m, const rollout::Task& task, int64_t n, int rank, int size, int64_t step) {
    std::vector<int64_t> idx;
    for (int64_t i = rank; i < n; i += size) idx.push_back(i);
    const sched::GreedyScore s = score_greedy(m, task, idx);
    double local[2] = {static_cast<double>(s.exact), s.reward_sum}, global[2] = {0, 0};
    TAGFLOW_MPI_CHECK(MPI_Allreduce(local, global, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
    return {step, global[0] / static_cast<double>(n), global[1] / static_cast<double>(n)};
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
        model::HfConfig c =
            model::fresh_config(shape(o), 0, model::resolve_tokenizer_json(d.tokenizer_path()),
                                round64(std::max<int64_t>(d.longest_sequence(), d.longest_val_prompt() + val_budget)));
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
    m->model->activation_checkpointing = o.activation_checkpointing;
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

    train::MpiCollectives coll(MPI_COMM_WORLD, 16u << 20);
    SharedWeights w = share_weights(*m, coll, o.threads);
    const int threads = w.threads;
    std::vector<at::Tensor>& params = w.params;
    const int64_t n_params = w.n_params;
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
    const sched::ValOptions vo = sched::val_options(o, val_budget, cfg.max_position_embeddings);
    std::vector<std::pair<int64_t, sched::ValResult>> curve;
    auto do_eval = [&](int64_t step) {
        if (!d.has_val()) return std::string();
        if (!engine) {
            rollout::InferenceConfig ec;
            ec.max_batch = 128;
            engine = std::make_unique<rollout::InferenceEngine>(model::LlamaModel(m), ec);
        }
        m->eval();
        sched::ValResult local = validate(*engine, d.tokenizer(), d.val_rows(), *d.val_scorer(), vo);
        m->train();
        sched::ValResult all = reduce_validation(local, MPI_COMM_WORLD);
        run.append_eval(rank == 0
                            ? sched::eval_records(all, static_cast<int32_t>(step), sched::val_task_name(o.val_data))
                            : std::vector<io::EvalRecord>{});
        run.flush();
        curve.emplace_back(step, all);
        return sched::describe(all);
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
    BadSteps bad{o.max_bad_steps};
    for (int64_t step = 0; step < o.steps; ++step) {
        const double t0 = unix_now();
        int64_t taken = 0;
        const std::vector<SftSeq> seqs = d.next_batch(o.batch, rank, size, &taken);
        if (taken == 0) break;  // the epochs are done
        const Batch b = pack(seqs, nullptr, d.stop_ids().front());
        const SftStep r =
            sft_step(*m, opt, coll, params, b, lr_at(o, step), o.grad_clip, true, test_poisoned(step + 1, rank));
        const double loss_sum = r.skipped ? 0.0 : r.loss_sum, tokens = r.tokens;
        if (!r.skipped) {
            last_loss = loss_sum / std::max(1.0, tokens);
            loss_acc += loss_sum;
            tok_acc += tokens;
        }
        bad.record(r.skipped, step + 1);
        steps_done = step + 1;
        io::StepRecord sr;
        sr.step = static_cast<int32_t>(step + 1);
        sr.t_start = t0 - attrs.t0_unix;
        sr.t_end = unix_now() - attrs.t0_unix;
        sr.policy_version = static_cast<int32_t>(step + 1);
        sr.samples = taken;
        sr.tokens = static_cast<int64_t>(tokens);
        sr.loss = r.skipped ? std::numeric_limits<float>::quiet_NaN() : static_cast<float>(last_loss);
        sr.skipped_updates = r.skipped ? 1 : 0;
        sr.lr = lr_at(o, step);
        run.append_steps(rank == 0 ? std::vector<io::StepRecord>{sr} : std::vector<io::StepRecord>{});
        const bool last = step + 1 == o.steps || d.sampler().finished();
        const bool eval_now = (o.eval_every > 0 && (step + 1) % o.eval_every == 0) || last;
        const std::string v = eval_now ? do_eval(step + 1) : std::string();
        if ((step + 1) % log_every == 0 || last || !v.empty()) {
            print0("step %ld/%ld: %s, lr %.2e, epoch %lu%s%s, %.1fs\n", static_cast<long>(step + 1),
                   static_cast<long>(o.steps), window_loss(loss_acc, tok_acc).c_str(), lr_at(o, step),
                   static_cast<unsigned long>(d.sampler().completed_epochs()), v.empty() ? "" : ", val ", v.c_str(),
                   seconds());
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
        const sched::ValResult& last = curve.back().second;
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

sched::GreedyScore score_greedy(model::LlamaModelImpl& model, const rollout::Task& task,
                                const std::vector<int64_t>& indices) {
    // Multi-turn tasks: greedy sessions with the tool (sched/agent_rollout.hpp).
    if (const rollout::AgentLoop* loop = rollout::as_agent_loop(task))
        return sched::score_agent_greedy(model, task, *loop, indices);
    std::vector<std::vector<int32_t>> prompts;
    for (int64_t i : indices) prompts.push_back(task.eval_prompt(i));
    const auto responses = greedy_decode(model, prompts, task.max_response_tokens(), task.eos_token());
    sched::GreedyScore s;
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
    if (!parse_sft_options(argc, argv, o, vm)) return 0;
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
    m->model->activation_checkpointing = o.activation_checkpointing;
    model::HfExport out_export;
    out_export.dtype = model::parse_export_dtype(o.export_dtype, o.init.empty() ? "" : m->config().torch_dtype);
    out_export.source_dir = o.init;
    out_export.tokenizer_json = model::export_tokenizer(o.tokenizer, o.init);
    out_export.stop_ids = {task->eos_token()};

    // ---- from here on errors abort the job ----
    train::MpiCollectives coll(MPI_COMM_WORLD, 16u << 20);
    SharedWeights w = share_weights(*m, coll, o.threads);
    const int threads = w.threads;
    std::vector<at::Tensor>& params = w.params;
    const int64_t n_params = w.n_params;
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
    BadSteps bad{o.max_bad_steps};
    for (int64_t step = 0; step < o.steps; ++step) {
        const double lr = lr_at(o, step);
        const SftStep r = sft_step(*m, opt, coll, params, make_batch(*task, step * o.batch, o.batch, rank, size), lr,
                                   o.grad_clip, false, test_poisoned(step + 1, rank));
        bad.record(r.skipped, step + 1);
        if (!r.skipped) {
            last_loss = r.loss_sum / r.tokens;
            loss_acc += r.loss_sum;
            tok_acc += r.tokens;
        }
        if ((step + 1) % log_every == 0 || step + 1 == o.steps) {
            print0("step %ld/%ld: %s, lr %.2e, %.1fs\n", static_cast<long>(step + 1), static_cast<long>(o.steps),
                   window_loss(loss_acc, tok_acc).c_str(), lr, seconds());
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

}  // namespace tagflow::cmd
