// SPDX-License-Identifier: Apache-2.0
// async_scheduler: see the header. The protocol, all point-to-point on one communicator
// duplicated up front (p2p_), every message from the coordinator C tagged with an epoch:
//   samples  rank -> C    [spans][pack_samples] as soon as an engine step finishes samples
//   ctl      C -> rank    [kind, epoch, version, n, members...]: TRAIN (join the train group for
//                         training step `epoch`) or STOP (end of run)
//   weights  C -> rollout-only ranks: a header (version, base version, per bucket its encoding)
//                         and one message per bucket not skipped (train/weight_push_mpi.hpp:
//                         dense, or with --sync-delta only the values that receiver lacks);
//                         receivers keep these receives posted, test them between decode steps
//                         and write the weights at a token boundary
//   final    rank -> C    [spans][membership log][discarded count][held version, weights hash]
//                         [recomputed tokens, sequences, engine weight updates] after STOP (a
//                         rollout-only rank first takes in the last version, named by STOP)
//   signal   rank -> C    [int64 signal] once, when SIGTERM/SIGUSR1 reached that rank: C stops
//                         at the step boundary, checkpoints and every rank exits 75
//   assign   C -> generator  --data: [int64 group...] prompt groups to generate, in order
//   rewarderr generator -> C --data: [string cause] once, a failed reward under --reward-error fail:
//                         C stops at the step boundary, checkpoints and exits 1 (async_data.cpp)
// Checkpoints are C's alone (no collective; see async_checkpoint.cpp and share/doc/checkpoints.md).
// The train group's communicator is made once with MPI_Comm_create_group over its members;
// a training step's batch reaches them with MPI_Ibcast on it. Every wait is test-and-sleep.
// Paused generations keep their KV caches (computed with the older weights) unless --resume-mode
// recompute: that costs a prefill per sequence, and the per-token versions record what produced
// each token either way.
// The class is in async_scheduler_impl.hpp; this file holds its construction, run(), the span
// recorder and evaluation; the other roles are in the async_*.cpp files named there.
#include "sched/async_scheduler.hpp"

#include <algorithm>
#include <cstdarg>
#include <cstdio>

#include "health/status.hpp"
#include "sched/async_scheduler_impl.hpp"

namespace tagflow::sched {

int async_coordinator(const cluster::Roles& roles) { return roles.train_root; }

std::vector<int> async_train_group(const config::Options& opt, const cluster::Roles& roles) {
    return sched_policy::train_group(opt, roles.all_tags);  // pure: shared with the simulator (sim/)
}

void check_async_roles(const config::Options& opt, const cluster::Roles& roles) {
    sched_policy::check_roles(opt, roles.all_tags);
}

void check_async_resume(const config::Options& opt, const cluster::Roles& roles, const ckpt::Manifest& m) {
    const std::vector<int> members = async_train_group(opt, roles);
    std::string gens, mems;
    for (int r = 0; r < roles.world_size; ++r) {
        const bool rolls = (roles.all_tags[static_cast<size_t>(r)] & cluster::kRollout) != 0;
        const bool trains = std::count(members.begin(), members.end(), r) > 0;
        if (rolls && (opt.mode == config::Mode::kMultiplex || !trains))
            gens += (gens.empty() ? "" : ",") + std::to_string(r);
    }
    for (int r : members) mems += (mems.empty() ? "" : ",") + std::to_string(r);
    if (gens.empty()) gens = "-";
    if (mems.empty()) mems = "-";
    if (m.get("sched.gens") != gens || m.get("sched.members") != mems)
        throw ConfigError("checkpoint " + m.path + ": written with generating ranks {" + m.get("sched.gens") +
                          "} and train group {" + m.get("sched.members") + "}, this run has {" + gens + "} and {" +
                          mems + "} (same ranks and --rank-tags, or --no-resume --overwrite)");
}

}  // namespace tagflow::sched

namespace tagflow::sched::async {

AsyncScheduler::AsyncScheduler(const config::Options& opt, cluster::Roles& roles, io::RunFile* run, double t0_unix,
                               std::unique_ptr<rollout::Task> task, const ckpt::Plan* plan)
    : opt_(opt),
      roles_(roles),
      run_(run),
      clock_(t0_unix),
      tl_(clock_, roles.world_rank),
      task_(std::move(task)),
      multiplex_(opt.mode == config::Mode::kMultiplex) {
    me_ = roles.world_rank;
    coord_ = async_coordinator(roles);
    members_ = async_train_group(opt, roles);
    eligible_ = members_;  // --rebalance-every: every rank that may train starts in the group
    rebalance_ = multiplex_ && opt.rebalance_every > 0;
    in_train_ = std::count(members_.begin(), members_.end(), me_) > 0;
    // PPO with ranks tagged critic: the critic lives on them, and they join every training
    // step (after the train group in the step's communicator); otherwise on the train group.
    step_members_ = members_;
    if (opt.algo == "ppo")
        for (int r = 0; r < roles.world_size; ++r)
            if (roles.all_tags[static_cast<size_t>(r)] & cluster::kCritic) {
                if (!std::count(step_members_.begin(), step_members_.end(), r)) step_members_.push_back(r);
                critic_pos_.push_back(
                    static_cast<int>(std::find(step_members_.begin(), step_members_.end(), r) - step_members_.begin()));
            }
    std::sort(critic_pos_.begin(), critic_pos_.end());
    in_step_ = std::count(step_members_.begin(), step_members_.end(), me_) > 0;
    critic_root_ = critic_pos_.empty() ? coord_ : step_members_[static_cast<size_t>(critic_pos_.front())];
    for (int r = 0; r < roles.world_size; ++r) {
        const bool rolls = (roles.all_tags[static_cast<size_t>(r)] & cluster::kRollout) != 0;
        const bool trains = std::count(members_.begin(), members_.end(), r) > 0;
        if (rolls && (multiplex_ || !trains)) gens_.push_back(r);
        if (rolls && !trains) receivers_.push_back(r);
    }
    is_gen_ = std::count(gens_.begin(), gens_.end(), me_) > 0;
    is_recv_ = std::count(receivers_.begin(), receivers_.end(), me_) > 0;
    threshold_ = sched_policy::train_threshold(opt);

    max_new_ = opt.max_new_tokens > 0 ? opt.max_new_tokens : task_->max_response_tokens();
    policy_ = make_policy(opt, *task_, task_->max_prompt_tokens() + max_new_);
    flat_ = train::share_one_buffer(policy_->parameters());
    print_model_and_algorithm(opt, roles, policy_->config(), flat_.numel());
    {
        train::FlatView fv(params());
        buckets_ = fv.plan_buckets(static_cast<size_t>(opt.bucket_mb * 1024.0 * 1024.0));
    }
    train::WeightSync::Options so;
    so.bucket_bytes = static_cast<size_t>(opt.bucket_mb * 1024.0 * 1024.0);
    wsync_ = std::make_unique<train::WeightSync>(so);

    // Communicators, once, up front (every rank is here: nobody is generating yet).
    p2p_ = Comm::world().dup();
    clk_ = Comm::world().dup();
    // Weight pushes to the rollout-only ranks, dense or (--sync-delta) per receiver's version.
    train::PushOptions po;
    po.delta = opt.sync_delta;
    // --rebalance-every: a multi-tag rank that leaves the train group receives weights too.
    const bool may_receive = is_recv_ || (rebalance_ && in_train_ && me_ != coord_);
    if (me_ == coord_ && (!receivers_.empty() || (rebalance_ && eligible_.size() > 1)))
        push_ = std::make_unique<train::WeightPush>(po, buckets_, p2p_.get(), kTagWeights);
    if (may_receive) pull_ = std::make_unique<train::WeightPull>(buckets_, p2p_.get(), coord_, kTagWeights);
    const bool in_bcast = is_recv_ || me_ == coord_;
    bcast_ = Comm::world().split(in_bcast ? 0 : MPI_UNDEFINED, me_ == coord_ ? -1 : me_);
    if (in_step_) {
        train_comm_ = group_comm(step_members_);
        TrainGroup g;
        g.comm = train_comm_;
        g.actors = static_cast<int>(members_.size());
        g.critics = critic_pos_;
        trainer_ = std::make_unique<RlTrainer>(opt, roles, policy_, g);
        // Inside a train span, time in the train group's collectives is idle (set_wait_hook).
        trainer_->set_wait_hook(
            [this](bool waiting) { enter(waiting ? SpanKind::kIdle : SpanKind::kTrain, span_step_); });
    }
    if (is_gen_) {
        rollout::InferenceConfig ec;
        ec.max_batch = opt.max_batch;
        engine_ = std::make_unique<rollout::InferenceEngine>(policy_, ec);
        setup_agent_sessions();
        gen_index_ = static_cast<int64_t>(std::find(gens_.begin(), gens_.end(), me_) - gens_.begin());
        set_members(members_);  // the --rollout-ahead quota
    }
    if (me_ == coord_) {
        std::string ms, rs;
        for (int r : members_) ms += (ms.empty() ? "" : ",") + std::to_string(r);
        for (int r : gens_) rs += (rs.empty() ? "" : ",") + std::to_string(r);
        std::string cs;
        for (int k : critic_pos_) cs += (cs.empty() ? "" : ",") + std::to_string(step_members_[static_cast<size_t>(k)]);
        say("%s: coordinator rank %d; train group {%s}%s%s%s; generating ranks {%s}; threshold %lld samples; "
            "staleness %d (%s)\n",
            opt.mode.name(), coord_, ms.c_str(), cs.empty() ? "" : "; critic on ranks {", cs.c_str(),
            cs.empty() ? "" : "}", rs.c_str(), static_cast<long long>(threshold_), opt.staleness, opt.stale.c_str());
        std::string recv;
        for (int r : receivers_) recv += (recv.empty() ? "" : ",") + std::to_string(r);
        std::string resume = "keep their KV caches";
        if (opt.resume_mode == "recompute")
            resume = "recompute " +
                     (opt.resume_window > 0 ? "the last " + std::to_string(opt.resume_window) + " cached tokens"
                                            : std::string("their KV caches")) +
                     (opt.resume_min_tokens > 0
                          ? " (sequences of at least " + std::to_string(opt.resume_min_tokens) + " tokens)"
                          : "");
        if (!receivers_.empty())
            say("%s: new weights to ranks {%s} by point-to-point sends, %s; generations in flight %s\n",
                opt.mode.name(), recv.c_str(), opt.sync_delta ? "only the changed values (--sync-delta)" : "dense",
                resume.c_str());
        else if (!rebalance_)
            say("%s: every generating rank trains (no weight sends%s); generations in flight %s\n", opt.mode.name(),
                opt.sync_delta ? ": --sync-delta has nothing to send" : "", resume.c_str());
        if (rebalance_)
            say("%s: --rebalance-every %d: the train group is chosen again every %d steps among ranks {%s} from "
                "the measured rates; a rank that leaves it receives the weights by point-to-point sends\n",
                opt.mode.name(), opt.rebalance_every, opt.rebalance_every, ms.c_str());
    }
    if (!opt.gateway.empty()) setup_gateway();
    setup_data();
    lo_.assign(gens_.size(), 0);
    // Checkpoints (share/doc/checkpoints.md). With --gateway they hold the gateway samples
    // already rewarded (pool and /samples) and the recorder's id counters; sessions not yet
    // rewarded and requests in flight are not saved (clients redo them after a restart).
    if (plan) {
        ckpt_ = *plan;
        have_ckpt_ = true;
    }
    if (plan && plan->resume) restore(plan->manifest, plan->dir);
    // --admission staleness (async_admission.cpp): grants restart where the generators resume.
    admission_ = sched_policy::admission_budget(opt, static_cast<double>(threshold_), threshold_) > 0;
    granted_ = lo_;
    arrived_.clear();
    for (int64_t k : lo_) arrived_.push_back(k * opt.group_size);
    member_groups_.assign(gens_.size(), 0);  // none until the coordinator waits idle (next_member_cap)
    arrived_at_step_ = arrived_;
    if (is_gen_) admit_k_ = next_local_;
}

RunSummary AsyncScheduler::run() {
    RunSummary sum;
    sum.best_constant = task_->best_constant_score(opt_.eval_prompts);
    // Version 0: one WeightSync broadcast from the coordinator to the rollout-only ranks
    // (after a resume every rank loaded the checkpoint's weights instead).
    if (!bcast_.is_null() && !resumed_) {
        profile::Span span(tl_, SpanKind::kWeightSync, 0);
        train::WeightSyncStats st = wsync_->broadcast(params(), 0, bcast_.get(), 0);
        if (me_ == coord_) {
            io::SyncRecord r;
            r.version = 0;
            r.bytes = st.bytes;
            r.t_end = clock_.now();
            r.t_start = r.t_end - st.seconds;
            r.mode = wsync_->mode();
            r.dense_bytes = st.dense_bytes;
            r.buckets = st.buckets;
            syncs_.push_back(r);
        }
    }
    version_ = resumed_ ? static_cast<int32_t>(step_) : 0;
    if (engine_ && resumed_) engine_->update_weights(version_, rollout::ResumeMode::kKeep, 0);
    weights_held();  // the next push is a delta from here (--sync-delta)
    if (is_recv_) post_weight_recv();
    if (me_ == coord_) {
        if (resumed_) {
            resume_summary(sum);
        } else {
            if (data_ && data_->has_val())
                say("step %5d/%-5lld --val-data %s: %llu rows (%llu skipped over --max-prompt-tokens), greedy%s; "
                    "answered by the coordinator\n",
                    0, static_cast<long long>(opt_.steps), opt_.val_data.c_str(),
                    static_cast<unsigned long long>(data_->val().size()),
                    static_cast<unsigned long long>(data_->val().skipped_over_limit()),
                    opt_.val_samples > 1 ? (" and mean@" + std::to_string(opt_.val_samples)).c_str() : "");
            const double ev0 = clock_.now();
            double e0 = evaluate(0);
            eval_s_ += clock_.now() - ev0;
            sum.first_eval = sum.best_eval = sum.last_eval = std::max(0.0, e0);
            if (e0 >= 0 && data_)
                say("step %5d/%-5lld val %s\n", 0, static_cast<long long>(opt_.steps), val_line_.c_str());
            else if (e0 >= 0)
                say("step %5d/%-5lld eval %.3f (held-out greedy; best constant output %.3f)\n", 0,
                    static_cast<long long>(opt_.steps), e0, sum.best_constant);
            // A fresh run checkpoints its start too, so a job killed at any later moment can resume.
            if (have_ckpt_) checkpoint_now(sum);
        }
        coordinator_loop(sum);
    } else {
        if (!resumed_) send_trainer_state();  // for the coordinator's checkpoint of the start
        worker_loop();
    }
    // The one final collective: every rank meets here, then learns the summary.
    {
        MPI_Request rq = MPI_REQUEST_NULL;
        TAGFLOW_MPI_CHECK(MPI_Ibarrier(MPI_COMM_WORLD, &rq));
        std::vector<MPI_Request> v{rq};
        wait_all(v);
    }
    double s[9] = {sum.first_reward,
                   sum.last_reward,
                   sum.first_eval,
                   sum.last_eval,
                   sum.best_eval,
                   sum.samples_per_s,
                   sum.elapsed,
                   static_cast<double>(sum.steps),
                   static_cast<double>(sum.exit_code)};
    TAGFLOW_MPI_CHECK(MPI_Bcast(s, 9, MPI_DOUBLE, coord_, MPI_COMM_WORLD));
    sum.first_reward = s[0], sum.last_reward = s[1], sum.first_eval = s[2], sum.last_eval = s[3];
    sum.best_eval = s[4], sum.samples_per_s = s[5], sum.elapsed = s[6], sum.steps = static_cast<long>(s[7]);
    sum.exit_code = static_cast<int>(s[8]);  // ckpt::kExitRequeue on every rank after a requeue signal
    return sum;
}

void AsyncScheduler::say(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    std::vprintf(fmt, ap);
    va_end(ap);
    std::fflush(stdout);
}

void AsyncScheduler::enter(SpanKind k, int32_t step) {
    const double now = clock_.now();
    const bool change = open_ && (k != kind_ || step != span_step_);
    if (change && now > span_t0_) tl_.add(kind_, span_t0_, now, span_step_);
    // On-demand profiling looks at step boundaries (profile/on_demand.hpp) after the span before
    // ends and before the next begins, as profile::Span does: a profile written here shows as a gap
    // in this rank's timeline, not as part of the last span of its last step.
    profile::note_step(step);
    if (change || !open_) span_t0_ = clock_.now();
    open_ = true;
    kind_ = k;
    span_step_ = step;
    health::status_board().set_role(static_cast<int>(k), step);  // live status (health/status.hpp)
}

void AsyncScheduler::cut() {
    const double now = clock_.now();
    if (open_ && now > span_t0_) tl_.add(kind_, span_t0_, now, span_step_);
    open_ = false;
}

std::vector<io::SpanRecord> AsyncScheduler::take_spans() {
    const bool was = open_;
    const SpanKind k = kind_;
    const int32_t st = span_step_;
    cut();
    if (was) enter(k, st);
    return tl_.take();
}

double AsyncScheduler::evaluate(int32_t step) {
    if (data_) return data_->has_val() ? validate_data(step) : -1;  // --data: no held-out set; --val-data's rows
    if (!roles_.is_rollout()) return -1;                            // no rollout tag: never generates
    enter(SpanKind::kRollout);
    torch::NoGradGuard ng;
    double e = 0;
    if (const rollout::AgentLoop* loop = rollout::as_agent_loop(*task_)) {
        // Multi-turn: greedy sessions with the tool, on an engine of their own (engine_
        // holds the generations in flight).
        rollout::InferenceConfig ec;
        ec.max_batch = opt_.max_batch;
        rollout::InferenceEngine eng(policy_, ec);
        e = evaluate_agent_task(eng, *task_, *loop, opt_.eval_prompts);
    } else {
        e = rollout::evaluate(policy_, *task_, opt_.eval_prompts, opt_.max_batch);
    }
    cut();  // the evaluation's span ends here, not at the next enter()
    if (run_) evals_.push_back({step, task_->name(), static_cast<float>(e), opt_.eval_prompts});
    return e;
}

double AsyncScheduler::validate_data(int32_t step) {
    if (!reward_error_.empty()) return -1;  // the run stops at this boundary anyway
    enter(SpanKind::kRollout);
    torch::NoGradGuard ng;
    const ValOptions vo = val_options(opt_, opt_.val_max_tokens > 0 ? opt_.val_max_tokens : max_new_,
                                      policy_->config().max_position_embeddings);
    if (val_rows_.empty()) val_rows_ = data_->val_rows(0, 1);
    rollout::InferenceConfig ec;
    ec.max_batch = opt_.max_batch;
    rollout::InferenceEngine eng(policy_, ec);
    ValResult v;
    try {
        v = validate(eng, data_->tokenizer(), val_rows_, data_->val_scorer(), vo);
    } catch (const Error& e) {
        cut();
        reward_error_ = e.what();
        return -1;
    }
    cut();  // the validation's span ends here, not at the next enter()
    val_failed_ += static_cast<uint64_t>(v.failed);
    for (io::EvalRecord& e : eval_records(v, step, val_task_name(opt_.val_data))) evals_.push_back(e);
    val_line_ = describe(v);
    return v.overall.greedy();
}

}  // namespace tagflow::sched::async

namespace tagflow::sched {

std::unique_ptr<Scheduler> make_async_scheduler(const config::Options& opt, cluster::Roles& roles, io::RunFile* run,
                                                double t0_unix, std::unique_ptr<rollout::Task> task,
                                                const ckpt::Plan* ckpt) {
    return std::make_unique<async::AsyncScheduler>(opt, roles, run, t0_unix, std::move(task), ckpt);
}

}  // namespace tagflow::sched
