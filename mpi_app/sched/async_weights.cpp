// SPDX-License-Identifier: Apache-2.0
// async_weights: new weights from the coordinator to the rollout-only ranks: train::WeightPush's
// non-blocking sends (dense, or with --sync-delta only what each receiver lacks) and
// train::WeightPull's receives, swapped in at a token boundary; the generations in flight then
// resume as --resume-mode says. At STOP every receiver takes in the last version and reports a
// hash of its weights, which the coordinator checks against its own (check_weights()).
// Part of the async scheduler (sched/async_scheduler_impl.hpp).
#include "sched/async_scheduler_impl.hpp"

namespace tagflow::sched::async {

void AsyncScheduler::weights_held() {
    if (push_) push_->hold(train::FlatView(params()), version_, receivers_);
    if (pull_) pull_->set_held(version_);
}

void AsyncScheduler::post_weight_recv() { pull_->post(); }

bool AsyncScheduler::take_weights() {
    if (!pull_->ready()) return false;
    enter(SpanKind::kWeightSync, pull_->incoming());
    {
        torch::NoGradGuard ng;
        // Into the parameters' memory (views of flat_): written behind autograd's back, so their
        // version counters are bumped for the engine, which re-snapshots the weights.
        pull_->apply(train::FlatView(params()));
    }
    train::bump_versions(policy_->parameters());
    version_ = pull_->held();
    return true;
}

void AsyncScheduler::test_weight_recv() {
    if (take_weights()) resume_generations();  // at a token boundary
}

void AsyncScheduler::drain_weight_recv(int32_t version) {
    if (!pull_ || !is_recv_) return;
    while (pull_->held() < version)
        if (!take_weights()) nap();  // sent before STOP: arriving (the generations are discarded)
}

void AsyncScheduler::resume_generations() {
    if (!engine_) return;
    const bool recompute = opt_.resume_mode == "recompute";
    engine_->update_weights(version_, recompute ? rollout::ResumeMode::kRecompute : rollout::ResumeMode::kKeep,
                            recompute ? opt_.resume_window : 0, recompute ? opt_.resume_min_tokens : 0);
}

void AsyncScheduler::cancel_weight_recv() {
    if (pull_) pull_->cancel();
}

uint64_t AsyncScheduler::weights_hash() const { return train::hash_bits({flat_}); }

void AsyncScheduler::send_weights(int32_t version) {
    if (!push_) return;
    wait_weight_sends();       // the push's buffers are reused
    if (receivers_.empty()) {  // --rebalance-every, none now: a rank that leaves later holds this version
        push_->hold(train::FlatView(params()), version, {});
        return;
    }
    push_stats_ = push_->start(train::FlatView(params()), version, receivers_);
    pushing_ = true;
    wsend_t0_ = clock_.now();
}

void AsyncScheduler::test_weight_sends() {
    if (!pushing_ || !push_->done()) return;
    pushing_ = false;
    io::SyncRecord r;
    r.version = push_stats_.version;
    r.bytes = push_stats_.bytes;
    r.dense_bytes = push_stats_.dense_bytes;
    r.t_start = wsend_t0_;
    r.t_end = std::max(wsend_t0_, clock_.now());
    r.mode = push_->mode();
    r.buckets = push_stats_.buckets;
    syncs_.push_back(r);
}

void AsyncScheduler::wait_weight_sends() {
    if (!pushing_) return;
    enter(SpanKind::kIdle);
    while (pushing_) {
        poll_messages();
        test_weight_sends();
        if (pushing_) nap();
    }
}

}  // namespace tagflow::sched::async

namespace tagflow::sched::async {

void AsyncScheduler::report_weights(RunSummary& sum) {
    if (push_) {
        const uint64_t mine = weights_hash();
        std::string ranks;
        bool same = true;
        std::vector<int> check = receivers_;  // --rebalance-every: and the train group's other members
        if (rebalance_)
            for (int r : members_)
                if (r != coord_) check.push_back(r);
        std::sort(check.begin(), check.end());
        // --rebalance-every with ppo: the critic moved with the group too; each member's is C's.
        const uint64_t critic = rebalance_ && trainer_ ? trainer_->critic_hash() : 0;
        for (int r : members_) {
            if (r == coord_ || finals_of_[r].critic_hash == critic) continue;
            log_error("rank %d holds a critic (hash %016llx) other than the coordinator's (hash %016llx)", r,
                      static_cast<unsigned long long>(finals_of_[r].critic_hash),
                      static_cast<unsigned long long>(critic));
            same = false;
        }
        for (int r : check) {
            const FinalWeights& f = finals_of_[r];
            ranks += (ranks.empty() ? "" : ",") + std::to_string(r);
            if (f.version == version_ && f.hash == mine) continue;
            log_error(
                "rank %d holds weights version %d (hash %016llx), the coordinator version %d (hash %016llx): "
                "the %s weight sync did not make them bit-identical",
                r, f.version, static_cast<unsigned long long>(f.hash), version_, static_cast<unsigned long long>(mine),
                push_->mode());
            same = false;
        }
        if (same && critic != 0)
            say("%s: the train group's members hold the coordinator's critic bit for bit (critic hash %016llx)\n",
                opt_.mode.name(), static_cast<unsigned long long>(critic));
        if (same && rebalance_)
            say("%s: ranks {%s} (weight receivers and the train group) hold version %d bit-identical to the "
                "coordinator's (weights hash %016llx, %s)\n",
                opt_.mode.name(), ranks.c_str(), version_, static_cast<unsigned long long>(mine), push_->mode());
        else if (same)
            say("%s: rollout-only ranks {%s} hold version %d bit-identical to the coordinator's (weights hash "
                "%016llx, %s)\n",
                opt_.mode.name(), ranks.c_str(), version_, static_cast<unsigned long long>(mine), push_->mode());
        else if (sum.exit_code == 0) sum.exit_code = 1;
    }
    {
        FinalWeights t;
        if (engine_) {
            t.recomputed_tokens = engine_->stats().recomputed_tokens;
            t.recomputed_seqs = engine_->stats().recomputed_seqs;
            t.updates = engine_->stats().weight_updates;
        }
        for (const auto& [r, f] : finals_of_) {
            t.recomputed_tokens += f.recomputed_tokens;
            t.recomputed_seqs += f.recomputed_seqs;
            t.updates += f.updates;
        }
        say("%s: --resume-mode %s: %lld cached tokens of %lld sequences in flight recomputed over %lld engine "
            "weight updates (all generating ranks)\n",
            opt_.mode.name(), opt_.resume_mode.c_str(), static_cast<long long>(t.recomputed_tokens),
            static_cast<long long>(t.recomputed_seqs), static_cast<long long>(t.updates));
    }
}

}  // namespace tagflow::sched::async
