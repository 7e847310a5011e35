// SPDX-License-Identifier: Apache-2.0
// async_data: `tagflow train --data` in the asynchronous modes (share/doc/data.md, "Training on a data
// set"). The coordinator owns the data::EpochSampler: it hands every generator prompt groups
// (kTagAssign: int64 groups; group = attempt x 2^32 + epoch x rows + row, step/data_task.hpp), a few
// at a time, and settles each group's ticket when the group leaves the pool: done when it trained, requeued
// when it was dropped as stale (the ticket's next hand-out is the next attempt, a new group). So every
// row of every epoch is trained exactly once with weight > 0. The generators score finished samples
// through their rank's reward scorer (reward/scorer.hpp) and send them once scored; a failed reward
// under --reward-error fail goes to the coordinator (kTagRewardError), which stops the run at the step
// boundary with a checkpoint. Checkpoints hold the sampler, the groups handed out and the attempts;
// a resume claims back the tickets of the groups in its pool and requeues the others.
// Part of the async scheduler (sched/async_scheduler_impl.hpp). Does NOT: read rows (DataTask), or
// decide when to train (coordinator_loop, with data_tail()).
#include <nlohmann/json.hpp>

#include "sched/async_scheduler_impl.hpp"

namespace tagflow::sched::async {

void AsyncScheduler::setup_data() {
    data_ = as_data_task(*task_);
    if (!data_) return;
    rows_ = data_->dataset().size();
    pool_.set_whole_groups(true);  // a row trains with all of its samples or is dropped whole, requeued
    if (me_ != coord_) return;
    sampler_.emplace(rows_, static_cast<uint64_t>(opt_.seed), static_cast<uint64_t>(opt_.epochs));
    gen_load_.assign(gens_.size(), 0);
}

void AsyncScheduler::assign_work() {
    for (auto it = asg_sends_.begin(); it != asg_sends_.end();) {
        int done = 0;
        TAGFLOW_MPI_CHECK(MPI_Test(&it->req, &done, MPI_STATUS_IGNORE));
        it = done ? asg_sends_.erase(it) : std::next(it);
    }
    const int64_t G = opt_.group_size;
    // A generator's engine holds max_batch sequences; one group more keeps it from waiting for the next.
    const int64_t cap = (opt_.max_batch + G - 1) / G + 1;
    // --admission staleness: no more started-and-unconsumed samples than the budget (async_admission.cpp).
    const int64_t budget = admission_ ? sched_policy::admission_budget(opt_, rate_, threshold_) : 0;
    int64_t out = admission_ ? outstanding() : 0;
    // One group at a time to the generator holding the fewest, so a budget smaller than every
    // engine's capacity is shared: handing it all to the first generator could leave the run
    // waiting for good when that one may start only its --rollout-ahead share per version.
    // Under admission a generating train-group rank beside rollout-only ones is capped as the
    // built-in tasks' grants are (sched_policy::grant_caps), but its allowance stays 0 (drops are
    // not traced to a generator here): one group once the coordinator waited idle since the step.
    std::vector<int64_t> caps(gens_.size(), cap);
    if (admission_) caps = sched_policy::grant_caps(generator_trains(), member_groups_, coord_idle_, 1, cap);
    for (int64_t& c : caps) --c;  // groups assigned, below the cap
    std::vector<std::vector<int64_t>> groups(gens_.size());
    while (!admission_ || out + G <= budget) {
        const size_t best = sched_policy::least_loaded(gen_load_, caps);
        if (best == gens_.size()) break;
        std::optional<data::Ticket> t = sampler_->take();
        if (!t) break;
        out += G;
        auto a = attempt_.find(*t);
        const int64_t g = data_group(*t, rows_, a == attempt_.end() ? 0 : a->second);
        ticket_of_[g] = *t;
        group_left_[g] = G;
        gen_of_[g] = best;
        ++gen_load_[best];
        groups[best].push_back(g);
    }
    for (size_t i = 0; i < gens_.size(); ++i) {
        if (groups[i].empty()) continue;
        if (gens_[i] == me_) {
            assigned_.insert(assigned_.end(), groups[i].begin(), groups[i].end());
            continue;
        }
        wire::Writer w;
        for (int64_t g : groups[i]) w.put<int64_t>(g);
        asg_sends_.push_back({MPI_REQUEST_NULL, w.take()});
        auto& m = asg_sends_.back();
        TAGFLOW_MPI_CHECK(MPI_Isend(m.buf.data(), static_cast<int>(m.buf.size()), MPI_CHAR, gens_[i], kTagAssign,
                                    p2p_.get(), &m.req));
    }
}

void AsyncScheduler::data_received(const RolloutSample& r) {
    auto it = group_left_.find(r.group);
    if (it == group_left_.end())
        throw InternalError("coordinator: sample " + std::to_string(r.id) + " of group " + std::to_string(r.group) +
                            ", which was not handed out");
    if (--it->second > 0) return;
    group_left_.erase(it);
    auto g = gen_of_.find(r.group);
    --gen_load_.at(g->second);
    gen_of_.erase(g);
}

void AsyncScheduler::data_settle(const PoolBatch& pb) {
    std::set<int64_t> dropped(pb.dropped_groups.begin(), pb.dropped_groups.end());
    for (int64_t g : pb.groups) {
        auto it = ticket_of_.find(g);
        if (it == ticket_of_.end()) throw InternalError("coordinator: group " + std::to_string(g) + " has no ticket");
        const data::Ticket t = it->second;
        ticket_of_.erase(it);
        if (dropped.count(g)) {
            sampler_->requeue(t);
            attempt_[t] = data_attempt(g) + 1;
        } else {
            sampler_->done(t);
            attempt_.erase(t);
        }
    }
}

void AsyncScheduler::purge_stale() {
    std::vector<int64_t> ids;
    PoolBatch pb;
    pb.groups = pool_.take_stale(version_, ids);
    if (pb.groups.empty()) return;
    pb.dropped_groups = pb.groups;
    data_settle(pb);
    for (int64_t id : ids) purged_.push_back({id, static_cast<int32_t>(step_), 0.f, 0.f});
    dropped_ += static_cast<int64_t>(ids.size());
    consumed_count_ += static_cast<int64_t>(ids.size());
    purged_since_step_ += static_cast<int64_t>(ids.size());
}

bool AsyncScheduler::data_tail() const {
    // Nothing left to hand out and every group handed out is in the pool, ready (stale ones were
    // purged and requeued, which makes the sampler hand out again).
    return sampler_->exhausted() && group_left_.empty() && !ticket_of_.empty();
}

void AsyncScheduler::poll_assign() {
    for (;;) {
        int flag = 0;
        MPI_Status st;
        TAGFLOW_MPI_CHECK(MPI_Iprobe(coord_, kTagAssign, p2p_.get(), &flag, &st));
        if (!flag) return;
        int count = 0;
        TAGFLOW_MPI_CHECK(MPI_Get_count(&st, MPI_CHAR, &count));
        std::vector<int64_t> g(static_cast<size_t>(count) / sizeof(int64_t));
        TAGFLOW_MPI_CHECK(MPI_Recv(g.data(), count, MPI_CHAR, coord_, kTagAssign, p2p_.get(), MPI_STATUS_IGNORE));
        assigned_.insert(assigned_.end(), g.begin(), g.end());
    }
}

void AsyncScheduler::collect_rewards(std::vector<RolloutSample>& out) {
    if (awaiting_.empty()) return;
    std::vector<reward::Result> res;
    data_->scorer().poll(res);
    for (const reward::Result& q : res) {
        auto it = awaiting_.find(q.id);
        if (it == awaiting_.end()) throw InternalError("reward for sample " + std::to_string(q.id) + ", not awaited");
        RolloutSample r = std::move(it->second);
        awaiting_.erase(it);
        if (data_->scorer().fatal(q)) {
            // The sample is not sent: its group never completes, its ticket is handed out again
            // after the resume. The coordinator stops the run at the step boundary.
            if (me_ == coord_) {
                if (reward_error_.empty()) reward_error_ = q.cause;
            } else if (!reward_error_sent_) {
                reward_error_sent_ = true;
                wire::Writer w;
                w.str(q.cause);
                queue_send(w.take(), kTagRewardError);
            }
            continue;
        }
        if (!q.ok) {
            ++rewards_failed_;
            log_warn("%s (scored 0, --reward-error zero)", q.cause.c_str());
        }
        r.reward = q.score;
        r.extras = stored_extras(q);
        out.push_back(std::move(r));
    }
}

void AsyncScheduler::put_data_checkpoint(ckpt::Manifest& m) const {
    m.set("data_sampler", sampler_->to_bytes());  // handed out, not trained: outstanding
    m.set_int("data_rows", static_cast<int64_t>(rows_));
    nlohmann::json a = nlohmann::json::array(), n = nlohmann::json::array();
    for (const auto& [g, t] : ticket_of_) a.push_back(g);
    for (const auto& [t, k] : attempt_) n.push_back({t.epoch, t.row, k});
    m.set("data.groups", a.dump());    // every group handed out and not settled
    m.set("data.attempts", n.dump());  // requeued tickets: [epoch, row, next attempt]
}

void AsyncScheduler::restore_data(const ckpt::Manifest& m, std::vector<RolloutSample>& pooled,
                                  std::vector<int64_t>& ready) {
    if (!m.has("data_sampler") || !m.has("data.groups"))
        throw ConfigError("checkpoint " + m.path + ": written without --data; resume it without --data");
    if (m.get_int("data_rows") != static_cast<int64_t>(rows_))
        throw ConfigError("checkpoint " + m.path + ": written for " + std::to_string(m.get_int("data_rows")) +
                          " data rows, --data " + opt_.data + " has " + std::to_string(rows_));
    sampler_.emplace(data::EpochSampler::from_bytes(m.get("data_sampler"), rows_, static_cast<uint64_t>(opt_.seed),
                                                    static_cast<uint64_t>(opt_.epochs)));
    try {
        for (const auto& e : nlohmann::json::parse(m.get("data.attempts")))
            attempt_[{e.at(0).get<uint64_t>(), e.at(1).get<uint64_t>()}] = e.at(2).get<uint64_t>();
        // The ready groups of the pool train after the resume: their tickets are claimed back. Every
        // other group handed out (generating, or partly received: its samples in flight are lost) is
        // handed out again as its next attempt; its samples already received stay in /samples, untrained.
        const std::set<int64_t> is_ready(ready.begin(), ready.end());
        for (const auto& e : nlohmann::json::parse(m.get("data.groups"))) {
            const auto g = e.get<int64_t>();
            const data::Ticket t = data_ticket(g, rows_);
            if (is_ready.count(g)) {
                sampler_->claim(t);
                ticket_of_[g] = t;
            } else {
                uint64_t& k = attempt_[t];
                k = std::max<uint64_t>(k, data_attempt(g) + 1);
            }
        }
    } catch (const nlohmann::json::exception& e) {
        throw ConfigError("checkpoint " + m.path + ": malformed data.groups/data.attempts (" + e.what() + ")");
    }
    std::vector<RolloutSample> keep;
    for (RolloutSample& r : pooled)
        if (ticket_of_.count(r.group)) keep.push_back(std::move(r));
    pooled = std::move(keep);
    for (int64_t g : ready)
        if (!ticket_of_.count(g))
            throw ConfigError("checkpoint " + m.path + ": ready group " + std::to_string(g) + " was not handed out");
}

}  // namespace tagflow::sched::async
