// SPDX-License-Identifier: Apache-2.0
// async_coordinator: the coordinator: receives every rank's messages, pools finished samples
// (sched/sample_pool.hpp), decides when to train, runs a training step with its train group,
// and is the only writer of the run file.
// Part of the async scheduler (sched/async_scheduler_impl.hpp).
#include "sched/async_scheduler_impl.hpp"

#include <sstream>

#include "common/safe_file.hpp"
#include "health/status.hpp"

namespace tagflow::sched::async {

void AsyncScheduler::add_to_pool(std::vector<RolloutSample>& got) {
    for (auto& r : got) {
        if (rebalance_) ++window_.delivered[r.rank];  // this generator's rate (--rebalance-every)
        if (data_) {  // --data: every group is new (a requeued ticket's next attempt), nothing comes twice
            data_received(r);
            written_.push_back(sample_row(r, task_->name(), static_cast<int64_t>(data_row(r.group, rows_)),
                                          RowColumns::kFromSample, {nullptr, &data_->tokenizer()}));
            ++finished_;
            pool_.add(std::move(r));
            continue;
        }
        admit_arrived(r.group);               // generated again or not, a granted sample is no longer in flight
        if (!first_receipt(r.id, r.group)) {  // generated again after a resume, already recorded
            ++regenerated_;
            continue;
        }
        // A multi-turn session's requests go to the tree; its row's columns then come from it.
        const bool in_tree = agent_tree_.record(r);
        written_.push_back(sample_row(r, task_->name(), r.group,
                                      in_tree ? RowColumns::kFromTree : RowColumns::kFromSample, {task_.get()}));
        ++finished_;
        pool_.add(std::move(r));
    }
    health::status_board().set_queue(finished_ - consumed_count_);  // pooled, not trained yet (live status)
}

void AsyncScheduler::poll_messages() {
    for (;;) {
        int flag = 0;
        MPI_Status st;
        TAGFLOW_MPI_CHECK(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, p2p_.get(), &flag, &st));
        if (!flag) return;
        int count = 0;
        TAGFLOW_MPI_CHECK(MPI_Get_count(&st, MPI_CHAR, &count));
        std::vector<char> b(static_cast<size_t>(count));
        TAGFLOW_MPI_CHECK(
            MPI_Recv(b.data(), count, MPI_CHAR, st.MPI_SOURCE, st.MPI_TAG, p2p_.get(), MPI_STATUS_IGNORE));
        if (st.MPI_TAG == kTagGwRec && gw_rec_) {  // gateway records carry no spans
            gateway_ingest(b.data(), b.size());
            continue;
        }
        wire::Reader in(b, "async scheduler");
        if (st.MPI_TAG == kTagCritic) {  // the critic's state after step critic_step_ (its own ranks)
            critic_step_ = in.get<int64_t>();
            critic_bytes_.assign(in.pos(), in.left());
            continue;
        }
        if (st.MPI_TAG == kTagShards) {  // --shard: a step member's moment shards after step sh.step
            Shards& sh = shards_[st.MPI_SOURCE];
            sh.step = in.get<int64_t>();
            sh.files.resize(static_cast<size_t>(in.get<int64_t>()));
            for (auto& [name, bytes] : sh.files) {
                name = in.str();
                bytes = in.str();
            }
            continue;
        }
        if (st.MPI_TAG == kTagRewardError) {  // --data, --reward-error fail: checkpoint, stop, exit 1
            std::string cause = in.str();
            if (reward_error_.empty()) reward_error_ = std::move(cause);
            continue;
        }
        if (st.MPI_TAG == kTagSignal) {  // a rank got SIGTERM/SIGUSR1: checkpoint, stop, exit 75
            const auto sg = static_cast<int>(in.get<int64_t>());
            if (sig_ == 0) sig_ = sg;
            continue;
        }
        auto spans = wire::get_spans(in);
        other_spans_.insert(other_spans_.end(), spans.begin(), spans.end());
        if (st.MPI_TAG == kTagSamples) {
            auto got = wire::get_samples(in);
            add_to_pool(got);
        } else if (st.MPI_TAG == kTagFinal) {
            auto n = in.get<uint64_t>();
            auto& log = seen_[st.MPI_SOURCE];
            for (uint64_t i = 0; i < n; ++i) {
                Membership m;
                m.epoch = in.get<int64_t>();
                auto k = in.get<int64_t>();
                for (int64_t j = 0; j < k; ++j) m.members.push_back(in.get<int64_t>());
                log.push_back(m);
            }
            discarded_ += in.get<int64_t>();
            FinalWeights fw;
            fw.version = in.get<int32_t>();
            fw.hash = in.get<uint64_t>();
            fw.recomputed_tokens = in.get<int64_t>();
            fw.recomputed_seqs = in.get<int64_t>();
            fw.updates = in.get<int64_t>();
            fw.critic_hash = in.get<uint64_t>();
            finals_of_[st.MPI_SOURCE] = fw;
            ++finals_;
        } else {
            throw InternalError("coordinator: unexpected message tag " + std::to_string(st.MPI_TAG) + " from rank " +
                                std::to_string(st.MPI_SOURCE));
        }
    }
}

void AsyncScheduler::send_ctl(int dest, int64_t kind, int64_t epoch) {
    wire::Writer w;  // int64 fields only: poll_ctl receives them as one int64 array
    for (int64_t f : {kind, epoch, static_cast<int64_t>(version_), static_cast<int64_t>(members_.size())})
        w.put<int64_t>(f);
    for (int r : members_) w.put<int64_t>(r);
    ctl_.push_back({MPI_REQUEST_NULL, w.take()});
    auto& c = ctl_.back();
    TAGFLOW_MPI_CHECK(
        MPI_Isend(c.buf.data(), static_cast<int>(c.buf.size()), MPI_CHAR, dest, kTagCtl, p2p_.get(), &c.req));
}

void AsyncScheduler::coordinator_loop(RunSummary& sum) {
    double& total = total_;
    double t_prev = clock_.now();
    std::vector<RolloutSample> mine;
    while (step_ < opt_.steps) {
        poll_messages();
        test_weight_sends();
        // A requeue signal on any rank (this one, or a kTagSignal message): stop at this
        // step boundary; the checkpoint is written below, after every rank's last samples.
        if (sig_ == 0) sig_ = ckpt::requeue_signal();
        if (sig_ != 0 || bad_stop_ || !reward_error_.empty()) break;
        if (data_) {
            purge_stale();
            if (sampler_->finished()) break;  // every row of every epoch trained
            assign_work();
        }
        admit();  // --admission staleness: grants within the budget (built-in tasks)
        // --train-timeout: a step also starts when the oldest wait is long enough and at
        // least one usable sample is there (e.g. a slow agent behind the gateway). --data: the
        // last groups of the data train below the threshold.
        const int64_t u = usable();
        if ((u >= threshold_ && !hold_for_late()) ||
            (opt_.train_timeout > 0 && u > 0 && clock_.now() - t_prev >= opt_.train_timeout) ||
            (data_ && u > 0 && data_tail())) {
            const double t_end = train_one(t_prev, sum, total);
            t_prev = t_end;
            if (have_ckpt_ && ckpt_.every > 0 && step_ % ckpt_.every == 0 && step_ < opt_.steps) {
                checkpoint_now(sum);
                t_prev = clock_.now();  // as in sync, a step's row does not include the checkpoint before it
            }
            continue;
        }
        if (is_gen_) fill_engine();
        if (is_gen_ && engine_->active() + engine_->waiting() + static_cast<int64_t>(awaiting_.size()) > 0) {
            mine.clear();
            gen_step(mine);
            add_to_pool(mine);
        } else {                     // not generating, or at its --rollout-ahead quota: waiting for the others' samples
            enter(SpanKind::kIdle);  // waiting for samples
            coord_idle_ = true;      // members may be granted until the next step (grant_caps)
            nap();
        }
    }
    wait_weight_sends();
    // The final checkpoint's clock offsets, measured while the other ranks still loop (after STOP
    // they no longer answer).
    if (have_ckpt_ && (step_ > 0 || resumed_)) remeasure_clocks();
    // End of run: STOP to every other rank; their last samples and spans come back.
    for (int r = 0; r < roles_.world_size; ++r)
        if (r != coord_) send_ctl(r, kCtlStop, step_);
    enter(SpanKind::kIdle);
    while (finals_ < roles_.world_size - 1) {
        poll_messages();
        nap();
    }
    std::vector<MPI_Request> v;
    for (auto& c : ctl_) v.push_back(c.req);
    for (auto& c : asg_sends_) v.push_back(c.req);    // every generator drained its assignments at STOP
    for (auto& c : admit_sends_) v.push_back(c.req);  // and its grants
    wait_all(v);
    ctl_.clear();
    asg_sends_.clear();
    admit_sends_.clear();
    if (engine_) discarded_ += engine_->active() + engine_->waiting() + static_cast<int64_t>(awaiting_.size());
    seen_[coord_] = my_log_;
    int64_t leftover = finished_ - consumed_count_;
    cut();
    {
        std::vector<io::SpanRecord> spans = tl_.take();
        spans.insert(spans.end(), other_spans_.begin(), other_spans_.end());
        other_spans_.clear();
        write({}, {}, spans);
    }
    write_membership();
    report_weights(sum);
    sum.steps = step_;
    sum.elapsed = clock_.now();
    sum.samples_per_s = total / std::max(1e-9, sum.elapsed);
    // The end of the run or a requeue: every rank stopped, its last samples are in the pool
    // and the file, so the checkpoint holds everything finished and nothing after it.
    if (have_ckpt_) write_checkpoint(sum);
    if (sig_ != 0 && step_ < opt_.steps) {
        if (have_ckpt_)
            say("tagflow: checkpoint at step %lld after %s; exiting for requeue\n", static_cast<long long>(step_),
                ckpt::signal_name(sig_));
        else
            say("tagflow: %s at step %lld; no checkpoint; exiting for requeue\n", ckpt::signal_name(sig_),
                static_cast<long long>(step_));
        sum.exit_code = ckpt::kExitRequeue;
    }
    if (bad_stop_) {
        log_error("%s", bad_steps_.stop_message().c_str());
        sum.exit_code = kExitBadSteps;
    }
    if (!reward_error_.empty()) {
        log_error("%s (--reward-error fail; %s)", reward_error_.c_str(),
                  have_ckpt_ ? "checkpoint written, the run resumes at this step" : "no checkpoint");
        sum.exit_code = 1;
    }
    if (rewards_failed_ + val_failed_ > 0)  // this rank's (the other ranks report theirs at STOP)
        log_warn("rank %d: %llu rewards (%llu of them validation's) failed and were scored 0 (--reward-error zero)",
                 me_, static_cast<unsigned long long>(rewards_failed_ + val_failed_),
                 static_cast<unsigned long long>(val_failed_));
    if (data_ && sampler_->finished())
        say("%s: --data %s: %llu epoch%s, every row trained once\n", opt_.mode.name(), opt_.data.c_str(),
            static_cast<unsigned long long>(sampler_->completed_epochs()),
            sampler_->completed_epochs() == 1 ? "" : "s");
    if (regenerated_ > 0)
        say("%s: %lld samples generated again after the resume were already recorded before the checkpoint "
            "(dropped)\n",
            opt_.mode.name(), static_cast<long long>(regenerated_));
    if (holds_ > 0)  // --late-wait
        say("%s: %lld step%s waited %.2f s in all for late groups\n", opt_.mode.name(), static_cast<long long>(holds_),
            holds_ == 1 ? "" : "s", held_s_);
    say("%s: %lld samples finished, %lld consumed (%lld dropped as stale, %lld trained with a staleness "
        "weight), %lld left over at the end, %lld unfinished generations discarded\n",
        opt_.mode.name(), static_cast<long long>(finished_), static_cast<long long>(consumed_count_),
        static_cast<long long>(dropped_), static_cast<long long>(weighted_), static_cast<long long>(leftover),
        static_cast<long long>(discarded_));
}

double AsyncScheduler::train_one(double t_start, RunSummary& sum, double& total) {
    const int32_t s = static_cast<int32_t>(step_);
    enter(SpanKind::kResplit, s);
    const double t_begin = clock_.now();
    const double held = hold_since_ >= 0 ? t_begin - hold_since_ : 0.0;
    held_s_ += held;
    hold_since_ = -1;
    if (last_begin_ >= 0) {
        cycle_s_ = sched_policy::next_cycle(cycle_s_, t_begin - last_begin_, held);
        // --rebalance-every: the whole cycle, less the evaluations (they are not the group's).
        if (rebalance_) window_.add_cycle(t_begin - last_begin_ - cycle_eval_s_);
    }
    last_begin_ = t_begin;
    cycle_eval_s_ = 0;
    const std::vector<int> joiners = rebalance(s);  // --rebalance-every: maybe a new train group
    const bool ckpt_next = have_ckpt_ && ckpt_.every > 0 && (s + 1) % ckpt_.every == 0 && s + 1 < opt_.steps;
    for (int r : step_members_)
        if (r != coord_) send_ctl(r, ckpt_next ? kCtlTrainCkpt : kCtlTrain, s);
    my_log_.push_back({s, std::vector<int64_t>(members_.begin(), members_.end())});
    // The batch: complete groups, oldest first; stale samples dropped (weight 0) or weighted.
    PoolBatch pb = pool_.take_batch(threshold_, version_);
    measure_rate(static_cast<int64_t>(pb.samples.size()), static_cast<int64_t>(pb.dropped_ids.size()));
    if (data_) data_settle(pb);  // trained groups' tickets done, dropped ones requeued
    adjust_member_groups(pb.dropped_ids);
    coord_idle_ = false;
    std::vector<RolloutSample>& batch = pb.samples;
    std::vector<io::ConsumedRecord> consumed;
    for (int64_t id : pb.dropped_ids) consumed.push_back({id, s, 0.f, 0.f});
    const double age_sum = pb.age_sum;
    const int64_t age_max = pb.age_max;
    const auto stale_dropped = static_cast<int64_t>(pb.dropped_ids.size()) + purged_since_step_;
    dropped_ += static_cast<int64_t>(pb.dropped_ids.size());
    purged_since_step_ = 0;  // purge_stale's drops (in /consumed with this step's number) count in this row
    weighted_ += pb.weighted;
    const double handover_s = hand_over(joiners, s);  // --rebalance-every: the new group's communicator
    bcast_batch(batch);
    enter(SpanKind::kTrain, s);
    TrainReport tr = trainer_->train_step(s, batch);
    measure_step(s, clock_.now() - t_begin - handover_s);
    version_ = s + 1;
    started_ = 0;
    resume_generations();  // --resume-mode
    enter(SpanKind::kWeightSync);
    send_weights(version_);
    for (size_t i = 0; i < batch.size(); ++i) consumed.push_back({batch[i].id, s, tr.advantages[i], batch[i].weight});
    consumed_count_ += static_cast<int64_t>(consumed.size());
    ++step_;
    // The evaluation (generation, on the coordinator) falls between steps, not inside one.
    const double t_end = clock_.now();
    // --data: the step that trained the last row of the last epoch ends the run, so it evaluates too.
    const bool eval_now =
        (opt_.eval_every > 0 && step_ % opt_.eval_every == 0) || step_ == opt_.steps || (data_ && sampler_->finished());
    const double ev0 = clock_.now();
    const double ev = eval_now ? evaluate(static_cast<int32_t>(step_)) : -1;
    const double ev_s = clock_.now() - ev0;
    eval_s_ += ev_s;  // not generation for training (--rebalance-every's rates)
    cycle_eval_s_ += ev_s;

    io::StepRecord row;
    row.step = s;
    row.lr = step_lr(opt_, s);
    row.t_start = t_start;
    row.t_end = t_end;
    row.policy_version = version_;
    row.samples = static_cast<int64_t>(batch.size());
    double mean = 0, var = 0;
    int64_t tokens = 0;
    for (const auto& r : batch) {
        mean += r.reward;
        tokens += static_cast<int64_t>(r.prompt.size() + r.response.size());
    }
    mean /= std::max<double>(1, static_cast<double>(batch.size()));
    for (const auto& r : batch) var += (r.reward - mean) * (r.reward - mean);
    row.tokens = tokens;
    row.reward_mean = static_cast<float>(mean);
    row.reward_std = static_cast<float>(std::sqrt(var / std::max<double>(1, static_cast<double>(batch.size()))));
    row.loss = static_cast<float>(tr.loss);
    row.kl = static_cast<float>(tr.kl);
    row.entropy = static_cast<float>(tr.entropy);
    row.clip_frac = static_cast<float>(tr.clip_frac);
    row.logprob_diff_mean = static_cast<float>(tr.logprob_diff_mean);
    row.staleness_mean = static_cast<float>(age_sum / std::max<double>(1, static_cast<double>(batch.size())));
    row.staleness_max = static_cast<int32_t>(age_max);
    row.stale_dropped = stale_dropped;
    row.stale_weighted = pb.weighted;
    row.skipped_updates = tr.skipped_updates;  // the actor's (and the critic's, when it lives on this rank)
    row.is_weight_mean = tr.is_weight_mean;    // the whole train group's (RlTrainer reduces them)
    row.is_weight_max = tr.is_weight_max;
    row.rs_rejected = tr.rs_rejected;
    row.rs_rejected_tokens = tr.rs_rejected_tokens;
    row.train_real_tokens = tr.real_tokens;  // the whole train group's, when the coordinator holds the actor
    row.train_token_slots = tr.token_slots;
    row.train_members = static_cast<int32_t>(members_.size());
    row.train_group = sched_policy::rank_ranges(members_, io::kTrainGroupLen);
    if (rebalance_) {
        if (decision_.step == s) {
            row.regroup = decision_.kind;
            row.predicted_s = decision_.best_s;
            row.predicted_current_s = decision_.current_s;
        }
        const bool moved = !resplits_.empty() && resplits_.back().step == s;
        row.resplit_s = handover_s;
        row.resplit_bytes = moved ? resplits_.back().bytes : 0;
    }
    const double dt = std::max(1e-9, t_end - t_start);
    row.samples_per_s = static_cast<float>(static_cast<double>(batch.size()) / dt);
    // Idle: every rank's idle spans inside this step, as known to the coordinator now.
    std::vector<io::SpanRecord> spans = take_spans();
    spans.insert(spans.end(), other_spans_.begin(), other_spans_.end());
    other_spans_.clear();
    measure_spans(spans);  // --rebalance-every: the generators' time generating
    double idle = 0;
    for (const auto& sp : spans)
        if (sp.kind == SpanKind::kIdle)
            idle += std::max(0.0, std::min(sp.t_end, t_end) - std::max(sp.t_start, t_start));
    row.idle_frac = static_cast<float>(std::min(1.0, idle / (roles_.world_size * dt)));
    total += static_cast<double>(batch.size());
    health::status_board().step_done(step_, static_cast<int64_t>(total), row.samples_per_s, row.staleness_mean,
                                     dropped_);
    if (s == 0) sum.first_reward = row.reward_mean;
    sum.last_reward = row.reward_mean;
    if (ev >= 0) {
        sum.last_eval = ev;
        sum.best_eval = std::max(sum.best_eval, ev);
    }
    enter(SpanKind::kIo);
    write(consumed, {row}, spans);
    char evb[32] = "";
    if (ev >= 0) snprintf(evb, sizeof evb, "  eval %.3f", ev);
    const std::string evs = ev >= 0 && data_ ? "  val " + val_line_ : std::string(evb);  // --val-data: as sync's
    say("step %5d/%-5lld reward %.3f ± %.3f%s  loss %+.4f  samples/s %7.1f  staleness %.2f/%d  idle %4.1f%%  "
        "elapsed %6.1fs\n",
        s + 1, static_cast<long long>(opt_.steps), row.reward_mean, row.reward_std, evs.c_str(), row.loss,
        row.samples_per_s, row.staleness_mean, row.staleness_max, 100.0 * row.idle_frac, clock_.now());
    // --max-bad-steps: the loop stops at this boundary and the end of the run checkpoints.
    std::string warning;
    if (bad_steps_.record(s + 1, row.skipped_updates, &warning)) bad_stop_ = true;
    if (!warning.empty()) say("%s", warning.c_str());
    return t_end;
}

void AsyncScheduler::bcast_batch(std::vector<RolloutSample>& batch) {
    std::vector<char> b;
    if (me_ == coord_) b = pack_samples(batch);
    int64_t n = static_cast<int64_t>(b.size());
    std::vector<MPI_Request> v(1);
    TAGFLOW_MPI_CHECK(MPI_Ibcast(&n, 1, MPI_INT64_T, 0, train_comm_, &v[0]));
    wait_all(v);
    b.resize(static_cast<size_t>(n));
    v.assign(1, MPI_REQUEST_NULL);
    TAGFLOW_MPI_CHECK(MPI_Ibcast(b.data(), static_cast<int>(n), MPI_CHAR, 0, train_comm_, &v[0]));
    wait_all(v);
    if (me_ != coord_) batch = unpack_samples(b.data(), b.size());
}

void AsyncScheduler::write(const std::vector<io::ConsumedRecord>& consumed, const std::vector<io::StepRecord>& steps,
                           const std::vector<io::SpanRecord>& spans) {
    if (gw_rec_) gw_rec_->write(*run_, written_);  // /tree rows first, then the samples naming them
    agent_tree_.write(*run_, written_);            // multi-turn sessions: likewise
    run_->append_samples(written_);
    written_.clear();
    run_->append_consumed(consumed);
    run_->append_consumed(purged_);  // --data: groups purge_stale dropped (weight 0)
    purged_.clear();
    run_->append_steps(steps);
    run_->append_eval(evals_);
    evals_.clear();
    run_->append_syncs(syncs_);
    syncs_.clear();
    run_->append_timeline(spans);
    run_->flush();
}

void AsyncScheduler::write_membership() {
    std::ostringstream f;
    f << "{\"mode\": \"" << opt_.mode.name() << "\", \"coordinator\": " << coord_ << ", \"critic\": [";
    for (size_t k = 0; k < critic_pos_.size(); ++k)
        f << (k ? ", " : "") << step_members_[static_cast<size_t>(critic_pos_[k])];
    f << "], \"eligible\": [";
    for (size_t k = 0; k < eligible_.size(); ++k) f << (k ? ", " : "") << eligible_[k];
    // --rebalance-every: every change of the train group, with the predictions that chose it and
    // what forming it cost.
    f << "], \"changes\": [";
    for (size_t i = 0; i < resplits_.size(); ++i) {
        const Resplit& c = resplits_[i];
        auto list = [&](const std::vector<int>& v) {
            std::string t = "[";
            for (size_t k = 0; k < v.size(); ++k) t += (k ? ", " : "") + std::to_string(v[k]);
            return t + "]";
        };
        char nums[160];
        std::snprintf(nums, sizeof nums,
                      "\"predicted_s\": %.6f, \"current_s\": %.6f, \"state_bytes\": %lld, \"seconds\": %.6f", c.best_s,
                      c.current_s, static_cast<long long>(c.bytes), c.seconds);
        f << (i ? ", " : "") << "{\"step\": " << c.step << ", \"from\": " << list(c.from) << ", \"to\": " << list(c.to)
          << ", " << nums << "}";
    }
    f << "], \"seen\": {";
    bool first = true;
    for (const auto& [rank, log] : seen_) {
        f << (first ? "" : ", ") << "\"" << rank << "\": [";
        first = false;
        for (size_t i = 0; i < log.size(); ++i) {
            f << (i ? ", " : "") << "[" << log[i].epoch << ", [";
            for (size_t j = 0; j < log[i].members.size(); ++j) f << (j ? ", " : "") << log[i].members[j];
            f << "]]";
        }
        f << "]";
    }
    f << "}}\n";
    write_file_replace(opt_.out + "/membership.json", f.str());  // never through a planted link
}

}  // namespace tagflow::sched::async
