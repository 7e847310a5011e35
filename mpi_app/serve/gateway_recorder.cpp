// SPDX-License-Identifier: Apache-2.0
// gateway_recorder: GatewayRecorder (serve/gateway_router.hpp), on the coordinator: replica
// trajectory managers of every gateway request (the run file's /tree), rewarded sessions as
// training samples and /samples rows. Message layouts: gateway_router.cpp.
#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/error.hpp"
#include "serve/gateway_link.hpp"
#include "serve/gateway_router.hpp"
#include "step/sample_row.hpp"
#include "step/wire.hpp"
#include "traj/tree_file_mpi.hpp"
#include "traj/trajectory_manager.hpp"

namespace tagflow::sched {

using namespace gw;  // the parts' shared message helpers (gateway_link.hpp)

struct GatewayRecorder::Impl {
    int32_t group_size = 2;
    std::shared_ptr<const text::Tokenizer> tokenizer;  // the /samples text of the gateway's samples
    RecorderLimits lim;
    // Replica trees, each holding one serving rank's requests (as each rank's own tree in sync
    // mode: /tree rows only continue rows of the same rank, share/doc/hdf5-schema.md; routing
    // keeps a session on one rank). A session stays in the tree it started in (per rank); new
    // sessions go to the rank's current tree, a fresh one once that is dropped or holds
    // seal_tokens. A tree is dropped when nothing refers to it (refs: sessions, open-group
    // members and unwritten samples), right after its /tree rows are written.
    struct Tree {
        int32_t rank = 0;
        traj::TrajectoryManager tm;
        int64_t refs = 0;
        int64_t tokens = 0;  // stored
    };
    std::map<int64_t, Tree> trees;       // key: creation order
    std::map<int32_t, int64_t> current;  // rank -> tree new sessions go to
    int64_t next_tree = 0;
    struct Req {
        int64_t tree = -1;
        traj::NodeId node = -1;
        bool taken = false;
        uint8_t finish = kFinLength;
        int32_t rank = 0;
        double t_end = 0;
    };
    struct Sess {
        std::vector<Req> reqs;
        std::vector<std::string> cids;
        std::map<int32_t, int64_t> tree_of_rank;
        double last = 0;
    };
    std::unordered_map<std::string, Sess> sessions;
    std::unordered_map<std::string, std::pair<std::string, size_t>> by_completion;  // id -> (session, index)
    struct Open {
        std::vector<std::pair<Req, float>> members;  // trajectory, reward
        std::set<std::string> sessions;
        double last = 0;
    };
    std::map<std::string, Open> open;  // group key -> sessions reported so far
    std::vector<std::pair<io::SampleRecord, std::pair<int64_t, traj::NodeId>>> pending;  // (tree, node)
    int64_t next_id = 0, next_group = 0, n_requests = 0, n_samples = 0;
    int64_t n_closed = 0, n_expired = 0, n_groups_expired = 0, trees_dropped = 0;
    double clock = 0, next_expiry = 0;  // the gateway rank's run clock, as records and rewards carry it

    int64_t tree_for(Sess& s, int32_t rank) {
        auto known = s.tree_of_rank.find(rank);
        if (known != s.tree_of_rank.end()) return known->second;
        auto c = current.find(rank);
        if (c == current.end() || trees.at(c->second).tokens > lim.seal_tokens) {
            const int64_t k = next_tree++;
            trees[k].rank = rank;
            current[rank] = k;
            c = current.find(rank);
        }
        ++trees.at(c->second).refs;
        s.tree_of_rank[rank] = c->second;
        return c->second;
    }

    void drop_session(std::unordered_map<std::string, Sess>::iterator it) {
        for (const auto& [rank, t] : it->second.tree_of_rank) --trees.at(t).refs;
        for (const auto& c : it->second.cids) by_completion.erase(c);
        sessions.erase(it);
    }

    RolloutSample make_sample(const Req& q, float reward, int64_t id, int64_t group, io::SampleRecord& rec) const {
        const traj::Trajectory t = trees.at(q.tree).tm.rebuild(q.node);
        size_t p = 0;
        while (p < t.loss_mask.size() && !t.loss_mask[p]) ++p;
        RolloutSample s;
        s.id = id;
        s.group = group;
        s.rank = q.rank;
        s.version = std::max(0, t.version_min);
        s.reward = reward;
        s.hit_eos = q.finish == kFinStop;
        s.t_done = q.t_end;
        s.prompt.assign(t.tokens.begin(), t.tokens.begin() + static_cast<std::ptrdiff_t>(p));
        s.response.assign(t.tokens.begin() + static_cast<std::ptrdiff_t>(p), t.tokens.end());
        for (size_t k = p; k < t.tokens.size(); ++k) {
            s.logprobs.push_back(t.loss_mask[k] ? t.logprobs[k] : 0.0f);
            s.versions.push_back(t.loss_mask[k] ? t.versions[k] : s.version);
            s.loss_mask.push_back(t.loss_mask[k]);
        }
        // write() fills the token columns from the tree.
        rec = sample_row(s, "gateway", -1, RowColumns::kFromTree, {nullptr, tokenizer.get()});
        return s;
    }

    using Key = std::pair<int64_t, traj::NodeId>;  // (tree, node in it)
    // Strict ancestors of some trajectory of the session.
    std::set<Key> inner_of(const std::vector<Req>& all) const {
        std::set<Key> inner;
        for (const Req& q : all) {
            const traj::TrajectoryManager& tm = trees.at(q.tree).tm;
            for (traj::NodeId n = tm.parent(q.node); n > traj::kRoot; n = tm.parent(n)) inner.insert({q.tree, n});
        }
        return inner;
    }

    // The session's requests (indices in `idx`) that no other request of the session continues.
    std::vector<size_t> finals(const std::vector<Req>& all, const std::vector<size_t>& idx) const {
        const std::set<Key> inner = inner_of(all);
        std::vector<size_t> out;
        std::set<Key> seen;
        for (size_t i : idx) {
            const Req& q = all[i];
            if (q.taken || inner.count({q.tree, q.node}) || !seen.insert({q.tree, q.node}).second) continue;
            out.push_back(i);
        }
        return out;
    }

    // Every trajectory of the session went into a sample (taken, continued by another request
    // of it, or an identical retry of a taken one): nothing more can come out of its state.
    bool consumed(const std::vector<Req>& all) const {
        const std::set<Key> inner = inner_of(all);
        std::set<Key> taken;
        for (const Req& q : all)
            if (q.taken) taken.insert({q.tree, q.node});
        for (const Req& q : all)
            if (!q.taken && !inner.count({q.tree, q.node}) && !taken.count({q.tree, q.node})) return false;
        return true;
    }

    // Sessions and open groups idle for session_idle_s (at most once a second of the clock).
    void expire() {
        if (clock < next_expiry) return;
        next_expiry = clock + 1.0;
        for (auto it = sessions.begin(); it != sessions.end();) {
            if (clock - it->second.last > lim.session_idle_s) {
                auto dead = it++;
                drop_session(dead);
                ++n_expired;
            } else {
                ++it;
            }
        }
        for (auto it = open.begin(); it != open.end();) {
            if (clock - it->second.last > lim.session_idle_s) {
                for (const auto& [q, r] : it->second.members) --trees.at(q.tree).refs;
                it = open.erase(it);
                ++n_groups_expired;
            } else {
                ++it;
            }
        }
    }
};

GatewayRecorder::GatewayRecorder(int32_t group_size, RecorderLimits limits,
                                 std::shared_ptr<const text::Tokenizer> tokenizer)
    : impl_(std::make_unique<Impl>()) {
    impl_->group_size = std::max(1, group_size);
    impl_->tokenizer = tokenizer ? std::move(tokenizer) : text::byte_level_tokenizer();
    impl_->lim = limits;
}
GatewayRecorder::~GatewayRecorder() {
    if (impl_->n_requests > 0) {
        std::printf("%s\n", summary().c_str());
        std::fflush(stdout);
    }
}
std::pair<int64_t, int64_t> GatewayRecorder::next_ids() const { return {impl_->next_id, impl_->next_group}; }
void GatewayRecorder::resume_ids(int64_t next_id, int64_t next_group) {
    if (next_id < 0 || next_group < 0) throw ConfigError("gateway recorder: negative id counters in the checkpoint");
    if (impl_->n_requests > 0 || impl_->next_id > 0) throw InternalError("gateway recorder: resume_ids after ingest");
    impl_->next_id = next_id;
    impl_->next_group = next_group;
}
int64_t GatewayRecorder::requests() const { return impl_->n_requests; }
int64_t GatewayRecorder::samples() const { return impl_->n_samples; }
int64_t GatewayRecorder::live_sessions() const { return static_cast<int64_t>(impl_->sessions.size()); }
int64_t GatewayRecorder::live_trees() const { return static_cast<int64_t>(impl_->trees.size()); }
std::string GatewayRecorder::summary() const {
    const Impl& m = *impl_;
    char b[320];
    std::snprintf(b, sizeof b,
                  "gateway recorder: %lld requests, %lld samples; sessions closed %lld, expired %lld, live %lld; "
                  "trees dropped %lld, live %lld; groups expired %lld",
                  static_cast<long long>(m.n_requests), static_cast<long long>(m.n_samples),
                  static_cast<long long>(m.n_closed), static_cast<long long>(m.n_expired),
                  static_cast<long long>(m.sessions.size()), static_cast<long long>(m.trees_dropped),
                  static_cast<long long>(m.trees.size()), static_cast<long long>(m.n_groups_expired));
    return b;
}

void GatewayRecorder::ingest(const char* data, size_t size, std::vector<std::vector<RolloutSample>>& groups) {
    Impl& m = *impl_;
    wire::Reader in(data, size, "gateway");
    const auto kind = in.get<uint8_t>();
    if (kind == 1) {
        const std::string session = in.str(), cid = in.str();
        Impl::Req q;
        q.rank = in.get<int32_t>();
        const double t0 = in.get<double>();
        q.t_end = in.get<double>();
        q.finish = in.get<uint8_t>();
        const auto input = in.vec<int32_t>();
        const auto output = in.vec<int32_t>();
        const auto lp = in.vec<float>();
        const auto ver = in.vec<int32_t>();
        traj::Request tr;
        tr.input = input;
        tr.output = output;
        tr.logprobs = lp;
        tr.versions = ver;
        tr.rank = q.rank;
        tr.t_start = t0;
        tr.t_end = q.t_end;
        Impl::Sess& s = m.sessions[session];
        q.tree = m.tree_for(s, q.rank);
        Impl::Tree& t = m.trees.at(q.tree);
        // The session's earlier requests in this tree: a turn that feeds back the session's
        // own output continues it, not another session's same tokens at another version.
        std::vector<traj::NodeId> own;
        for (const Impl::Req& e : s.reqs)
            if (e.tree == q.tree) own.push_back(e.node);
        const traj::InsertResult ir = t.tm.insert(tr, own);
        q.node = ir.traj;
        t.tokens += ir.stored;
        m.by_completion[cid] = {session, s.reqs.size()};
        s.cids.push_back(cid);
        s.reqs.push_back(q);
        s.last = q.t_end;
        m.clock = std::max(m.clock, q.t_end);
        ++m.n_requests;
        m.expire();
        return;
    }
    if (kind != 2) throw InternalError("gateway recorder: unknown record kind " + std::to_string(kind));
    const std::string session = in.str(), cid = in.str(), group = in.str();
    const auto reward = static_cast<float>(in.get<double>());
    m.clock = std::max(m.clock, in.get<double>());
    std::string sess = session;
    std::vector<size_t> idx;
    if (!cid.empty() && m.by_completion.count(cid)) {
        sess = m.by_completion.at(cid).first;
        idx.push_back(m.by_completion.at(cid).second);
    }
    auto it = m.sessions.find(sess);
    if (it == m.sessions.end()) {  // reported before anything finished, or closed already: nothing to train on
        m.expire();
        return;
    }
    it->second.last = m.clock;
    if (idx.empty())
        for (size_t i = 0; i < it->second.reqs.size(); ++i) idx.push_back(i);
    const std::vector<size_t> fin = m.finals(it->second.reqs, idx);
    const std::string key = group.empty() ? "\x01session:" + sess : group;
    Impl::Open& o = m.open[key];
    for (size_t i : fin) {
        Impl::Req& q = it->second.reqs[i];
        q.taken = true;
        o.members.emplace_back(q, reward);
        ++m.trees.at(q.tree).refs;
    }
    o.sessions.insert(sess);
    o.last = m.clock;
    if (m.consumed(it->second.reqs)) {  // its state is no longer needed
        m.drop_session(it);
        ++m.n_closed;
    }
    const int32_t need = group.empty() ? 1 : m.group_size;
    if (static_cast<int32_t>(o.sessions.size()) < need) {
        m.expire();
        return;
    }
    Impl::Open done = std::move(o);
    m.open.erase(key);
    m.expire();
    if (done.members.empty()) return;
    const int64_t g = kGatewayIdBase + m.next_group++;
    std::vector<RolloutSample> out;
    for (auto& [q, r] : done.members) {  // each member's tree reference passes to its pending sample
        io::SampleRecord rec;
        out.push_back(m.make_sample(q, r, kGatewayIdBase + m.next_id++, g, rec));
        m.pending.emplace_back(std::move(rec), std::make_pair(q.tree, q.node));
        ++m.n_samples;
    }
    groups.push_back(std::move(out));
}

void GatewayRecorder::write(io::RunFile& f, std::vector<io::SampleRecord>& samples) {
    Impl& m = *impl_;
    for (auto& [key, t] : m.trees) traj::write_tree(f, t.tm);
    for (auto& [rec, where] : m.pending) {
        traj::fill_sample(m.trees.at(where.first).tm, where.second, rec);
        samples.push_back(std::move(rec));
        --m.trees.at(where.first).refs;
    }
    m.pending.clear();
    // Every row is written: trees nothing refers to any more go (a rank's next session starts a new one).
    for (auto it = m.trees.begin(); it != m.trees.end();) {
        if (it->second.refs > 0) {
            ++it;
            continue;
        }
        auto c = m.current.find(it->second.rank);
        if (c != m.current.end() && c->second == it->first) m.current.erase(c);
        it = m.trees.erase(it);
        ++m.trees_dropped;
    }
}

}  // namespace tagflow::sched
