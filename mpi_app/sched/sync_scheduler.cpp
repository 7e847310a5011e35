// SPDX-License-Identifier: Apache-2.0
// sync_scheduler: `--mode sync` (see sync_scheduler.hpp): construction, the step loop, one step and
// the rows it writes. The class is in sync_scheduler_impl.hpp.
#include "sched/sync_scheduler_impl.hpp"

#include "sched/sched_policy.hpp"

namespace tagflow::sched::sync_impl {

SyncScheduler::SyncScheduler(const config::Options& opt, cluster::Roles& roles, io::RunFile& run, double t0_unix,
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
            sampler_.emplace(data::EpochSampler::from_bytes(plan->manifest.get("data_sampler"), rows, seed, epochs));
        else sampler_.emplace(rows, seed, epochs);
        // --val-data: every rollout rank answers every n-th row (reduce_validation adds them up).
        if (data_->has_val() && roles.is_rollout())
            val_rows_ = data_->val_rows(static_cast<uint64_t>(roles.rollout.rank()),
                                        static_cast<uint64_t>(roles.rollout_ranks.size()));
    }
}

RunSummary SyncScheduler::run() {
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
               s + 1, static_cast<long long>(opt_.steps), o.row.reward_mean, o.row.reward_std, ev.c_str(), o.row.loss,
               o.row.samples_per_s, 100.0 * o.row.idle_frac, clock_.now());
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
            print0("tagflow: checkpoint at step %d after %s; exiting for requeue\n", done, ckpt::signal_name(o.signal));
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

SyncScheduler::StepOut SyncScheduler::step(int32_t s) {
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
    stats[kRejectedTokens] = static_cast<double>(tr.rs_rejected_tokens);
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
    row.lr = step_lr(opt_, s);
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
    row.rs_rejected_tokens = static_cast<int64_t>(stats[kRejectedTokens]);
    row.train_real_tokens = static_cast<int64_t>(stats[kTrainReal]);
    row.train_token_slots = static_cast<int64_t>(stats[kTrainSlots]);
    row.train_members = static_cast<int32_t>(roles_.train_ranks.size());  // sync: every rank tagged train
    row.train_group = sched_policy::rank_ranges(roles_.train_ranks, io::kTrainGroupLen);
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
void SyncScheduler::write_rows(const std::vector<io::SampleRecord>& samples,
                               const std::vector<io::ConsumedRecord>& consumed,
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

}  // namespace tagflow::sched::sync_impl

namespace tagflow::sched {

std::unique_ptr<Scheduler> make_sync_scheduler(const config::Options& opt, cluster::Roles& roles, io::RunFile& run,
                                               double t0_unix, std::unique_ptr<rollout::Task> task,
                                               const ckpt::Plan* ckpt) {
    return std::make_unique<sync_impl::SyncScheduler>(opt, roles, run, t0_unix, std::move(task), ckpt);
}

}  // namespace tagflow::sched
