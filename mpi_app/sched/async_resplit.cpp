// SPDX-License-Identifier: Apache-2.0
// async_resplit: --rebalance-every (multiplex). The train group is a subset of the ranks that may
// train (eligible_, every one of them at the start and after a resume), the coordinator always in
// it. Every --rebalance-every steps the coordinator predicts the step time of each candidate group
// from what it measured since its last decision (sched_policy::choose_train_group: the
// generators' samples per second of generating, the members' compute and the rest of the step)
// and moves to the best one when it is clearly better (10%). A membership change, at a step
// boundary:
//   leaving   C -> rank: kCtlLeave [version]. The rank trained the last step, so it holds C's
//             weights; it becomes a receiver (train::WeightPull) from that version on, and C pushes
//             it every later version (a --sync-delta push starts from the version it holds).
//   joining   C -> rank: kCtlTrain naming it. The rank takes in every version C pushed it up to the
//             message's (it was a receiver), then the actor's state on kTagState (weights, AdamW
//             moments, step, lr: RlTrainer::actor_state) and C's weights hash, which its own must
//             equal after the load.
//   new group every member: the membership's communicator (MPI_Comm_create_group over the members
//             only, made once and kept), then RlTrainer::set_group.
// Checkpoints are written by C, whose actor state every rank that may train loads on a resume, so
// a resumed run starts again with the whole eligible group.
// Part of the async scheduler (sched/async_scheduler_impl.hpp).
#include <cerrno>
#include <climits>
#include <cstdlib>

#include "sched/async_scheduler_impl.hpp"

namespace tagflow::sched::async {
namespace {

std::string ranks_text(const std::vector<int>& v) {
    std::string s;
    for (int r : v) s += (s.empty() ? "" : ",") + std::to_string(r);
    return s;
}

std::string fmt3(double v) {
    char b[32];
    std::snprintf(b, sizeof b, "%.3f", v);
    return b;
}

std::vector<int> minus(const std::vector<int>& a, const std::vector<int>& b) {
    std::vector<int> out;
    for (int r : a)
        if (!std::count(b.begin(), b.end(), r)) out.push_back(r);
    return out;
}

}  // namespace

MPI_Comm AsyncScheduler::group_comm(const std::vector<int>& members) {
    if (auto it = group_comms_.find(members); it != group_comms_.end()) return it->second.get();
    MPI_Group wg = MPI_GROUP_NULL, tg = MPI_GROUP_NULL;
    TAGFLOW_MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &wg));
    TAGFLOW_MPI_CHECK(MPI_Group_incl(wg, static_cast<int>(members.size()), members.data(), &tg));
    MPI_Comm c = MPI_COMM_NULL;
    TAGFLOW_MPI_CHECK(MPI_Comm_create_group(MPI_COMM_WORLD, tg, 7301, &c));
    MPI_Group_free(&tg);
    MPI_Group_free(&wg);
    Comm comm = Comm::adopt(c);
    if (comm.rank() != static_cast<int>(std::find(members.begin(), members.end(), me_) - members.begin()))
        throw InternalError("train group: rank order differs from the member list");
    return group_comms_.emplace(members, std::move(comm)).first->second.get();
}

void AsyncScheduler::set_members(const std::vector<int>& members) {
    members_ = members;
    in_train_ = std::count(members_.begin(), members_.end(), me_) > 0;
    if (rebalance_) {  // no critic ranks (check_roles): a step's ranks are the train group
        step_members_ = members_;
        in_step_ = in_train_;
    }
    // --rollout-ahead: when every generator trains too, each starts only about its share of the
    // next step's samples per version; more would sit in the pool and go stale while they train
    // (colocated tags, uncapped: 2/3 of all samples dropped).
    int64_t training_gens = 0;
    for (int r : gens_) training_gens += std::count(members_.begin(), members_.end(), r) > 0;
    quota_ = is_gen_ && in_train_
                 ? sched_policy::rollout_quota(opt_, threshold_, static_cast<int64_t>(gens_.size()), training_gens)
                 : 0;
}

void AsyncScheduler::measure_step(int32_t s, double step_s) {
    if (!rebalance_) return;
    if (first_step_ < 0) first_step_ = s;
    if (s != first_step_) window_.add_step(step_s, members_);
}

void AsyncScheduler::measure_spans(const std::vector<io::SpanRecord>& spans) {
    if (!rebalance_) return;
    for (const io::SpanRecord& sp : spans) {
        const double d = std::max(0.0, sp.t_end - sp.t_start);
        if (sp.kind == SpanKind::kRollout) window_.rollout_s[sp.rank] += d;
        if (sp.kind == SpanKind::kTrain && sp.step != first_step_)
            window_.train_s[sp.rank] += d;  // compute: its waits are idle spans
    }
    // The coordinator's evaluations are rollout spans that deliver no training sample.
    window_.rollout_s[coord_] = std::max(0.0, window_.rollout_s[coord_] - eval_s_);
    eval_s_ = 0;
}

// Tests only: TAGFLOW_TEST_TRAIN_GROUPS="STEP=R,R,...;STEP=..." moves the train group to the given
// ranks at those steps, whatever the measurements say (what a test exercises with it is the
// hand-over, the communicators and the resume; choose_train_group has tests of its own). Read by the
// coordinator alone, mid-run: its errors are not ConfigErrors (which every rank raises alike, exit
// 2) but abort the job (main's fatal path), so no rank waits for the coordinator.
static std::map<int64_t, std::vector<int>> forced_groups() {
    std::map<int64_t, std::vector<int>> out;
    const char* spec = std::getenv("TAGFLOW_TEST_TRAIN_GROUPS");
    if (!spec) return out;
    std::stringstream all(spec);
    std::string item;
    const auto number = [](const std::string& entry, const std::string& t) {
        char* end = nullptr;
        errno = 0;
        const long v = t.empty() ? -1 : std::strtol(t.c_str(), &end, 10);
        if (t.empty() || *end != '\0' || errno != 0 || v < 0 || v > INT_MAX)
            throw Error("TAGFLOW_TEST_TRAIN_GROUPS: '" + entry + "' is not STEP=R,R (bad number '" + t + "')");
        return static_cast<int>(v);
    };
    while (std::getline(all, item, ';')) {
        const size_t eq = item.find('=');
        if (eq == std::string::npos) throw Error("TAGFLOW_TEST_TRAIN_GROUPS: '" + item + "' is not STEP=R,R");
        std::vector<int>& g = out[number(item, item.substr(0, eq))];
        std::stringstream rs(item.substr(eq + 1));
        for (std::string r; std::getline(rs, r, ',');) g.push_back(number(item, r));
        std::sort(g.begin(), g.end());
    }
    return out;
}

std::vector<int> AsyncScheduler::rebalance(int32_t s) {
    if (!rebalance_) return {};
    static const std::map<int64_t, std::vector<int>> forced = forced_groups();
    if (auto it = forced.find(s); it != forced.end()) {
        for (int r : it->second)
            if (!std::count(eligible_.begin(), eligible_.end(), r))
                throw Error("TAGFLOW_TEST_TRAIN_GROUPS: rank " + std::to_string(r) + " may not train");
        if (!std::count(it->second.begin(), it->second.end(), coord_))
            throw Error("TAGFLOW_TEST_TRAIN_GROUPS: the coordinator always trains");
        decision_ = {s, io::Regroup::kForced, -1, -1};
        if (it->second != members_)
            say("step %5d: train group {%s} -> {%s} (TAGFLOW_TEST_TRAIN_GROUPS)\n", s, ranks_text(members_).c_str(),
                ranks_text(it->second).c_str());
        return change_group(s, it->second, 0, 0);
    }
    sched_policy::StepModel m;
    const std::optional<sched_policy::GroupChoice> choice =
        window_.decide(opt_, roles_.all_tags, eligible_, members_, gens_, threshold_, &m);
    if (!choice) return {};
    const sched_policy::GroupChoice& c = *choice;
    decision_ = {s, c.members == members_ ? io::Regroup::kKept : io::Regroup::kMoved, c.best_s, c.current_s};
    if (c.members == members_) return {};
    double all = 0;
    for (const auto& [r, g] : m.gen_rate) all += g;
    std::string train;
    for (const auto& [r, t] : m.train_s) train += (train.empty() ? "" : ", ") + std::to_string(r) + ": " + fmt3(t);
    say("step %5d: train group {%s} -> {%s}: predicted %.3f s/step against %.3f (generation %.1f samples/s "
        "over %zu ranks, overlapping training %.2f; compute per step {%s} s, %.3f s more per step)\n",
        s, ranks_text(members_).c_str(), ranks_text(c.members).c_str(), c.best_s, c.current_s, all, m.gen_rate.size(),
        m.overlap, train.c_str(), m.overhead_s);
    return change_group(s, c.members, c.current_s, c.best_s);
}

std::vector<int> AsyncScheduler::change_group(int32_t s, const std::vector<int>& to, double current_s, double best_s) {
    if (to == members_) return {};
    Resplit rs;
    rs.step = s;
    rs.from = members_;
    rs.to = to;
    rs.current_s = current_s;
    rs.best_s = best_s;
    const std::vector<int> joiners = minus(to, members_), leavers = minus(members_, to);
    set_members(to);
    window_.new_group();
    for (int l : leavers) {  // it holds version_ (it trained the last step): pushed to from there
        push_->set_held(l, version_);
        receivers_.push_back(l);
        send_ctl(l, kCtlLeave, s);
    }
    for (int j : joiners) receivers_.erase(std::remove(receivers_.begin(), receivers_.end(), j), receivers_.end());
    std::sort(receivers_.begin(), receivers_.end());
    resplits_.push_back(rs);
    return joiners;
}

double AsyncScheduler::hand_over(const std::vector<int>& joiners, int32_t s) {
    if (!rebalance_) return 0;
    const MPI_Comm next = group_comms_.count(members_) ? group_comms_.at(members_).get() : MPI_COMM_NULL;
    if (next != MPI_COMM_NULL && next == train_comm_) return 0;  // the same group as the last step
    const double t0 = clock_.now();
    std::vector<char> state;
    if (!joiners.empty()) {
        const std::string st = trainer_->actor_state();
        wire::Writer w;
        w.raw(st.data(), st.size());
        w.put<uint64_t>(weights_hash());
        state = w.take();
        if (state.size() > static_cast<size_t>(INT_MAX))
            throw Error("--rebalance-every: the actor state (" + std::to_string(state.size()) +
                        " bytes) is over one MPI message's 2 GiB");
    }
    std::vector<MPI_Request> reqs(joiners.size(), MPI_REQUEST_NULL);
    for (size_t k = 0; k < joiners.size(); ++k)
        TAGFLOW_MPI_CHECK(MPI_Isend(state.data(), static_cast<int>(state.size()), MPI_CHAR, joiners[k], kTagState,
                                    p2p_.get(), &reqs[k]));
    train_comm_ = group_comm(members_);  // collective over the new members (the joiners after their load)
    TrainGroup g;
    g.comm = train_comm_;
    g.actors = static_cast<int>(members_.size());
    trainer_->set_group(g);
    wait_all(reqs);
    const double dt = clock_.now() - t0;
    if (!resplits_.empty() && resplits_.back().step == s) {
        resplits_.back().bytes = static_cast<int64_t>(state.size());
        resplits_.back().seconds = dt;
        say("step %5d: train group {%s} formed in %.3f s (%zu joining rank%s, %lld bytes of actor state each)\n", s,
            ranks_text(members_).c_str(), dt, joiners.size(), joiners.size() == 1 ? "" : "s",
            static_cast<long long>(state.size()));
    }
    return dt;
}

void AsyncScheduler::follow_group(const std::vector<int64_t>& ctl) {
    const std::vector<int> members(ctl.begin() + 4, ctl.end());
    const auto version = static_cast<int32_t>(ctl[2]);
    const std::string who = "rank " + std::to_string(me_) + ", step " + std::to_string(ctl[1]) + ": ";
    if (ctl[0] == kCtlLeave) {
        if (!rebalance_ || !in_train_ || !pull_ || std::count(members.begin(), members.end(), me_))
            throw InternalError(who + "told to leave a train group it is not in");
        if (version != version_)
            throw InternalError(who + "leaves holding version " + std::to_string(version_) + ", the coordinator " +
                                std::to_string(version));
        set_members(members);
        is_recv_ = true;
        pull_->set_held(version_);
        pull_->post();
        return;
    }
    if (!std::count(members.begin(), members.end(), me_))
        throw InternalError(who + "told to train in a group it is not in");
    if (!in_train_) {  // joining: C's last weights, then its actor state
        if (!rebalance_ || !pull_ || !is_recv_ || !trainer_)
            throw InternalError(who + "told to train, but it cannot join the train group");
        enter(SpanKind::kWeightSync, static_cast<int32_t>(ctl[1]));
        drain_weight_recv(version);  // every version C pushed it, in order (the last is this one)
        pull_->cancel();             // C pushes it nothing more while it trains
        is_recv_ = false;
        MPI_Status st;
        for (int flag = 0; !flag;) {
            TAGFLOW_MPI_CHECK(MPI_Iprobe(coord_, kTagState, p2p_.get(), &flag, &st));
            if (!flag) nap();
        }
        int count = 0;
        TAGFLOW_MPI_CHECK(MPI_Get_count(&st, MPI_CHAR, &count));
        std::vector<char> b(static_cast<size_t>(count));
        TAGFLOW_MPI_CHECK(MPI_Recv(b.data(), count, MPI_CHAR, coord_, kTagState, p2p_.get(), MPI_STATUS_IGNORE));
        if (b.size() < sizeof(uint64_t)) throw InternalError(who + "truncated actor state");
        uint64_t hash = 0;
        std::memcpy(&hash, b.data() + b.size() - sizeof hash, sizeof hash);
        {
            torch::NoGradGuard ng;
            trainer_->take_actor_state(std::string(b.data(), b.size() - sizeof hash));
        }
        flat_ = train::share_one_buffer(policy_->parameters());  // the load gave them new storage
        train::bump_versions(policy_->parameters());             // the engine re-reads them
        if (weights_hash() != hash)
            throw InternalError(who + "joined the train group with weights other than the coordinator's");
        version_ = version;
    }
    if (members != members_ || train_comm_ == MPI_COMM_NULL) {
        set_members(members);
        train_comm_ = group_comm(members_);
        TrainGroup g;
        g.comm = train_comm_;
        g.actors = static_cast<int>(members_.size());
        trainer_->set_group(g);
    }
}

}  // namespace tagflow::sched::async
