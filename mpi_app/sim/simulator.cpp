// SPDX-License-Identifier: Apache-2.0
// simulator: see the header. One event queue (time, sequence number) drives the async modes;
// sync runs each node's engine to the barrier on its own (nodes do not interact until then).
// Every node books its time as contiguous spans from a cursor, so busy + idle = wall by
// construction and the tests can check the spans themselves.
#include "sim/simulator.hpp"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <deque>
#include <fstream>
#include <functional>
#include <map>
#include <queue>
#include <sstream>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "cluster/tags.hpp"
#include "common/error.hpp"
#include "config/options.hpp"
#include "sched/sched_policy.hpp"
#include "sched/sample_pool.hpp"
#include "train/packing.hpp"

namespace tagflow::sim {

const char* kind_name(Kind k) {
    switch (k) {
        case Kind::kRollout: return "rollout";
        case Kind::kTrain: return "train";
        case Kind::kWeightSync: return "weight_sync";
        case Kind::kResplit: return "resplit";
        case Kind::kIo: return "io";
        case Kind::kIdle: return "idle";
    }
    return "?";
}

std::vector<NodeGroup> parse_hw(const std::string& spec) {
    std::vector<NodeGroup> out;
    std::stringstream ss(spec);
    std::string item;
    double total = 0;
    while (std::getline(ss, item, ';')) {
        if (item.empty()) continue;
        const size_t a = item.find(':'), b = item.rfind(':');
        if (a == std::string::npos || a == b)
            throw ConfigError("--hw '" + item + "': expected TYPE:TAGS:SHARE, e.g. h100:rollout,train:0.5");
        NodeGroup g;
        g.hw = item.substr(0, a);
        if (g.hw.empty()) throw ConfigError("--hw '" + item + "': empty hardware type");
        g.tags = cluster::parse_tag_list(item.substr(a + 1, b - a - 1), "--hw '" + item + "'");
        const std::string sh = item.substr(b + 1);
        char* end = nullptr;
        g.share = std::strtod(sh.c_str(), &end);
        if (sh.empty() || *end != '\0' || !std::isfinite(g.share) || g.share <= 0 || g.share > 1)
            throw ConfigError("--hw '" + item + "': share '" + sh + "' must be a number in (0, 1]");
        g.label = g.hw + ":" + cluster::tags_to_string(g.tags);
        total += g.share;
        out.push_back(g);
    }
    if (out.empty()) throw ConfigError("--hw '" + spec + "': no node types");
    if (std::fabs(total - 1.0) > 1e-6)
        throw ConfigError("--hw '" + spec + "': shares add up to " + std::to_string(total) + ", not 1");
    return out;
}

std::vector<int> group_counts(const std::vector<NodeGroup>& groups, int nodes) {
    std::vector<int> c;
    int used = 0;
    for (size_t i = 0; i + 1 < groups.size(); ++i) {
        int k = static_cast<int>(std::lround(groups[i].share * nodes));
        k = std::min(k, nodes - used);
        c.push_back(k);
        used += k;
    }
    c.push_back(nodes - used);
    return c;
}

int32_t response_length(const Workload& w, uint64_t seed, int64_t id) {
    const uint64_t h = sched::sched_policy::sample_hash(seed, id);
    if (w.lengths == "file") {
        if (w.length_table.empty()) throw ConfigError("lengths file: no lengths loaded");
        const int32_t len = w.length_table[h % w.length_table.size()];
        return w.max_new > 0 ? std::min(len, w.max_new) : len;
    }
    if (w.lengths == "longtail") {
        // tagflow's longtail task: N in 1..60 with P(N = n) ∝ (n + 2)^-2, 2N + 1 tokens (EOS included).
        static const std::vector<double> cdf = [] {
            std::vector<double> c;
            double tot = 0, acc = 0;
            for (int n = 1; n <= 60; ++n) tot += std::pow(n + 2.0, -2.0);
            for (int n = 1; n <= 60; ++n) c.push_back(acc += std::pow(n + 2.0, -2.0) / tot);
            c.back() = 1.0;
            return c;
        }();
        const int n =
            1 + static_cast<int>(std::upper_bound(cdf.begin(), cdf.end(), sched::sched_policy::unit_interval(h)) -
                                 cdf.begin());
        const int32_t len = 2 * std::min(n, 60) + 1;
        return w.max_new > 0 ? std::min(len, w.max_new) : len;
    }
    // Lognormal, drawn as tagflow train --response-lengths lognormal:M:R draws it.
    const double cap = w.max_new > 0 ? w.max_new : std::ceil(4.0 * w.median * w.p99_ratio);
    return sched::sched_policy::lognormal_length(w.median, w.p99_ratio, cap, seed, id);
}

std::vector<int32_t> load_lengths(const std::string& path) {
    std::ifstream f(path);
    if (!f) throw ConfigError("--lengths file:" + path + ": cannot read it");
    std::vector<int32_t> v;
    std::string tok;
    while (f >> tok) {
        char* end = nullptr;
        errno = 0;
        const long long x = std::strtoll(tok.c_str(), &end, 10);
        if (errno != 0 || end == tok.c_str() || *end != '\0' || x < 1 || x > (1 << 20))
            throw ConfigError("--lengths file:" + path + ": entry " + std::to_string(v.size() + 1) + " '" +
                              tok.substr(0, 40) + "' is not a response length (an integer 1..1048576)");
        v.push_back(static_cast<int32_t>(x));
    }
    if (!f.eof()) throw ConfigError("--lengths file:" + path + ": read error");
    if (v.empty()) throw ConfigError("--lengths file:" + path + ": no lengths in it");
    return v;
}

namespace {

struct Node {
    int group = 0;
    uint32_t tags = 0;
    const HwCost* hw = nullptr;
    bool member = false, gen = false, receiver = false;
    bool trained = false;  // has trained a step (HwCost::train_first_s is charged once)
    double cursor = 0;
    std::vector<Span> spans;
    // engine
    int64_t nstep = 0;
    int active = 0;
    int64_t ctx_base = 0;  // sum over active sequences of (prompt tokens - engine step admitted)
    // (the step it finishes in, sample id, the step it was admitted in), soonest first
    using Fin = std::tuple<int64_t, int64_t, int64_t>;
    std::priority_queue<Fin, std::vector<Fin>, std::greater<>> fin;
    std::deque<int64_t> waiting;  // sample ids submitted, not admitted
    int64_t version = 0;
    int64_t pending_version = -1;
    double pending_at = 0;
    bool stepping = false, preempt = false;
    double step_end = 0;
    int64_t next_local = 0;
    int gen_index = 0;
    int64_t quota = 0, started = 0, quota_version = 0;  // --rollout-ahead (train-group generators)
    // --admission staleness: grants (version made at, groups granted since the start) not yet in
    // force, and the groups it may start (a grant counts once its weights reach the grant's version)
    std::deque<std::pair<int64_t, int64_t>> grants;
    int64_t admitted = 0;

    bool rolls() const { return (tags & cluster::kRollout) != 0; }
    double rollout_s = 0, rollout_seen = 0;  // seconds generating; of them, what the coordinator measured
    void book(Kind k, double t) {
        if (t <= cursor) return;
        if (k == Kind::kRollout) rollout_s += t - cursor;
        if (!spans.empty() && spans.back().kind == k && spans.back().t1 == cursor) spans.back().t1 = t;
        else spans.push_back({k, cursor, t});
        cursor = t;
    }
};

struct GroupRec {
    int node = 0;
    int64_t version = LLONG_MAX;  // the oldest admission's weights version
    int remaining = 0;
    int64_t tokens = 0;
    std::vector<int64_t> slots;  // each sample's input slots for the trainer: prompt + response - 1
};

class Sim {
public:
    Sim(const SimConfig& cfg, const CostModel& cost) : cfg_(cfg), cost_(cost) {
        if (cfg.nodes < 1) throw ConfigError("--nodes: need at least 1 node, got " + std::to_string(cfg.nodes));
        opt_.mode = cfg.mode;
        opt_.staleness = cfg.staleness;
        opt_.stale = cfg.stale;
        opt_.min_rollout_frac = cfg.min_rollout_frac;
        opt_.rollout_ahead = cfg.rollout_ahead;
        opt_.admission = cfg.admission;
        // The other modes ignore --train-priority.
        if (cfg.mode == config::Mode::kMultiplex) opt_.train_priority = cfg.train_priority;
        if (cfg.mode == config::Mode::kMultiplex) opt_.rebalance_every = cfg.rebalance_every;
        opt_.late_wait = cfg.late_wait;
        opt_.group_size = cfg.work.group_size;
        const int64_t batch = cfg.work.batch > 0 ? cfg.work.batch : cfg.work.batch_per_node * cfg.nodes;
        opt_.prompts_per_step = static_cast<int32_t>((batch + cfg.work.group_size - 1) / cfg.work.group_size);
        opt_.train_threshold = 0;
        threshold_ = sched::sched_policy::train_threshold(opt_);
        G_ = cfg.work.group_size;

        const std::vector<int> counts = group_counts(cfg.hw, cfg.nodes);
        for (size_t gi = 0; gi < cfg.hw.size(); ++gi)
            for (int k = 0; k < counts[gi]; ++k) {
                Node n;
                n.group = static_cast<int>(gi);
                n.tags = cfg.hw[gi].tags;
                n.hw = &cost.at(cfg.hw[gi].hw);
                nodes_.push_back(std::move(n));
            }
        res_.group_nodes = counts;
        for (const Node& n : nodes_) tags_.push_back(n.tags);
        // The real modes' checks and choices (sched/sched_policy.hpp), then the run-wide ones of roles.cpp.
        if (sched::sched_policy::coordinator(tags_) < 0)
            throw ConfigError("--hw: no node is tagged train at " + std::to_string(cfg.nodes) + " nodes");
        if (std::none_of(tags_.begin(), tags_.end(), [](uint32_t b) { return (b & cluster::kRollout) != 0; }))
            throw ConfigError("--hw: no node is tagged rollout at " + std::to_string(cfg.nodes) + " nodes");
        sched::sched_policy::check_roles(opt_, tags_);
        members_ = sched::sched_policy::train_group(opt_, tags_);
        eligible_ = members_;  // --rebalance-every: every rank that may train, at the start
        coord_ = members_.front();
        for (int r : members_) nodes_[static_cast<size_t>(r)].member = true;
        int gi = 0;
        for (size_t i = 0; i < nodes_.size(); ++i) {
            Node& n = nodes_[i];
            n.gen = n.rolls() && (cfg.mode == config::Mode::kMultiplex || !n.member);
            if (n.gen) n.gen_index = gi++;
            if (n.gen) gens_.push_back(static_cast<int>(i));
        }
        n_gens_ = gi;
        set_members(members_);
        // --admission staleness, as the async scheduler decides it (sched/async_admission.cpp).
        admission_ = sched::sched_policy::admission_budget(opt_, static_cast<double>(threshold_), threshold_) > 0;
        granted_.assign(static_cast<size_t>(n_gens_), 0);
        arrived_.assign(static_cast<size_t>(n_gens_), 0);
        arrived_at_step_ = arrived_;
        for (const Node& n : nodes_)
            if (n.gen) admit_cap_ = std::max(admit_cap_, sched::sched_policy::admission_cap(n.hw->max_batch, G_));
        member_groups_.assign(static_cast<size_t>(n_gens_), 0);  // none until the coordinator waits idle
    }

    ModeResult run() {
        if (!cfg_.mode.is_async()) run_sync();
        else run_async();
        finish();
        return std::move(res_);
    }

private:
    // ------------------------------------------------------------------ engine
    void submit_group(Node& n, int node_index, int64_t g) {
        GroupRec& rec = groups_[g];
        rec.node = node_index;
        rec.remaining = G_;
        for (int k = 0; k < G_; ++k) n.waiting.push_back(g * G_ + k);
    }
    // Admits waiting samples into free slots; returns the engine step's duration.
    double begin_step(Node& n, double t) {
        if (n.pending_version > n.version && n.pending_at <= t) n.version = n.pending_version;
        int64_t prefill = 0;
        while (n.active < n.hw->max_batch && !n.waiting.empty()) {
            const int64_t id = n.waiting.front();
            n.waiting.pop_front();
            const int32_t len = response_length(cfg_.work, cfg_.seed, id);
            n.fin.push({n.nstep + len - 1, id, n.nstep});
            ++n.active;
            n.ctx_base += cfg_.work.prompt_tokens - n.nstep;
            prefill += cfg_.work.prompt_tokens;
            GroupRec& rec = groups_[id / G_];
            rec.version = std::min(rec.version, n.version);
            rec.tokens += cfg_.work.prompt_tokens + len;
            rec.slots.push_back(cfg_.work.prompt_tokens + len - 1);
        }
        // Every active sequence attends to its prompt and the tokens it has generated so far.
        const int64_t context = n.ctx_base + static_cast<int64_t>(n.active) * n.nstep;
        return n.hw->decode_step(n.active, static_cast<double>(context)) +
               n.hw->prefill_s_per_token * static_cast<double>(prefill);
    }
    // Ends an engine step: finished samples leave; completed groups are returned.
    void end_step(Node& n, std::vector<int64_t>& done_groups) {
        ++n.nstep;
        while (!n.fin.empty() && std::get<0>(n.fin.top()) < n.nstep) {
            const int64_t id = std::get<1>(n.fin.top()), admitted = std::get<2>(n.fin.top());
            n.fin.pop();
            --n.active;
            n.ctx_base -= cfg_.work.prompt_tokens - admitted;
            ++res_.generated;
            GroupRec& rec = groups_[id / G_];
            if (--rec.remaining == 0) done_groups.push_back(id / G_);
        }
    }

    // ------------------------------------------------------------------ training
    // A step's batch as the trainer lays it out: each sample's input slots, split over the members
    // by train::balance_by_slots as step/rl_trainer.cpp splits it. Each sample costs its slots x
    // the cost per slot at its own length (the train_seq points: the per-sample overhead of short
    // ones and the attention of long ones, which a mix's mean length would average away). A member
    // computes its share packed, with the padding at the rows' ends (train::packed_slots) charged
    // at the share's mean cost per slot; or, with train_padded, every sample padded to the share's
    // longest at that length's cost. Returns each member's compute, in members_ order.
    std::vector<double> member_costs(const std::vector<int64_t>& slots) const {
        const size_t n = members_.size();
        std::vector<double> cost(n, 0.0);
        if (n == 0 || slots.empty()) return cost;
        const std::vector<int> owner = train::balance_by_slots(slots, static_cast<int>(n));
        std::vector<std::vector<int64_t>> share(n);
        for (size_t i = 0; i < slots.size(); ++i) share[static_cast<size_t>(owner[i])].push_back(slots[i]);
        for (size_t k = 0; k < n; ++k) {
            const std::vector<int64_t>& sh = share[k];
            if (sh.empty()) continue;
            const HwCost& hw = *nodes_[static_cast<size_t>(members_[k])].hw;
            int64_t real = 0, longest = 0;
            double each = 0;  // every sample at its own length: slots x the cost per slot there
            for (int64_t x : sh) {
                real += x;
                longest = std::max(longest, x);
                each += static_cast<double>(x) * hw.train_per_token(static_cast<double>(x + 1));
            }
            const auto L = static_cast<double>(longest);
            cost[k] = cost_.train_padded ? static_cast<double>(sh.size()) * L * hw.train_per_token(L + 1.0)
                                         : each * static_cast<double>(train::packed_slots(sh)) /
                                               static_cast<double>(std::max<int64_t>(1, real));
        }
        return cost;
    }
    // A node's first training step also pays HwCost::train_first_s (a fresh process's first
    // calls); `costs` in members_ order, as member_costs returns them.
    void add_first_steps(std::vector<double>& costs) {
        for (size_t k = 0; k < members_.size() && k < costs.size(); ++k) {
            Node& n = nodes_[static_cast<size_t>(members_[k])];
            if (!n.trained) costs[k] += n.hw->train_first_s;
            n.trained = true;
        }
    }
    double train_seconds(const std::vector<double>& costs) const {
        double slowest = 0;
        for (double c : costs) slowest = std::max(slowest, c);
        return slowest + cost_.allreduce_s(static_cast<int>(members_.size()));
    }

    // ------------------------------------------------------------------ the train group
    // Members, receivers and the members' --rollout-ahead quota, as the async scheduler's
    // set_members sets them.
    void set_members(const std::vector<int>& to) {
        members_ = to;
        for (Node& n : nodes_) n.member = false;
        for (int r : members_) nodes_[static_cast<size_t>(r)].member = true;
        int64_t training_gens = 0;
        for (int r : members_) training_gens += nodes_[static_cast<size_t>(r)].gen;
        for (Node& n : nodes_) {
            n.receiver = n.rolls() && !n.member;
            n.quota = n.member ? sched::sched_policy::rollout_quota(opt_, threshold_, n_gens_, training_gens) : 0;
        }
    }
    // --rebalance-every, when a step's batch is chosen: what the coordinator measured goes into the
    // decision (sched_policy::RateWindow, the async scheduler's), and a new group takes over: a
    // leaving member generates on as a receiver; a joining one takes the actor's state (weights and
    // AdamW's two moments: 3 x model_bytes) from the coordinator before the step, in the step's resplit.
    void regroup(double t) {
        if (opt_.rebalance_every <= 0) return;
        for (int r : gens_) {
            Node& n = nodes_[static_cast<size_t>(r)];  // its engine steps ended so far
            window_.rollout_s[r] += n.rollout_s - n.rollout_seen;
            n.rollout_seen = n.rollout_s;
        }
        const auto c = window_.decide(opt_, tags_, eligible_, members_, gens_, threshold_);
        if (!c || c->members == members_) return;
        int joiners = 0;
        std::vector<int> leavers;
        for (int r : c->members) joiners += !nodes_[static_cast<size_t>(r)].member;
        for (int r : members_)
            if (!std::count(c->members.begin(), c->members.end(), r)) leavers.push_back(r);
        set_members(c->members);
        window_.new_group();
        ++res_.regroups;
        handover_s_ = joiners == 0 ? 0.0 : cost_.latency_s + 3.0 * cost_.model_bytes * joiners / cost_.bandwidth_Bps;
        for (int r : c->members) nodes_[static_cast<size_t>(r)].version = version_;  // the state carries the weights
        for (int r : leavers) {  // it holds version_; generates on, now without a quota (not preempted yet)
            const Node& n = nodes_[static_cast<size_t>(r)];
            if (n.gen && !n.stepping) start_step(r, t);
        }
    }
    int receivers() const {
        int k = 0;
        for (const Node& n : nodes_) k += n.receiver;
        return k;
    }

    // ------------------------------------------------------------------ sync
    void run_sync() {
        std::vector<int> roll;
        for (size_t i = 0; i < nodes_.size(); ++i)
            if (nodes_[i].rolls()) roll.push_back(static_cast<int>(i));
        int n_recv = 0;  // the sync communicator: train root + every rollout node
        for (int r : roll) n_recv += (r != coord_);
        const int64_t P = opt_.prompts_per_step;
        double T = 0;
        std::vector<int64_t> done;
        for (int64_t s = 0; s < cfg_.steps; ++s) {
            for (int64_t j = 0; j < P; ++j) {
                const int r = roll[static_cast<size_t>(j % static_cast<int64_t>(roll.size()))];
                submit_group(nodes_[static_cast<size_t>(r)], r, s * P + j);
            }
            double t_barrier = T;
            for (int r : roll) {
                Node& n = nodes_[static_cast<size_t>(r)];
                double t = T;
                while (n.active > 0 || !n.waiting.empty()) {
                    t += begin_step(n, t);
                    end_step(n, done);
                }
                n.book(Kind::kRollout, t);
                t_barrier = std::max(t_barrier, t);
            }
            std::vector<int64_t> slots;
            int64_t tokens = 0;
            for (int64_t g : done) {
                const GroupRec& rec = groups_[g];
                tokens += rec.tokens;
                slots.insert(slots.end(), rec.slots.begin(), rec.slots.end());
                groups_.erase(g);
            }
            done.clear();
            for (Node& n : nodes_) n.book(Kind::kIdle, t_barrier);
            std::vector<double> costs = member_costs(slots);
            add_first_steps(costs);
            const double t_train = t_barrier + train_seconds(costs);
            for (int r : members_) nodes_[static_cast<size_t>(r)].book(Kind::kTrain, t_train);
            for (Node& n : nodes_) n.book(Kind::kIdle, t_train);
            const double t_sync = t_train + cost_.broadcast_s(n_recv);
            for (size_t i = 0; i < nodes_.size(); ++i)
                if (nodes_[i].rolls() || static_cast<int>(i) == coord_) nodes_[i].book(Kind::kWeightSync, t_sync);
            for (Node& n : nodes_) n.book(Kind::kIdle, t_sync);
            // Every rank writes the step's rows to the run file, collectively, before the next step.
            const double t_io = t_sync + cost_.step_io_s;
            for (Node& n : nodes_) n.book(Kind::kIo, t_io);
            res_.trained += P * G_;
            res_.tokens_trained += tokens;
            for (Node& n : nodes_) n.version = s + 1;
            T = t_io;
            ++res_.steps;
        }
        res_.wall = T;
    }

    // ------------------------------------------------------------------ async
    enum class Ev : uint8_t { kStepEnd, kTrainEnd, kSyncEnd, kWaitEnd };
    struct Event {
        double t;
        uint64_t seq;
        Ev kind;
        int node;
        bool operator>(const Event& o) const { return t != o.t ? t > o.t : seq > o.seq; }
    };

    void push(double t, Ev k, int node) { q_.push({t, seq_++, k, node}); }

    void fill(Node& n) {
        while (!n.grants.empty() && n.grants.front().first <= n.version) {
            n.admitted = std::max(n.admitted, n.grants.front().second);
            n.grants.pop_front();
        }
        if (n.version != n.quota_version) {  // --rollout-ahead counts per policy version
            n.quota_version = n.version;
            n.started = 0;
        }
        while (n.active + static_cast<int>(n.waiting.size()) < n.hw->max_batch &&
               (n.quota == 0 || n.started < n.quota) && (!admission_ || n.next_local < n.admitted)) {
            n.started += G_;
            const int64_t g = n.next_local++ * n_gens_ + n.gen_index;
            submit_group(n, static_cast<int>(&n - nodes_.data()), g);
        }
    }
    void start_step(int r, double t) {
        Node& n = nodes_[static_cast<size_t>(r)];
        n.book(Kind::kIdle, t);
        if (n.pending_version > n.version && n.pending_at <= t) n.version = n.pending_version;
        fill(n);
        if (n.active == 0 && n.waiting.empty()) return;  // at its --rollout-ahead quota: idle until it trains
        n.stepping = true;
        n.step_end = t + begin_step(n, t);
        push(n.step_end, Ev::kStepEnd, r);
    }
    // --admission staleness: the coordinator's grants (sched_policy::grant_groups), applied at
    // once (the real grant is a message of a few microseconds). Outstanding: the pool's usable
    // samples and those granted and not yet delivered in a complete group. A generator idle for
    // want of a grant starts at once when it gets one. Only while the coordinator is not in a
    // training step: the real one grants from its loop, which does not run while it trains, so a
    // grant is always made under the version the next step trains with (the budget's premise).
    void admit(double t) {
        if (!admission_ || state_ != State::kWaiting) return;
        int64_t out = pool_.usable(version_);
        for (size_t i = 0; i < granted_.size(); ++i) out += granted_[i] * G_ - arrived_[i];
        const std::vector<int64_t> before = granted_;
        // A member that generates is granted within its allowance (grant_caps).
        const Node& c = nodes_[static_cast<size_t>(coord_)];
        if (!c.gen || (!c.stepping && c.active == 0 && c.waiting.empty())) coord_idled_ = true;
        sched::sched_policy::grant_groups(
            granted_, arrived_, out, sched::sched_policy::admission_budget(opt_, rate_, threshold_), G_,
            sched::sched_policy::grant_caps(generator_trains(), member_groups_, coord_idled_, G_, admit_cap_));
        if (granted_ == before) return;
        for (Node& n : nodes_)
            if (n.gen && granted_[static_cast<size_t>(n.gen_index)] != before[static_cast<size_t>(n.gen_index)])
                n.grants.emplace_back(version_, granted_[static_cast<size_t>(n.gen_index)]);
        wake(t);
    }
    // Per generator (gen_index), whether it is a train-group member too (multiplex).
    std::vector<uint8_t> generator_trains() const {
        std::vector<uint8_t> trains(granted_.size(), 0);
        for (const Node& n : nodes_)
            if (n.gen) trains[static_cast<size_t>(n.gen_index)] = n.member;
        return trains;
    }
    // Generators idle for want of a grant, or of the weights a grant waits for, start again.
    void wake(double t) {
        if (!admission_) return;
        for (size_t i = 0; i < nodes_.size(); ++i) {
            const Node& n = nodes_[i];
            if (n.gen && !n.stepping && !n.preempt && (!n.member || state_ == State::kWaiting))
                start_step(static_cast<int>(i), t);
        }
    }
    // Groups with some samples finished, not all, on their last chance (the real coordinator's
    // SamplePool::late_groups: it sees the finished ones).
    int64_t late_groups() const {
        int64_t n = 0;
        for (const auto& [g, rec] : groups_)
            if (rec.remaining > 0 && rec.remaining < G_ &&
                sched::sched_policy::last_chance(opt_, version_, rec.version))
                ++n;
        return n;
    }
    void check_trigger(double t) {
        if (state_ != State::kWaiting || pool_.usable(version_) < threshold_) return;
        // --late-wait: the step waits for late groups (sched_policy::late_wait_s).
        const double held = wait_since_ < 0 ? 0.0 : t - wait_since_;
        if (opt_.late_wait > 0 && !wait_over_) {
            const double cap = sched::sched_policy::late_wait_s(opt_, late_groups(), threshold_, cycle_s_,
                                                                static_cast<int64_t>(members_.size()));
            if (held < cap) {
                if (wait_since_ < 0) {
                    wait_since_ = t;
                    ++res_.holds;
                }
                if (wait_until_ != wait_since_ + cap) {  // the end of the wait, as the late groups now give it
                    wait_until_ = wait_since_ + cap;
                    push(wait_until_, Ev::kWaitEnd, ++wait_id_);
                }
                return;
            }
        }
        res_.held_s += held;
        if (last_trigger_ >= 0) {
            cycle_s_ = sched::sched_policy::next_cycle(cycle_s_, t - last_trigger_, held);
            if (opt_.rebalance_every > 0) window_.add_cycle(t - last_trigger_);  // before regroup, as the scheduler
        }
        last_trigger_ = t;
        wait_since_ = -1;
        wait_until_ = -1;
        wait_over_ = false;
        trigger_t_ = t;
        // The batch is chosen now, by the coordinator's own pool (sched/sample_pool.hpp).
        const sched::PoolBatch b = pool_.take_batch(threshold_, version_);
        std::unordered_set<int64_t> trained;
        for (const sched::RolloutSample& s : b.samples) trained.insert(s.group);
        int64_t batch_tokens = 0;
        batch_slots_.clear();
        for (int64_t g : b.groups) {
            const GroupRec rec = std::move(groups_.at(g));
            groups_.erase(g);
            if (!trained.count(g)) continue;  // dropped as too stale
            batch_tokens += rec.tokens;
            batch_slots_.insert(batch_slots_.end(), rec.slots.begin(), rec.slots.end());
        }
        const auto batch = static_cast<int64_t>(b.samples.size());
        res_.dropped += static_cast<int64_t>(b.dropped_ids.size());
        if (admission_)  // each member's allowance, as the coordinator adjusts it (adjust_member_groups)
            sched::sched_policy::update_member_caps(member_groups_, arrived_at_step_, generator_trains(), arrived_,
                                                    b.dropped_ids, G_, coord_idled_, admit_cap_ / G_);
        coord_idled_ = false;
        rate_ = sched::sched_policy::next_admission_rate(rate_, batch, static_cast<int64_t>(b.dropped_ids.size()));
        res_.weighted += b.weighted;
        age_sum_ += b.age_sum;
        res_.trained += batch;
        res_.tokens_trained += batch_tokens;
        regroup(t);
        state_ = State::kPreempting;
        waiting_members_ = 0;
        for (int r : members_) {
            Node& n = nodes_[static_cast<size_t>(r)];
            if (n.stepping) {
                n.preempt = true;
                ++waiting_members_;
            }
        }
        if (waiting_members_ == 0) begin_train(t);
    }
    void begin_train(double t) {
        state_ = State::kTraining;
        // The coordinator's control message reaches each member; the batch is broadcast to them.
        const double t0 = t + 2.0 * cost_.latency_s + handover_s_;
        std::vector<double> costs = member_costs(batch_slots_);
        add_first_steps(costs);
        const double t1 = t0 + train_seconds(costs);
        if (opt_.rebalance_every > 0) {  // what the coordinator measures of the step (RateWindow)
            for (size_t k = 0; k < members_.size(); ++k) window_.train_s[members_[k]] += costs[k];
            window_.add_step(t1 - trigger_t_ - handover_s_, members_);
        }
        handover_s_ = 0;
        for (int r : members_) {
            Node& n = nodes_[static_cast<size_t>(r)];
            n.book(Kind::kIdle, t);
            n.book(Kind::kResplit, t0);
            n.book(Kind::kTrain, t1);
        }
        push(t1, Ev::kTrainEnd, coord_);
    }
    void on_train_end(double t) {
        ++version_;
        const double t_sync = t + cost_.broadcast_s(receivers());
        for (Node& n : nodes_)
            if (n.receiver) {
                n.pending_version = version_;
                n.pending_at = t_sync;
            }
        // The coordinator then writes the step's rows to the run file, alone (step_io_s).
        const double t_io = t_sync + cost_.step_io_s;
        for (int r : members_) {
            Node& n = nodes_[static_cast<size_t>(r)];
            n.version = version_;  // members hold the trained weights
            if (r == coord_) {
                n.book(Kind::kWeightSync, t_sync);
                n.book(Kind::kIo, t_io);
            } else if (n.gen) {
                resume(r, t);
            }
        }
        push(t_io, Ev::kSyncEnd, coord_);
    }
    void resume(int r, double t) {
        Node& n = nodes_[static_cast<size_t>(r)];
        n.preempt = false;
        start_step(r, t);
    }
    void on_sync_end(double t) {
        ++res_.steps;
        if (res_.steps >= cfg_.steps) {
            done_ = true;
            res_.wall = t;
            return;
        }
        state_ = State::kWaiting;
        admit(t);          // the batch left the pool and a new version began: grants, as the loop's first act
        check_trigger(t);  // a backlog trains again at once, before the coordinator generates
        if (state_ == State::kWaiting && nodes_[static_cast<size_t>(coord_)].gen) resume(coord_, t);
        wake(t);  // the receivers hold the new weights now: grants made at this version count
    }
    void on_step_end(int r, double t) {
        Node& n = nodes_[static_cast<size_t>(r)];
        n.stepping = false;
        n.book(Kind::kRollout, t);
        std::vector<int64_t> done;
        end_step(n, done);
        // A complete group joins the pool; its samples carry the oldest admission's version.
        for (int64_t g : done) {
            arrived_[static_cast<size_t>(n.gen_index)] += G_;
            if (opt_.rebalance_every > 0) window_.delivered[r] += G_;
            const int64_t v = groups_[g].version;
            for (int k = 0; k < G_; ++k) {
                sched::RolloutSample s;
                s.id = g * G_ + k;
                s.group = g;
                s.version = static_cast<int32_t>(v);
                pool_.add(std::move(s));
            }
        }
        if (n.preempt) {
            if (--waiting_members_ == 0) begin_train(t);
        } else {
            start_step(r, t);
            if (r == coord_ && !n.stepping) admit(t);  // the coordinator ran dry: a member may be granted
        }
        check_trigger(t);
        // A group that arrives too stale to train leaves the outstanding count (as the real
        // coordinator re-checks its grants on every pass of its loop).
        if (!done.empty()) admit(t);
    }

    void run_async() {
        admit(0.0);  // the first grants start their generators
        for (size_t i = 0; i < nodes_.size(); ++i)
            if (nodes_[i].gen && !nodes_[i].stepping) start_step(static_cast<int>(i), 0.0);
        while (!done_ && !q_.empty()) {
            const Event e = q_.top();
            q_.pop();
            switch (e.kind) {
                case Ev::kStepEnd: on_step_end(e.node, e.t); break;
                case Ev::kTrainEnd: on_train_end(e.t); break;
                case Ev::kSyncEnd: on_sync_end(e.t); break;
                case Ev::kWaitEnd:  // the wait it ends, unless that step has started since
                    if (e.node == wait_id_ && wait_since_ >= 0) {
                        wait_over_ = true;
                        check_trigger(e.t);
                    }
                    break;
            }
        }
        if (!done_) throw InternalError("sim: the event queue ran dry before the last step");
        // Steps still in flight at the end are cut at the wall; their samples are discarded.
        for (Node& n : nodes_)
            if (n.stepping) n.book(Kind::kRollout, res_.wall);
    }

    // ------------------------------------------------------------------ results
    void finish() {
        res_.mode = cfg_.mode;
        res_.nodes = cfg_.nodes;
        res_.train_group_size = static_cast<int>(members_.size());
        int64_t leftover = 0;
        for (const auto& [g, rec] : groups_) leftover += G_ - rec.remaining;
        res_.leftover = leftover;
        for (const Node& n : nodes_) res_.discarded += n.active + static_cast<int64_t>(n.waiting.size());
        res_.idle_frac.assign(cfg_.hw.size(), 0.0);
        std::vector<double> wall_sum(cfg_.hw.size(), 0.0);
        for (size_t i = 0; i < nodes_.size(); ++i) {
            Node& n = nodes_[i];
            n.book(Kind::kIdle, res_.wall);
            NodeResult nr;
            nr.group = n.group;
            nr.tags = n.tags;
            nr.in_train_group = n.member;
            for (const Span& s : n.spans) (s.kind == Kind::kIdle ? nr.idle : nr.busy) += s.t1 - s.t0;
            nr.spans = std::move(n.spans);
            res_.idle_frac[static_cast<size_t>(n.group)] += nr.idle;
            wall_sum[static_cast<size_t>(n.group)] += res_.wall;
            res_.node.push_back(std::move(nr));
        }
        for (size_t g = 0; g < wall_sum.size(); ++g)
            res_.idle_frac[g] = wall_sum[g] > 0 ? res_.idle_frac[g] / wall_sum[g] : 0.0;
        res_.samples_per_s = res_.wall > 0 ? static_cast<double>(res_.trained) / res_.wall : 0.0;
        res_.tokens_per_s = res_.wall > 0 ? static_cast<double>(res_.tokens_trained) / res_.wall : 0.0;
        res_.staleness_mean = res_.trained > 0 ? age_sum_ / static_cast<double>(res_.trained) : 0.0;
    }

    enum class State { kWaiting, kPreempting, kTraining };

    const SimConfig& cfg_;
    const CostModel& cost_;
    config::Options opt_;
    int64_t threshold_ = 0;
    // --late-wait, as the coordinator (async_admission.cpp): the wait under way, the cycle measured
    double wait_since_ = -1, wait_until_ = -1, cycle_s_ = 0, last_trigger_ = -1;
    int wait_id_ = 0;         // the kWaitEnd event of the wait under way carries this
    bool wait_over_ = false;  // that event came: the step starts now
    int G_ = 1;
    std::vector<Node> nodes_;
    std::vector<uint32_t> tags_;
    std::vector<int> members_;
    std::vector<int> eligible_, gens_;        // the nodes that may train; the generating nodes
    sched::sched_policy::RateWindow window_;  // --rebalance-every: what the coordinator measured
    double trigger_t_ = 0, handover_s_ = 0;   // the step's batch chosen at; its new group's forming
    int coord_ = 0;
    int n_gens_ = 0;
    std::unordered_map<int64_t, GroupRec> groups_;  // submitted, not yet trained or dropped
    sched::SamplePool pool_{opt_};                  // complete groups, not yet trained or dropped
    std::priority_queue<Event, std::vector<Event>, std::greater<>> q_;
    uint64_t seq_ = 0;
    State state_ = State::kWaiting;
    int waiting_members_ = 0;
    std::vector<int64_t> batch_slots_;  // the batch being trained: each sample's input slots
    int64_t version_ = 0;
    double age_sum_ = 0;
    bool done_ = false;
    // --admission staleness (sched_policy::grant_groups): per generator, groups granted and samples delivered
    bool admission_ = false;
    std::vector<int64_t> granted_, arrived_;
    std::vector<int64_t> member_groups_, arrived_at_step_;  // per member generator, its allowance (grant_caps)
    bool coord_idled_ = false;  // the coordinator had nothing to generate since the last step
    int64_t admit_cap_ = 0;
    double rate_ = 0;  // samples a step trains per version (sched_policy::next_admission_rate)
    ModeResult res_;
};

}  // namespace

ModeResult simulate(const SimConfig& cfg, const CostModel& cost) {
    if (cfg.steps < 1) throw ConfigError("--steps: need at least 1, got " + std::to_string(cfg.steps));
    Sim s(cfg, cost);
    return s.run();
}

}  // namespace tagflow::sim
