// SPDX-License-Identifier: Apache-2.0
// async_worker: every rank but the coordinator: its loop (generate, train when told, ship samples
// and spans), its messages to the coordinator, and its final report at STOP.
// Part of the async scheduler (sched/async_scheduler_impl.hpp).
#include "sched/async_scheduler_impl.hpp"

namespace tagflow::sched::async {

void AsyncScheduler::send_signal(int sig) {
    sig_sent_ = true;
    wire::Writer w;
    w.put<int64_t>(sig);
    queue_send(w.take(), kTagSignal);
}

void AsyncScheduler::queue_send(std::vector<char> b, int tag) {
    sends_.push_back({MPI_REQUEST_NULL, std::move(b)});
    auto& m = sends_.back();
    TAGFLOW_MPI_CHECK(
        MPI_Isend(m.buf.data(), static_cast<int>(m.buf.size()), MPI_CHAR, coord_, tag, p2p_.get(), &m.req));
}

bool AsyncScheduler::poll_ctl(std::vector<int64_t>& m) {
    int flag = 0;
    MPI_Status st;
    TAGFLOW_MPI_CHECK(MPI_Iprobe(coord_, kTagCtl, p2p_.get(), &flag, &st));
    if (!flag) return false;
    int count = 0;
    TAGFLOW_MPI_CHECK(MPI_Get_count(&st, MPI_CHAR, &count));
    m.assign(static_cast<size_t>(count) / sizeof(int64_t), 0);
    TAGFLOW_MPI_CHECK(MPI_Recv(m.data(), count, MPI_CHAR, coord_, kTagCtl, p2p_.get(), MPI_STATUS_IGNORE));
    if (m.size() < 4 || m.size() != 4 + static_cast<size_t>(m[3]))
        throw InternalError("rank " + std::to_string(me_) + ": malformed control message from the coordinator");
    return true;
}

void AsyncScheduler::worker_loop() {
    std::vector<int64_t> ctl;
    std::vector<RolloutSample> done;
    for (;;) {
        // A requeue signal here: tell the coordinator once (it checkpoints and STOPs all).
        if (!sig_sent_ && ckpt::requeue_signal() != 0) send_signal(ckpt::requeue_signal());
        poll_clock();                             // the coordinator's checkpoint measures this rank's clock again
        if (data_ && is_gen_) poll_assign();      // --data: the coordinator's prompt groups
        if (admission_ && is_gen_) poll_admit();  // --admission staleness: the groups it may start
        if (poll_ctl(ctl)) {
            if (ctl[0] == kCtlStop) {
                drain_weight_recv(static_cast<int32_t>(ctl[2]));  // the coordinator's last version, sent before STOP
                break;
            }
            const auto s = static_cast<int32_t>(ctl[1]);
            if (ctl[0] == kCtlLeave) {  // --rebalance-every: out of the train group, a weight receiver
                enter(SpanKind::kResplit, s);
                follow_group(ctl);
                enter(SpanKind::kRollout);
                continue;
            }
            if ((ctl[0] != kCtlTrain && ctl[0] != kCtlTrainCkpt) || !(in_step_ || rebalance_))
                throw InternalError("rank " + std::to_string(me_) +
                                    ": told to train, but it is not in the train group");
            // Preempted into the train group: the engine is not stepped until training ends.
            enter(SpanKind::kResplit, s);
            Membership mb;
            mb.epoch = ctl[1];
            mb.members.assign(ctl.begin() + 4, ctl.end());
            my_log_.push_back(mb);
            if (rebalance_) {
                follow_group(ctl);  // a new group (its communicator), and when joining the actor's state
                enter(SpanKind::kResplit, s);
            } else if (mb.members != std::vector<int64_t>(members_.begin(), members_.end())) {
                throw InternalError("rank " + std::to_string(me_) + ": epoch " + std::to_string(s) +
                                    " announces a train group other than the one built up front");
            }
            std::vector<RolloutSample> batch;
            bcast_batch(batch);
            enter(SpanKind::kTrain, s);
            trainer_->train_step(s, batch);
            trained_ = s + 1;
            if (trainer_->has_actor()) {  // else (a critic rank) new weights come by the broadcast, if at all
                version_ = s + 1;
                started_ = 0;
                resume_generations();  // --resume-mode
            }
            if (ctl[0] == kCtlTrainCkpt) send_trainer_state();
            enter(is_gen_ ? SpanKind::kRollout : SpanKind::kIdle);
            continue;
        }
        if (is_recv_) test_weight_recv();
        done.clear();
        if (is_gen_) {
            gateway_poll();
            gen_step(done);
            if (engine_->active() + engine_->waiting() == 0) {  // nothing to generate (--gateway-only)
                enter(SpanKind::kIdle);
                nap();
            }
        } else {
            enter(SpanKind::kIdle);  // a train-only rank waiting for the next training step
            nap();
        }
        // Finished samples go out at once; spans at least every second anyway.
        if (!done.empty() || clock_.now() - last_ship_ > 1.0) {
            last_ship_ = clock_.now();
            send_samples(done);
        } else {
            test_sends();
        }
    }
    // STOP: unfinished generations are discarded (never written); finished ones are sent.
    send_trainer_state();                // for the checkpoint the coordinator writes now
    if (gw_router_) gw_router_->stop();  // the HTTP thread ends; requests in flight end "abort"
    if (gw_worker_) gw_worker_->finish_sends();
    if (is_recv_) cancel_weight_recv();
    if (data_ && is_gen_) poll_assign();      // sent before STOP: received, so the coordinator's sends complete
    if (admission_ && is_gen_) poll_admit();  // likewise the grants
    if (data_ && rewards_failed_ > 0)
        log_warn("rank %d: %llu rewards failed and were scored 0 (--reward-error zero)", me_,
                 static_cast<unsigned long long>(rewards_failed_));
    const int64_t discarded =
        engine_ ? engine_->active() + engine_->waiting() + static_cast<int64_t>(awaiting_.size()) : 0;
    enter(SpanKind::kIdle);
    finish_sends();
    cut();
    wire::Writer w;
    wire::put_spans(w, tl_.take());
    w.put<uint64_t>(my_log_.size());
    for (const auto& m : my_log_) {
        w.put<int64_t>(m.epoch);
        w.put<int64_t>(static_cast<int64_t>(m.members.size()));
        for (int64_t r : m.members) w.put<int64_t>(r);
    }
    w.put<int64_t>(discarded);
    // The weights this rank holds (weight receivers, and with --rebalance-every the train group's
    // members; -1 elsewhere) for the coordinator's check, and what --resume-mode recompute cost here.
    const bool member = rebalance_ && in_train_;
    w.put<int32_t>(is_recv_ ? pull_->held() : member ? version_ : -1);
    w.put<uint64_t>(is_recv_ || member ? weights_hash() : 0);
    w.put<int64_t>(engine_ ? engine_->stats().recomputed_tokens : 0);
    w.put<int64_t>(engine_ ? engine_->stats().recomputed_seqs : 0);
    w.put<int64_t>(engine_ ? engine_->stats().weight_updates : 0);
    w.put<uint64_t>(member && trainer_ ? trainer_->critic_hash() : 0);  // ppo: the critic moved with the group
    std::vector<char> b = w.take();
    MPI_Request rq = MPI_REQUEST_NULL;
    TAGFLOW_MPI_CHECK(MPI_Isend(b.data(), static_cast<int>(b.size()), MPI_CHAR, coord_, kTagFinal, p2p_.get(), &rq));
    std::vector<MPI_Request> v{rq};
    wait_all(v);
}

}  // namespace tagflow::sched::async
