// SPDX-License-Identifier: Apache-2.0
#include "sched/sync_scheduler.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>
#include <thread>
#include <unordered_map>

#include "ckpt/checkpoint_mpi.hpp"
#include "ckpt/policy_dir.hpp"
#include "ckpt/signals.hpp"
#include "cluster/roles.hpp"
#include "cluster/tags.hpp"
#include "common/error.hpp"
#include "common/log.hpp"
#include "config/options.hpp"
#include "health/status.hpp"
#include "io/run_file.hpp"
#include "model/llama.hpp"
#include "profile/clock_sync.hpp"
#include "profile/timeline.hpp"
#include "rollout/agent_loop.hpp"
#include "rollout/engine.hpp"
#include "rollout/sampling.hpp"
#include "rollout/task.hpp"
#include "sched/agent_rollout.hpp"
#include "sched/data_task.hpp"
#include "sched/exchange.hpp"
#include "sched/rl_trainer.hpp"
#include "sched/sample_row.hpp"
#include "sched/validation.hpp"
#include "train/delta_sync_mpi.hpp"
#include "traj/tree_file_mpi.hpp"
#include "traj/trajectory_manager.hpp"
#include "tagflow/config.hpp"

namespace tagflow::sched {
namespace {

using io::SpanKind;

// Values the train root shares with every rank after a step (one MPI_Allreduce SUM where only
// the train root contributes them, plus every rank's idle seconds).
enum StatSlot {
    kLoss,
    kKl,
    kEntropy,
    kClip,
    kLpDiff,
    kTokens,
    kIsMean,  // off-policy correction statistics (TrainReport::is_weight_mean ...), the root's
    kIsMax,
    kRejected,
    kTrainReal,   // TrainReport::real_tokens (the train root's: the whole group's)
    kTrainSlots,  // TrainReport::token_slots
    kEval,
    kSyncBytes,
    kSyncT0,
    kSyncT1,
    kIdle,
    kSigTerm,
    kSigUsr1,
    kSigInt,
    kSigHup,   // ranks that received each requeue signal (ckpt/signals.hpp): checkpoint, exit 75
    kSkipped,  // optimiser updates dropped for a NaN/inf loss or gradient (TrainReport::skipped_updates)
    kNumStats
};

class SyncScheduler final : public Scheduler {
public:
    SyncScheduler(const config::Options& opt, cluster::Roles& roles, io::RunFile& run, double t0_unix,
                  std::unique_ptr<rollout::Task> task, const ckpt::Plan* plan)
        : opt_(opt),
          roles_(roles),
          run_(run),
          clock_(t0_unix),
          timeline_(clock_, roles.world_rank),
          task_(std::move(task)) {
        max_new_ = opt.max_new_tokens > 0 ? opt.max_new_tokens : task_->max_response_tokens();
        policy_ = make_policy(opt, *task_, task_->max_prompt_tokens() + max_new_);
        // Every parameter becomes a view of one flat buffer before the optimiser or the engine
        // sees it: a weight-sync bucket is then one piece of memory that MPI_Bcast moves with no
        // packing (about the raw broadcast's speed; separate tensors reached 0.3-0.5 of it).
        train::share_one_buffer(policy_->parameters());
        trainer_ = std::make_unique<RlTrainer>(opt, roles, policy_);
        if (roles.is_rollout()) {
            rollout::InferenceConfig ec;
            ec.max_batch = opt.max_batch;
            engine_ = std::make_unique<rollout::InferenceEngine>(policy_, ec);
        }
        train::WeightSync::Options so;
        so.bucket_bytes = static_cast<size_t>(opt.bucket_mb * 1024.0 * 1024.0);
        so.delta = opt.sync_delta;
        wsync_ = std::make_unique<train::WeightSync>(so);
        int64_t n_params = 0;
        for (const auto& p : policy_->parameters()) n_params += p.numel();
        print_model_and_algorithm(opt, roles, policy_->config(), n_params);
        if (plan) {
            ckpt_ = *plan;
            have_ckpt_ = true;
            if (plan->resume) restore_weights();
        }
        // --data: the sampler is replicated on every rank (every rank takes the same P tickets per
        // step; sync mode drops nothing, so every ticket taken is trained in its step).
        data_ = as_data_task(*task_);
        if (data_) {
            const uint64_t rows = data_->dataset().size(), seed = static_cast<uint64_t>(opt.seed);
            const uint64_t epochs = static_cast<uint64_t>(opt.epochs);
            if (plan && plan->resume)
                sampler_.emplace(
                    data::EpochSampler::from_bytes(plan->manifest.get("data_sampler"), rows, seed, epochs));
            else sampler_.emplace(rows, seed, epochs);
            // --val-data: every rollout rank answers every n-th row (reduce_validation adds them up).
            if (data_->has_val() && roles.is_rollout())
                val_rows_ = data_->val_rows(static_cast<uint64_t>(roles.rollout.rank()),
                                            static_cast<uint64_t>(roles.rollout_ranks.size()));
        }
    }

    RunSummary run() override {
        RunSummary sum;
        sum.best_constant = task_->best_constant_score(opt_.eval_prompts);
        double total_samples = 0;
        const int32_t first_step = ckpt_.resume ? resume_from(sum, total_samples) : start(sum);
        if (!reward_error_.empty()) {  // the step-0 validation's reward failed (--reward-error fail)
            if (roles_.world_rank == 0) log_error("%s (--reward-error fail)", reward_error_.c_str());
            sum.exit_code = 1;
            return sum;
        }
        // A fresh run checkpoints its start too, so a job killed at any later moment can resume.
        if (have_ckpt_ && !ckpt_.resume) write_checkpoint(0, sum, total_samples);
        for (int32_t s = first_step; s < opt_.steps; ++s) {
            StepOut o = step(s);
            if (!o.reward_error.empty()) {
                // --reward-error fail: nothing of step s was trained or written; the checkpoint (the
                // weights after s steps, the tickets of step s back in front) resumes it.
                if (have_ckpt_) write_checkpoint(s, sum, total_samples);
                if (roles_.world_rank == 0)
                    log_error("%s (--reward-error fail; %s)", o.reward_error.c_str(),
                              have_ckpt_ ? "checkpoint written, the run resumes at this step" : "no checkpoint");
                sum.steps = s;
                sum.elapsed = clock_.now();
                sum.exit_code = 1;
                return sum;
            }
            total_samples += static_cast<double>(o.row.samples);
            health::status_board().step_done(s + 1, static_cast<int64_t>(total_samples), o.row.samples_per_s, 0.0, 0);
            if (s == 0) sum.first_reward = o.row.reward_mean;
            sum.last_reward = o.row.reward_mean;
            if (o.eval >= 0) {
                sum.last_eval = o.eval;
                sum.best_eval = std::max(sum.best_eval, o.eval);
            }
            char evs[32] = "";
            if (o.eval >= 0) snprintf(evs, sizeof evs, "  eval %.3f", o.eval);
            const std::string ev = o.val.empty() ? std::string(evs) : "  val " + o.val;
            print0("step %5d/%-5lld reward %.3f ± %.3f%s  loss %+.4f  samples/s %7.1f  idle %4.1f%%  elapsed %6.1fs\n",
                   s + 1, static_cast<long long>(opt_.steps), o.row.reward_mean, o.row.reward_std, ev.c_str(),
                   o.row.loss, o.row.samples_per_s, 100.0 * o.row.idle_frac, clock_.now());
            if (!o.val_error.empty()) {
                // --val-data's reward failed (--reward-error fail) after step s trained: the
                // checkpoint holds its weights, the resume goes on with the next step.
                if (have_ckpt_) write_checkpoint(s + 1, sum, total_samples);
                if (roles_.world_rank == 0)
                    log_error("%s (--reward-error fail; %s)", o.val_error.c_str(),
                              have_ckpt_ ? "checkpoint written after this step" : "no checkpoint");
                sum.steps = s + 1;
                sum.elapsed = clock_.now();
                sum.exit_code = 1;
                return sum;
            }
            const int32_t done = s + 1;
            std::string warning;
            const bool too_many_bad = bad_steps_.record(done, o.row.skipped_updates, &warning);
            if (!warning.empty()) print0("%s", warning.c_str());
            if (too_many_bad) {
                // Same verdict on every rank (the counts were reduced with this step's statistics);
                // the dropped updates left the weights as they were after the last good step.
                run_.append_timeline(timeline_.take());
                run_.flush();
                if (have_ckpt_) write_checkpoint(done, sum, total_samples);
                if (roles_.world_rank == 0) log_error("%s", bad_steps_.stop_message().c_str());
                sum.steps = done;
                sum.elapsed = clock_.now();
                sum.samples_per_s = total_samples / std::max(1e-9, sum.elapsed);
                sum.exit_code = kExitBadSteps;
                return sum;
            }
            if (o.signal != 0 && done < opt_.steps && have_ckpt_) {
                // Every rank saw the same flags (reduced with this step's statistics).
                run_.append_timeline(timeline_.take());
                run_.flush();
                write_checkpoint(done, sum, total_samples);
                print0("tagflow: checkpoint at step %d after %s; exiting for requeue\n", done,
                       ckpt::signal_name(o.signal));
                sum.steps = done;
                sum.elapsed = clock_.now();
                sum.samples_per_s = total_samples / std::max(1e-9, sum.elapsed);
                sum.exit_code = ckpt::kExitRequeue;
                return sum;
            }
            if (have_ckpt_ && ckpt_.every > 0 && done % ckpt_.every == 0 && done < opt_.steps)
                write_checkpoint(done, sum, total_samples);
        }
        if (rewards_failed_ > 0)
            log_warn("rank %d: %llu rewards failed and were scored 0 (--reward-error zero)", roles_.world_rank,
                     static_cast<unsigned long long>(rewards_failed_));
        sum.steps = opt_.steps;
        sum.elapsed = clock_.now();
        sum.samples_per_s = total_samples / std::max(1e-9, sum.elapsed);
        // The last io spans reach the file too.
        run_.append_timeline(timeline_.take());
        run_.flush();
        if (have_ckpt_) write_checkpoint(static_cast<int32_t>(opt_.steps), sum, total_samples);  // the end
        return sum;
    }

private:
    struct StepOut {
        io::StepRecord row;
        double eval = -1;
        std::string val;           // --val-data: describe() of this step's validation ("" when none)
        std::string val_error;     // --val-data: its reward failed under --reward-error fail (every rank)
        int signal = 0;            // SIGUSR1, SIGTERM, SIGINT or SIGHUP when any rank received one (same on every rank)
        std::string reward_error;  // --data, --reward-error fail: a failed reward stopped the step (every rank)
    };

    // A fresh run: version-0 weights to every rollout rank, the step-0 evaluation. Returns 0.
    int32_t start(RunSummary& sum) {
        // Version 0: every rollout rank starts from the train root's initial weights.
        sync_weights(0);
        if (data_) {  // no held-out set of a task; --val-data's rows instead
            std::vector<io::SyncRecord> syncs;
            if (roles_.is_train_root()) syncs.push_back(sync_record(0, last_sync_));
            print0("step %5d/%-5lld --data %s: %llu rows (%llu skipped over --max-prompt-tokens), %lld epoch%s\n", 0,
                   static_cast<long long>(opt_.steps), opt_.data.c_str(),
                   static_cast<unsigned long long>(data_->dataset().size()),
                   static_cast<unsigned long long>(data_->dataset().skipped_over_limit()),
                   static_cast<long long>(opt_.epochs), opt_.epochs == 1 ? "" : "s");
            std::vector<io::EvalRecord> evals;
            if (data_->has_val()) {
                print0("step %5d/%-5lld --val-data %s: %llu rows (%llu skipped over --max-prompt-tokens), greedy%s\n",
                       0, static_cast<long long>(opt_.steps), opt_.val_data.c_str(),
                       static_cast<unsigned long long>(data_->val().size()),
                       static_cast<unsigned long long>(data_->val().skipped_over_limit()),
                       opt_.val_samples > 1 ? (" and mean@" + std::to_string(opt_.val_samples)).c_str() : "");
                const std::optional<ValResult> v = validate_data(0, &evals);
                if (!v) return 0;  // a failed reward: run() stops
                sum.first_eval = sum.best_eval = sum.last_eval = v->overall.greedy();
                print0("step %5d/%-5lld val %s\n", 0, static_cast<long long>(opt_.steps), describe(*v).c_str());
            }
            write_rows({}, {}, {}, evals, syncs);
            return 0;
        }
        double eval0 = evaluate_local(0);
        std::vector<io::EvalRecord> evals;
        if (is_eval_rank()) evals.push_back({0, task_->name(), static_cast<float>(eval0), opt_.eval_prompts});
        {
            profile::Span wait(timeline_, SpanKind::kIdle, 0);  // the other ranks wait for the evaluation
            TAGFLOW_MPI_CHECK(MPI_Bcast(&eval0, 1, MPI_DOUBLE, roles_.rollout_ranks.front(), MPI_COMM_WORLD));
        }
        sum.first_eval = sum.best_eval = sum.last_eval = eval0;
        std::vector<io::SyncRecord> syncs;
        if (roles_.is_train_root()) syncs.push_back(sync_record(0, last_sync_));
        write_rows({}, {}, {}, evals, syncs);
        print0("step %5d/%-5lld eval %.3f (held-out greedy; best constant output %.3f)\n", 0,
               static_cast<long long>(opt_.steps), eval0, sum.best_constant);

        return 0;
    }

    // ---- checkpoints (mpi_app/ckpt, share/doc/checkpoints.md) ----

    // Constructor, when resuming: every rank loads the policy weights, the trainer ranks their
    // engine states (weights, AdamW moments, step); then the flat weight buffer is rebuilt
    // (LibTorch's archive load gives the actor's parameters new storage).
    void restore_weights() {
        const std::string& dir = ckpt_.dir;
        try {
            torch::NoGradGuard ng;
            policy_->load_hf_state_dict(model::load_safetensors(ckpt::policy_weights_file(ckpt_.manifest, dir)));
            trainer_->load_state(dir);
        } catch (const Error& e) {
            throw Error(std::string("resume: ") + e.what());
        }
        train::share_one_buffer(policy_->parameters());
    }

    // run(), when resuming: the summary so far from the manifest, a full (unrecorded) weight
    // sync so every rank's WeightSync state matches its weights. Returns the first step to run.
    int32_t resume_from(RunSummary& sum, double& total_samples) {
        const ckpt::Manifest& m = ckpt_.manifest;
        const auto step = static_cast<int32_t>(m.get_int("step"));
        get_run_summary(m, sum, total_samples);
        sync_weights(step);
        print0("tagflow: resumed from checkpoint at step %d (policy version %lld, next prompt group %lld)\n", step,
               static_cast<long long>(m.get_int("policy_version")), static_cast<long long>(m.get_int("next_group")));
        return step;
    }

    // COLLECTIVE over MPI_COMM_WORLD (and the run file's communicator): new /ranks rows with the
    // clock offsets measured now (profile/clock_sync.hpp).
    void remeasure_clocks() {
        const std::vector<profile::ClockOffset> clocks = profile::measure_clock_offsets(MPI_COMM_WORLD, 0);
        std::vector<io::RankRecord> rows;
        if (roles_.world_rank == 0)
            for (int r = 0; r < roles_.world_size; ++r) {
                const auto k = static_cast<size_t>(r);
                io::RankRecord rr;
                rr.rank = r;
                rr.host = roles_.hosts[k];
                rr.tags = cluster::tags_to_string(roles_.all_tags[k]);
                rr.tag_source = roles_.sources[k];
                rr.gpus = 0;
                rr.clock_offset = clocks[k].offset_s;
                rr.clock_error = clocks[k].error_s;
                rows.push_back(rr);
            }
        run_.append_ranks(rows);
    }

    // COLLECTIVE over MPI_COMM_WORLD, after a flush of the run file: `done` steps trained. The
    // train root writes the policy (Hugging Face dir) and the trainer states, the first critic
    // rank the critic; rank 0 writes the manifest and swaps the directory in atomically.
    void write_checkpoint(int32_t done, const RunSummary& sum, double total_samples) {
        profile::Span span(timeline_, SpanKind::kCheckpoint, done);
        const std::string tmp = ckpt::staging_dir(ckpt_.out, done);
        const bool root = roles_.world_rank == 0;
        if (root) ckpt::prepare_staging(tmp);
        TAGFLOW_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
        ckpt::StagingCleanup cleanup(tmp);  // a rank whose write fails (a full disk) removes the partial dir
        // Clocks drift: every rank measures its offset to rank 0 again here (all ranks are in the
        // checkpoint) and rank 0 appends the rows to /ranks before the manifest takes the sizes;
        // `tagflow trace` applies each rank's latest row. Not at a fresh run's step 0 (just measured).
        if (done > 0 || ckpt_.resume) remeasure_clocks();
        std::vector<ckpt::FileEntry> files;
        if (roles_.is_train_root()) {
            files = ckpt::write_policy(tmp, *policy_, policy_export(opt_, *task_, max_new_));
        }
        for (const std::string& name : trainer_->save_state(tmp)) files.push_back(ckpt::describe_file(tmp, name));
        std::vector<ckpt::FileEntry> all = ckpt::gather_files(MPI_COMM_WORLD, 0, files);
        if (root) {
            const int64_t P = opt_.prompts_per_step, G = opt_.group_size;
            ckpt::Manifest m;
            put_run_keys(m, opt_, task_->name(), roles_.world_size, done, done, sum, total_samples);
            m.set_int("next_group", static_cast<int64_t>(done) * P);  // the dataset cursor
            m.set_int("next_sample_id", static_cast<int64_t>(done) * P * G);
            if (data_) {
                m.set("data_sampler", sampler_->to_bytes());  // tickets taken but not trained come back first
                m.set_int("data_rows", static_cast<int64_t>(data_->dataset().size()));
            }
            m.set_double("t", clock_.now());
            ckpt::put_sizes(m, run_.sizes());
            m.files = all;
            ckpt::write_manifest(tmp, m);
            ckpt::commit(ckpt_.out, tmp);
        }
        TAGFLOW_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    }

    // COLLECTIVE (sync communicator): train root -> every rollout rank, flat buckets (only the
    // changed weights with --sync-delta). Version v = the weights after v training steps.
    // Waiting for the train root to finish training is idle time (added to *idle), not sync:
    // members first meet in a non-blocking barrier, tested with short sleeps, in an idle span.
    train::WeightSyncStats sync_weights(int32_t version, double* idle = nullptr) {
        train::WeightSyncStats st;
        if (roles_.sync.is_null()) return st;
        {
            profile::Span wait(timeline_, SpanKind::kIdle, std::max(0, version - 1));
            MPI_Request rq = MPI_REQUEST_NULL;
            TAGFLOW_MPI_CHECK(MPI_Ibarrier(roles_.sync.get(), &rq));
            for (int done = 0;;) {
                TAGFLOW_MPI_CHECK(MPI_Test(&rq, &done, MPI_STATUS_IGNORE));
                if (done) break;
                std::this_thread::sleep_for(std::chrono::microseconds(200));
            }
            const double waited = wait.end();
            if (idle) *idle += waited;
        }
        profile::Span span(timeline_, SpanKind::kWeightSync, version);
        st = wsync_->broadcast(params(), version, roles_.sync.get(), 0);
        last_sync_t0_ = clock_.now() - st.seconds;
        last_sync_t1_ = clock_.now();
        last_sync_ = st;
        return st;
    }

    io::SyncRecord sync_record(int32_t version, const train::WeightSyncStats& st) const {
        io::SyncRecord r;
        r.version = version;
        r.bytes = st.bytes;
        r.t_start = last_sync_t0_;
        r.t_end = last_sync_t1_;
        r.mode = wsync_->mode();
        r.dense_bytes = st.dense_bytes;
        r.buckets = st.buckets;  // gbps: the writer computes it from bytes and t_end - t_start
        return r;
    }

    // The parameters themselves (WeightSync bumps their version counters when it writes them).
    std::vector<at::Tensor> params() { return policy_->parameters(); }

    // Held-out greedy evaluation is generation, so it runs on a rollout rank (the first one,
    // which holds the newest weights right after the sync); -1 on every other rank.
    bool is_eval_rank() const { return roles_.world_rank == roles_.rollout_ranks.front(); }
    double evaluate_local(int32_t step) {
        if (!is_eval_rank()) return -1;
        torch::NoGradGuard ng;
        profile::Span span(timeline_, SpanKind::kRollout, step);
        // Multi-turn tasks: greedy sessions with the tool (sched/agent_rollout.hpp).
        if (const rollout::AgentLoop* loop = rollout::as_agent_loop(*task_))
            return evaluate_agent_task(*engine_, *task_, *loop, opt_.eval_prompts);
        return rollout::evaluate(policy_, *task_, opt_.eval_prompts, opt_.max_batch);
    }

    // --val-data, COLLECTIVE over MPI_COMM_WORLD: every rollout rank answers its rows with the
    // newest weights (sched/validation.hpp), the sums are added on every rank; the eval rank adds
    // the /eval rows of `step` to *evals. A reward that fails under --reward-error fail: nullopt on
    // every rank and reward_error_ holds the lowest rank's cause.
    std::optional<ValResult> validate_data(int32_t step, std::vector<io::EvalRecord>* evals) {
        ValResult local;
        if (roles_.is_rollout() && reward_error_.empty()) {
            torch::NoGradGuard ng;
            profile::Span span(timeline_, SpanKind::kRollout, step);
            ValOptions vo;
            vo.max_tokens = opt_.val_max_tokens > 0 ? opt_.val_max_tokens : max_new_;
            vo.samples = opt_.val_samples;
            vo.temperature = opt_.val_temperature;
            vo.seed = static_cast<uint64_t>(opt_.seed);
            vo.positions = policy_->config().max_position_embeddings;
            try {
                local = validate(*engine_, data_->tokenizer(), val_rows_, data_->scorer(), vo);
            } catch (const Error& e) {
                reward_error_ = e.what();
            }
        }
        const std::string failed = agree_reward_error();
        if (!failed.empty()) {
            reward_error_ = failed;
            return std::nullopt;
        }
        ValResult all;
        {
            profile::Span wait(timeline_, SpanKind::kIdle, step);
            all = reduce_validation(local, MPI_COMM_WORLD);
        }
        rewards_failed_ += static_cast<uint64_t>(local.failed);
        if (is_eval_rank())
            for (io::EvalRecord& e : eval_records(all, step, val_task_name(opt_.val_data))) evals->push_back(e);
        return all;
    }

    std::vector<RolloutSample> generate(int32_t s) {
        std::vector<RolloutSample> mine;
        if (!roles_.is_rollout()) return mine;
        profile::Span span(timeline_, SpanKind::kRollout, s);
        const int n_roll = static_cast<int>(roles_.rollout_ranks.size());
        const int my = roles_.rollout.rank();
        const int64_t P = opt_.prompts_per_step, G = opt_.group_size;
        std::vector<std::vector<int32_t>> prompts;
        std::vector<int64_t> groups;
        const int64_t n_groups = data_ ? static_cast<int64_t>(tickets_.size()) : P;
        for (int64_t j = my; j < n_groups; j += n_roll) {
            // --data: the group is its ticket, epoch x rows + row (so /samples' group names the epoch).
            int64_t g = data_ ? group_of(tickets_[static_cast<size_t>(j)]) : static_cast<int64_t>(s) * P + j;
            auto p = data_ ? data_->row_prompt(tickets_[static_cast<size_t>(j)].row) : task_->train_prompt(g);
            for (int64_t k = 0; k < G; ++k) {
                prompts.push_back(p);
                groups.push_back(g);
            }
        }
        if (prompts.empty()) return mine;
        // Multi-turn tasks: sessions through the agent loop, every turn in traj_ (sched/agent_rollout.hpp).
        if (const rollout::AgentLoop* loop = rollout::as_agent_loop(*task_))
            return generate_agent_samples(
                *engine_, *task_, *loop, opt_, prompts, groups, max_new_, s, roles_.world_rank,
                [this] { return clock_.now(); }, traj_, traj_leaf_);
        // One request per sample; its random stream depends only on the run seed and the
        // sample id, so samples do not change with the rank count or the batch they ran in.
        std::vector<int64_t> ids(prompts.size());
        for (size_t i = 0; i < prompts.size(); ++i) {
            ids[i] = groups[i] * G + static_cast<int64_t>(i % static_cast<size_t>(G));
            rollout::GenRequest rq;
            rq.id = static_cast<int64_t>(i);
            rq.prompt = prompts[i];
            rq.params = rollout_params(opt_, *task_, max_new_, ids[i]);
            if (data_ && !rq.params.stop_ids.empty()) rq.params.stop_ids = data_->stop_ids();
            engine_->submit(std::move(rq));
        }
        mine.resize(prompts.size());
        const double t_gen = clock_.now();
        engine_->run([&](const rollout::GenResult& g) {
            RolloutSample& r = mine[static_cast<size_t>(g.id)];
            const auto i = static_cast<size_t>(g.id);
            r.group = groups[i];
            r.id = ids[i];
            r.rank = roles_.world_rank;
            r.version = s;
            r.prompt = prompts[i];
            r.response = g.response;
            r.logprobs = g.logprobs;
            r.hit_eos = g.finish == FinishReason::kStop;
            if (data_)  // scored while the engine goes on (reward/scorer.hpp); collected below
                data_->scorer().submit({data_->reward_request(i, row_of(r.group), r.response)});
            else r.reward = task_->reward(r.prompt, r.response);
            r.t_done = clock_.now();
            // Token-level record of the request (prompt shared by its group in the prefix tree).
            std::vector<int32_t> versions(r.response.size(), s);
            traj::Request tr;
            tr.input = r.prompt;
            tr.output = r.response;
            tr.logprobs = r.logprobs;
            tr.versions = versions;
            tr.rank = r.rank;
            tr.t_start = t_gen;
            tr.t_end = r.t_done;
            traj_leaf_[r.id] = traj_.insert(tr).traj;
        });
        if (data_) collect_rewards(mine);
        return mine;
    }

    // --data: a ticket's prompt group is epoch x rows + row (unique: a ticket trains once).
    int64_t group_of(const data::Ticket& t) const { return data_group(t, data_->dataset().size(), 0); }
    uint64_t row_of(int64_t group) const { return data_row(group, data_->dataset().size()); }

    // --data: waits for this rank's rewards (submitted as the samples finished). A failed one is
    // scored 0 (--reward-error zero, counted) or kept in reward_error_ (fail).
    void collect_rewards(std::vector<RolloutSample>& mine) {
        std::vector<reward::Result> res;
        data_->scorer().drain(res);
        size_t failed = 0;
        for (const reward::Result& q : res) {
            RolloutSample& r = mine.at(static_cast<size_t>(q.id));
            r.reward = q.score;
            r.extras = stored_extras(q);
            if (data_->scorer().fatal(q)) {
                if (reward_error_.empty()) reward_error_ = q.cause;
            } else if (!q.ok) {
                ++failed;
                log_warn("%s (scored 0, --reward-error zero)", q.cause.c_str());
            }
        }
        rewards_failed_ += failed;
    }

    // COLLECTIVE: the lowest rank's reward_error_, on every rank ("" when none failed).
    std::string agree_reward_error() {
        int first = reward_error_.empty() ? roles_.world_size : roles_.world_rank;
        TAGFLOW_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
        if (first == roles_.world_size) return {};
        return ckpt::bcast_string(MPI_COMM_WORLD, first, reward_error_);
    }

    StepOut step(int32_t s) {
        StepOut out;
        const double t_start = clock_.now();
        const int64_t P = opt_.prompts_per_step, G = opt_.group_size;

        if (data_) {  // this step's tickets, the same on every rank
            tickets_.clear();
            for (int64_t j = 0; j < P; ++j) {
                std::optional<data::Ticket> t = sampler_->take();
                if (!t) break;
                tickets_.push_back(*t);
            }
        }
        const int64_t n_groups = data_ ? static_cast<int64_t>(tickets_.size()) : P;
        std::vector<RolloutSample> mine = generate(s);
        if (data_) {
            out.reward_error = agree_reward_error();
            if (!out.reward_error.empty()) return out;
        }
        // Waiting for the other ranks' samples is idle time.
        double idle = 0;
        std::vector<RolloutSample> all;
        {
            profile::Span span(timeline_, SpanKind::kIdle, s);
            all = allgather_samples(mine, MPI_COMM_WORLD);
            idle += span.end();
        }
        std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
        if (static_cast<int64_t>(all.size()) != n_groups * G)
            throw InternalError("step " + std::to_string(s) + ": got " + std::to_string(all.size()) +
                                " samples, expected " + std::to_string(n_groups * G));

        std::vector<float> rewards;
        for (const auto& r : all) rewards.push_back(r.reward);

        double stats[kNumStats] = {0};
        TrainReport tr;
        {
            // Ranks outside the train and critic groups only join the exchanges: idle time.
            const bool works = roles_.is_train() || roles_.is_critic();
            profile::Span span(timeline_, works ? SpanKind::kTrain : SpanKind::kIdle, s);
            // Time inside the train group's collectives (waiting for its slowest member, then
            // the reduction) is idle too: RlTrainer::set_wait_hook.
            struct Unhook {
                RlTrainer& t;
                ~Unhook() { t.set_wait_hook(nullptr); }
            } unhook{*trainer_};
            if (works)
                trainer_->set_wait_hook([&](bool waiting) {
                    const double piece = span.switch_to(waiting ? SpanKind::kIdle : SpanKind::kTrain);
                    if (!waiting) idle += piece;  // the piece that just ended was the wait
                });
            tr = trainer_->train_step(s, all);
            if (!works) idle += span.end();
        }
        if (data_)
            for (const data::Ticket& t : tickets_) sampler_->done(t);
        stats[kLoss] = tr.loss;
        stats[kKl] = tr.kl;
        stats[kEntropy] = tr.entropy;
        stats[kClip] = tr.clip_frac;
        stats[kLpDiff] = tr.logprob_diff_mean;
        stats[kTokens] = static_cast<double>(tr.tokens);
        stats[kIsMean] = tr.is_weight_mean;
        stats[kIsMax] = tr.is_weight_max;
        stats[kRejected] = static_cast<double>(tr.rs_rejected);
        stats[kTrainReal] = static_cast<double>(tr.real_tokens);
        stats[kTrainSlots] = static_cast<double>(tr.token_slots);
        stats[kSkipped] = static_cast<double>(tr.skipped_updates);  // summed over ranks: each group once
        std::vector<io::ConsumedRecord>& consumed = tr.consumed;
        train::WeightSyncStats ss = sync_weights(s + 1, &idle);
        const bool eval_now = (!data_ || data_->has_val()) &&
                              ((opt_.eval_every > 0 && (s + 1) % opt_.eval_every == 0) || s + 1 == opt_.steps);
        std::vector<io::EvalRecord> evals;
        double eval = -1;
        if (eval_now && data_) {
            // After the step trained: a failed reward ends the run after this step's rows (run()).
            const std::optional<ValResult> v = validate_data(s + 1, &evals);
            if (v) {
                eval = is_eval_rank() ? v->overall.greedy() : -1;
                out.val = describe(*v);
            } else {
                out.val_error = reward_error_;
            }
        } else if (eval_now) {
            eval = evaluate_local(s);
        }
        // Summed over ranks below: -1 from nobody when there is no evaluation this step.
        stats[kEval] = (eval_now && is_eval_rank() && eval >= 0) ? eval + 1.0 : 0.0;
        if (roles_.is_train_root()) {
            stats[kSyncBytes] = static_cast<double>(ss.bytes);
            stats[kSyncT0] = last_sync_t0_;
            stats[kSyncT1] = last_sync_t1_;
        } else {
            for (int k = 0; k < kIdle; ++k)
                if (k != kEval) stats[k] = 0;  // only the root's values count
        }
        {
            profile::Span span(timeline_, SpanKind::kIdle, s);
            stats[kIdle] = idle + span.end();  // the waits before this collective are included below
        }
        const int sig = ckpt::requeue_signal();
        stats[kSigTerm] = sig == SIGTERM ? 1.0 : 0.0;
        stats[kSigUsr1] = sig == SIGUSR1 ? 1.0 : 0.0;
        stats[kSigInt] = sig == SIGINT ? 1.0 : 0.0;
        stats[kSigHup] = sig == SIGHUP ? 1.0 : 0.0;
        {
            // The reduction itself waits for the slowest rank (e.g. the one evaluating): on the
            // timeline as idle too, though its length can only count towards the next step.
            profile::Span span(timeline_, SpanKind::kIdle, s);
            TAGFLOW_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, stats, kNumStats, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
        }
        const double t_end = clock_.now();

        io::StepRecord& row = out.row;
        row.step = s;
        row.t_start = t_start;
        row.t_end = t_end;
        row.policy_version = s + 1;
        row.samples = n_groups * G;
        int64_t tokens = 0;
        for (const auto& r : all) tokens += static_cast<int64_t>(r.prompt.size() + r.response.size());
        row.tokens = tokens;
        double mean = std::accumulate(rewards.begin(), rewards.end(), 0.0) / static_cast<double>(rewards.size());
        double var = 0;
        for (float r : rewards) var += (r - mean) * (r - mean);
        row.reward_mean = static_cast<float>(mean);
        row.reward_std = static_cast<float>(std::sqrt(var / static_cast<double>(rewards.size())));
        row.loss = static_cast<float>(stats[kLoss]);
        row.kl = static_cast<float>(stats[kKl]);
        row.entropy = static_cast<float>(stats[kEntropy]);
        row.clip_frac = static_cast<float>(stats[kClip]);
        row.logprob_diff_mean = static_cast<float>(stats[kLpDiff]);
        row.staleness_mean = 0;  // sync mode trains on the version that generated the samples
        row.staleness_max = 0;
        row.samples_per_s = static_cast<float>(static_cast<double>(row.samples) / std::max(1e-9, t_end - t_start));
        row.idle_frac = static_cast<float>(stats[kIdle] / (roles_.world_size * std::max(1e-9, t_end - t_start)));
        row.skipped_updates = static_cast<int32_t>(stats[kSkipped]);
        row.is_weight_mean = stats[kIsMean];
        row.is_weight_max = stats[kIsMax];
        row.rs_rejected = static_cast<int32_t>(stats[kRejected]);
        row.train_real_tokens = static_cast<int64_t>(stats[kTrainReal]);
        row.train_token_slots = static_cast<int64_t>(stats[kTrainSlots]);
        out.eval = stats[kEval] - 1.0;  // -1: no evaluation this step
        out.signal = stats[kSigUsr1] > 0   ? SIGUSR1
                     : stats[kSigTerm] > 0 ? SIGTERM
                     : stats[kSigInt] > 0  ? SIGINT
                     : stats[kSigHup] > 0  ? SIGHUP
                                           : 0;

        std::vector<io::SampleRecord> samples;
        // Every sample's requests are in this step's tree: its token columns come from there.
        for (size_t i = 0; i < mine.size(); ++i) {
            const RolloutSample& r = mine[i];
            if (!data_) {
                samples.push_back(sample_row(r, task_->name(), r.group, RowColumns::kFromTree, {task_.get()}));
                continue;
            }
            // --data: prompt_index is the data row (group = epoch x rows + row); text the tokenizer's decode.
            samples.push_back(sample_row(r, task_->name(), static_cast<int64_t>(row_of(r.group)), RowColumns::kFromTree,
                                         {nullptr, &data_->tokenizer()}));
        }
        {
            // /tree first (COLLECTIVE over the io communicator), then the samples naming its rows.
            profile::Span span(timeline_, SpanKind::kIo, s);
            traj::write_tree(run_, traj_);
            // Token columns from the tree, so /samples and /tree agree exactly (an identical
            // retry is stored once; its logprobs are the first copy's, equal up to GEMM rounding).
            for (auto& rec : samples) traj::fill_sample(traj_, traj_leaf_.at(rec.id), rec);
            // Sync mode never continues a session across steps: start each step's tree afresh.
            traj_.clear();
            traj_leaf_.clear();
        }
        std::vector<io::StepRecord> steps;
        if (roles_.world_rank == 0) steps.push_back(row);
        std::vector<io::SyncRecord> syncs;
        if (eval_now && is_eval_rank() && !data_)
            evals.push_back({s + 1, task_->name(), static_cast<float>(eval), opt_.eval_prompts});
        if (roles_.is_train_root()) {
            syncs.push_back(sync_record(s + 1, ss));
        }
        {
            profile::Span span(timeline_, SpanKind::kIo, s);
            write_rows(samples, consumed, steps, evals, syncs);
        }
        return out;
    }

    // COLLECTIVE (io communicator): one step's rows of every table, then a flush, so a crash
    // leaves the file readable up to here.
    void write_rows(const std::vector<io::SampleRecord>& samples, const std::vector<io::ConsumedRecord>& consumed,
                    const std::vector<io::StepRecord>& steps, const std::vector<io::EvalRecord>& evals,
                    const std::vector<io::SyncRecord>& syncs) {
        run_.append_samples(samples);
        run_.append_consumed(consumed);
        run_.append_steps(steps);
        run_.append_eval(evals);
        run_.append_syncs(syncs);
        run_.append_timeline(timeline_.take());
        run_.flush();
    }

    const config::Options& opt_;
    cluster::Roles& roles_;
    io::RunFile& run_;
    profile::Clock clock_;
    profile::Timeline timeline_;
    std::unique_ptr<rollout::Task> task_;
    model::LlamaModel policy_{nullptr};
    std::unique_ptr<RlTrainer> trainer_;
    std::unique_ptr<rollout::InferenceEngine> engine_;  // rollout ranks only
    std::unique_ptr<train::WeightSync> wsync_;
    traj::TrajectoryManager traj_;                         // this rank's requests of the current step
    std::unordered_map<int64_t, traj::NodeId> traj_leaf_;  // sample id -> its trajectory
    train::WeightSyncStats last_sync_;
    int32_t max_new_ = 0;
    double last_sync_t0_ = 0, last_sync_t1_ = 0;
    DataTask* data_ = nullptr;                   // --data: task_ as the data set, else null
    std::optional<data::EpochSampler> sampler_;  // --data: which rows, replicated on every rank
    std::vector<data::Ticket> tickets_;          // --data: this step's (prompt group j of the step: tickets_[j])
    std::vector<data::Row> val_rows_;            // --val-data: this rollout rank's share of the rows
    std::string reward_error_;                   // --data: first failed reward under --reward-error fail
    uint64_t rewards_failed_ = 0;                // --data: rewards scored 0 under --reward-error zero
    ckpt::Plan ckpt_;                            // where and how often to checkpoint; what to resume from
    bool have_ckpt_ = false;                     // false: no checkpoints (a scheduler built without a plan)
    BadSteps bad_steps_{opt_.max_bad_steps};     // --max-bad-steps: NaN/inf updates in a row stop the run
};

}  // namespace

std::unique_ptr<Scheduler> make_sync_scheduler(const config::Options& opt, cluster::Roles& roles, io::RunFile& run,
                                               double t0_unix, std::unique_ptr<rollout::Task> task,
                                               const ckpt::Plan* ckpt) {
    return std::make_unique<SyncScheduler>(opt, roles, run, t0_unix, std::move(task), ckpt);
}

}  // namespace tagflow::sched
