// SPDX-License-Identifier: Apache-2.0
// async_admission: --admission staleness in the asynchronous modes (share/doc/architecture.md,
// "Admission"). The coordinator measures the samples a training step trains per policy version and
// keeps the samples started but not yet consumed (in flight on the generators, or pooled) within
// sched_policy::admission_budget, so a group that starts now is trained within --staleness versions
// instead of being generated only to be dropped. Built-in tasks: the coordinator grants each generator
// its next local groups (kTagAdmit: version, K), at most a few groups ahead of what it has delivered,
// and a generator starts only granted groups; without a grant it waits (idle spans). --data: assign_work
// (async_data.cpp) hands out groups within the same budget. Nothing here is checkpointed: after a resume
// the grants restart at the generators' marks (lo_), which is where they resume generating.
// Part of the async scheduler (sched/async_scheduler_impl.hpp). Does NOT decide when to train.
#include "sched/async_scheduler_impl.hpp"

namespace tagflow::sched::async {

int64_t AsyncScheduler::outstanding() const {
    // Pooled: every sample of an incomplete group, and of the ready ones those a step can still
    // train (a ready sample already too stale is dropped by the next step, whatever is admitted:
    // counting it could hold admission below the threshold for good).
    int64_t n = pool_.usable(version_) + pool_.partial_samples();
    if (data_) {
        for (const auto& [g, left] : group_left_) n += left;
        return n;
    }
    for (size_t i = 0; i < granted_.size(); ++i) n += std::max<int64_t>(0, granted_[i] * opt_.group_size - arrived_[i]);
    return n;
}

bool AsyncScheduler::hold_for_late() {
    if (opt_.late_wait <= 0) return false;
    const double now = clock_.now();
    const double held = hold_since_ < 0 ? 0.0 : now - hold_since_;
    if (held >= sched_policy::late_wait_s(opt_, pool_.late_groups(version_), threshold_, cycle_s_,
                                          static_cast<int64_t>(members_.size())))
        return false;
    if (hold_since_ < 0) {
        hold_since_ = now;
        ++holds_;
    }
    return true;
}

void AsyncScheduler::measure_rate(int64_t trained, int64_t dropped) {
    rate_ = sched_policy::next_admission_rate(rate_, trained, dropped);
}

void AsyncScheduler::admit() {
    for (auto it = admit_sends_.begin(); it != admit_sends_.end();) {
        int done = 0;
        TAGFLOW_MPI_CHECK(MPI_Test(&it->req, &done, MPI_STATUS_IGNORE));
        it = done ? admit_sends_.erase(it) : std::next(it);
    }
    if (!admission_ || data_ || opt_.gateway_only || gens_.empty()) return;
    const int64_t budget = sched_policy::admission_budget(opt_, rate_, threshold_);
    const std::vector<int64_t> before = granted_;
    // A generator that trains (multiplex: a train-group member) is granted within its allowance,
    // and one group once this coordinator has waited idle since the last step (grant_caps).
    sched_policy::grant_groups(
        granted_, arrived_, outstanding(), budget, opt_.group_size,
        sched_policy::grant_caps(generator_trains(), member_groups_, coord_idle_, opt_.group_size,
                                 sched_policy::admission_cap(opt_.max_batch, opt_.group_size)));
    for (size_t i = 0; i < gens_.size(); ++i) {
        if (granted_[i] == before[i]) continue;
        if (gens_[i] == me_) {
            admit_k_ = granted_[i];
            continue;
        }
        wire::Writer w;
        w.put<int64_t>(version_);
        w.put<int64_t>(granted_[i]);
        admit_sends_.push_back({MPI_REQUEST_NULL, w.take()});
        auto& m = admit_sends_.back();
        TAGFLOW_MPI_CHECK(
            MPI_Isend(m.buf.data(), static_cast<int>(m.buf.size()), MPI_CHAR, gens_[i], kTagAdmit, p2p_.get(), &m.req));
    }
}

std::vector<uint8_t> AsyncScheduler::generator_trains() const {
    std::vector<uint8_t> trains(gens_.size(), 0);
    for (size_t i = 0; i < gens_.size(); ++i)
        trains[i] = multiplex_ && std::count(members_.begin(), members_.end(), gens_[i]) > 0;
    return trains;
}

void AsyncScheduler::adjust_member_groups(const std::vector<int64_t>& dropped_ids) {
    if (!admission_ || data_ || gens_.empty()) return;
    sched_policy::update_member_caps(member_groups_, arrived_at_step_, generator_trains(), arrived_, dropped_ids,
                                     opt_.group_size, coord_idle_,
                                     sched_policy::admission_cap(opt_.max_batch, opt_.group_size) / opt_.group_size);
}

void AsyncScheduler::admit_arrived(int64_t group) {
    if (!admission_ || data_ || gens_.empty() || group < 0) return;
    const auto n = static_cast<int64_t>(gens_.size());
    ++arrived_[static_cast<size_t>(group % n)];
}

void AsyncScheduler::poll_admit() {
    for (;;) {
        int flag = 0;
        MPI_Status st;
        TAGFLOW_MPI_CHECK(MPI_Iprobe(coord_, kTagAdmit, p2p_.get(), &flag, &st));
        if (!flag) break;
        int64_t m[2] = {0, 0};
        TAGFLOW_MPI_CHECK(
            MPI_Recv(m, static_cast<int>(sizeof m), MPI_CHAR, coord_, kTagAdmit, p2p_.get(), MPI_STATUS_IGNORE));
        grants_.emplace_back(m[0], m[1]);
    }
}

int64_t AsyncScheduler::admitted() {
    if (!admission_ || data_) return std::numeric_limits<int64_t>::max();
    // A grant counts from the version it was made at: generating with older weights would make the
    // group staler than the coordinator counted.
    while (!grants_.empty() && grants_.front().first <= version_) {
        admit_k_ = std::max(admit_k_, grants_.front().second);
        grants_.pop_front();
    }
    return admit_k_;
}

}  // namespace tagflow::sched::async
