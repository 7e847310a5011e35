// SPDX-License-Identifier: Apache-2.0
// gateway_router: see the header. Messages (all MPI_CHAR, point-to-point, on the scheduler's
// p2p communicator):
//   kTagGwReq  gateway -> worker   kind 0: [rid][max_tokens][temperature][top_p][top_k][seed][stop ids][prompt]
//                                  kind 1: [rid] cancel it (same tag: never overtakes its request)
//   kTagGwTok  worker -> gateway   [n]{rid, token, logprob, version} [m]{rid, finish}
//   kTagGwRec  gateway -> coord    kind 1: a finished request at token level; kind 2: a reward
// A reward closes what its session has so far: the session's trajectories that no other request
// of the session continues (and that no earlier reward took) become samples. Session and tree
// lifetime: see the header.
#include "sched/gateway_router.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <deque>
#include <filesystem>
#include <fstream>
#include <limits>
#include <list>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>

#include "common/error.hpp"
#include "common/mpi_env.hpp"
#include "gateway/backend.hpp"
#include "gateway/server.hpp"
#include "model/tokenizer.hpp"
#include "sched/sample_row.hpp"
#include "sched/wire.hpp"
#include "traj/tree_file_mpi.hpp"
#include "traj/trajectory_manager.hpp"

namespace tagflow::sched {

namespace {

struct Sending {
    MPI_Request req = MPI_REQUEST_NULL;
    std::vector<char> buf;
};
// Non-blocking sends whose buffers live until they complete.
struct Sends {
    std::list<Sending> l;
    void send(std::vector<char> b, int dest, int tag, MPI_Comm comm) {
        test();
        l.push_back({MPI_REQUEST_NULL, std::move(b)});
        Sending& s = l.back();
        TAGFLOW_MPI_CHECK(MPI_Isend(s.buf.data(), static_cast<int>(s.buf.size()), MPI_CHAR, dest, tag, comm, &s.req));
    }
    void test() {
        for (auto it = l.begin(); it != l.end();) {
            int done = 0;
            TAGFLOW_MPI_CHECK(MPI_Test(&it->req, &done, MPI_STATUS_IGNORE));
            it = done ? l.erase(it) : std::next(it);
        }
    }
    void wait() {
        while (!l.empty()) {
            test();
            if (!l.empty()) std::this_thread::sleep_for(std::chrono::microseconds(300));
        }
    }
};

// Receives one message of `tag` from `src` (MPI_ANY_SOURCE allowed) if one has arrived.
bool try_recv(MPI_Comm comm, int src, int tag, std::vector<char>& b, int* from = nullptr) {
    int flag = 0;
    MPI_Status st;
    TAGFLOW_MPI_CHECK(MPI_Iprobe(src, tag, comm, &flag, &st));
    if (!flag) return false;
    int count = 0;
    TAGFLOW_MPI_CHECK(MPI_Get_count(&st, MPI_CHAR, &count));
    b.resize(static_cast<size_t>(count));
    TAGFLOW_MPI_CHECK(MPI_Recv(b.data(), count, MPI_CHAR, st.MPI_SOURCE, tag, comm, MPI_STATUS_IGNORE));
    if (from) *from = st.MPI_SOURCE;
    return true;
}

// Finish codes on the wire.
constexpr uint8_t kFinStop = 0, kFinLength = 1, kFinError = 2, kFinCancelled = 3;
uint8_t fin_code(rollout::FinishReason r) {
    if (r == rollout::FinishReason::kStop) return kFinStop;
    return r == rollout::FinishReason::kCancelled ? kFinCancelled : kFinLength;
}
// kTagGwReq kinds.
constexpr uint8_t kReqGenerate = 0, kReqCancel = 1;

rollout::GenRequest to_gen(const gateway::CompletionRequest& q) {
    rollout::GenRequest g;
    g.id = kGatewayIdBase + static_cast<int64_t>(q.request_id);
    g.prompt = q.prompt_ids;
    g.params.temperature = q.temperature;
    g.params.top_p = q.top_p;
    g.params.top_k = q.top_k;
    g.params.max_tokens = q.max_tokens;
    g.params.stop_ids = q.stop_ids;
    g.params.seed = q.seed;
    return g;
}

// ---- the Backend the HTTP thread talks to: it only queues ------------------------------------
struct Inbox {
    mutable std::mutex mu;
    std::deque<std::pair<gateway::CompletionRequest, gateway::TokenSinkPtr>> reqs;
    std::deque<gateway::RewardReport> rewards;
    std::deque<uint64_t> reward_seq;  // per reward: requests its session had submitted before it
    std::vector<uint64_t> cancels;
    // Reward validation. session -> requests submitted under it (the main thread forgets a
    // session only if it routed all of them: no newer request is queued); completion id -> session.
    std::unordered_map<std::string, uint64_t> sessions;
    std::unordered_map<std::string, std::string> completion_ids;
    int64_t pending = 0, cancelled = 0, live_sessions = 0;  // the last two: the main thread's, for /health
    std::atomic<int32_t> version{0};
    gateway::ModelInfo model;
};

class QueueBackend final : public gateway::Backend {
public:
    explicit QueueBackend(std::shared_ptr<Inbox> in) : in_(std::move(in)) {}
    gateway::BackendInfo info() const override {
        gateway::BackendInfo b;
        b.models.push_back(in_->model);
        std::lock_guard<std::mutex> lk(in_->mu);
        b.pending = in_->pending;
        b.policy_version = in_->version.load();
        b.cancelled = in_->cancelled;
        b.sessions = in_->live_sessions;
        return b;
    }
    void submit(gateway::CompletionRequest req, gateway::TokenSinkPtr sink) override {
        std::lock_guard<std::mutex> lk(in_->mu);
        ++in_->sessions[req.session];
        in_->completion_ids[req.completion_id] = req.session;
        in_->reqs.emplace_back(std::move(req), std::move(sink));
        ++in_->pending;
    }
    void cancel(uint64_t id) override {
        std::lock_guard<std::mutex> lk(in_->mu);
        in_->cancels.push_back(id);
    }
    gateway::RewardStatus report_reward(const gateway::RewardReport& r) override {
        std::lock_guard<std::mutex> lk(in_->mu);
        const bool known = (!r.session.empty() && in_->sessions.count(r.session)) ||
                           (!r.completion_id.empty() && in_->completion_ids.count(r.completion_id));
        if (!known) return gateway::RewardStatus::kUnknown;
        in_->rewards.push_back(r);
        auto s = in_->sessions.find(r.session);
        in_->reward_seq.push_back(s == in_->sessions.end() ? 0 : s->second);
        return gateway::RewardStatus::kAccepted;
    }

private:
    std::shared_ptr<Inbox> in_;
};

bool is_loopback(const std::string& h) { return h == "localhost" || h == "::1" || h.rfind("127.", 0) == 0; }

}  // namespace

// ================================================================================ GatewayRouter
struct GatewayRouter::Impl {
    GatewayConfig cfg;
    std::shared_ptr<Inbox> inbox = std::make_shared<Inbox>();
    std::unique_ptr<gateway::Server> server;
    struct Live {
        gateway::CompletionRequest req;
        gateway::TokenSinkPtr sink;
        int rank = 0;
        double t_start = 0;
        std::vector<int32_t> out, ver;
        std::vector<float> lp;
        bool cancel_sent = false;  // to the worker rank running it
    };
    std::unordered_map<uint64_t, Live> live;
    std::map<int, int64_t> load;                  // rank -> requests in flight there
    struct Sess {
        int rank = -1;          // where its requests go
        int64_t inflight = 0;   // requests routed, not finished
        uint64_t routed = 0;    // requests taken from the inbox under this session
        double last = 0;        // last request, finish or reward (run clock)
        bool closing = false;   // a session-level reward came: forget it once nothing is in flight
        std::vector<std::string> cids;
    };
    std::unordered_map<std::string, Sess> sess;
    std::unordered_map<std::string, std::string> cid_session;
    traj::TrajectoryManager tm;                   // routing: who served which prefix
    int64_t tm_tokens = 0, tm_resets = 0;
    Sends sends;
    int64_t served = 0, n_cancelled = 0, n_forgotten = 0;
    double next_expiry = 0;
    size_t rr = 0;  // round-robin start for new sessions
    bool stopped = false;
    double last_now = 0;  // the run clock at the last poll

    // A reward to the coordinator (kTagGwRec kind 2), after the records of its requests.
    void forward_reward(const gateway::RewardReport& r, double now) {
        wire::Writer o;
        o.put<uint8_t>(2);
        o.str(r.session);
        o.str(r.completion_id);
        o.str(r.group);
        o.put<double>(r.reward);
        o.put<double>(now);
        sends.send(o.take(), cfg.coordinator, kTagGwRec, cfg.comm);
    }

    // Forgets session `name` (routing, reward validation) if nothing of it is in flight and it
    // is closing (or `idle`), unless the HTTP thread queued a request for it since the last poll.
    void maybe_forget(const std::string& name, bool idle = false) {
        auto it = sess.find(name);
        if (it == sess.end()) return;
        Sess& s = it->second;
        if (s.inflight > 0 || !(s.closing || idle)) return;
        {
            std::lock_guard<std::mutex> lk(inbox->mu);
            auto in = inbox->sessions.find(name);
            if (in != inbox->sessions.end() && in->second != s.routed) return;
            inbox->sessions.erase(name);
            for (const auto& c : s.cids) inbox->completion_ids.erase(c);
        }
        for (const auto& c : s.cids) cid_session.erase(c);
        sess.erase(it);
        ++n_forgotten;
    }

    int route(const gateway::CompletionRequest& q) {
        // A session seen before stays on the rank that holds its prefix (so its trajectory
        // and caches stay on one rank).
        auto known = sess.find(q.session);
        if (known != sess.end() && known->second.rank >= 0) return known->second.rank;
        // A new session whose whole prompt is stored already (a sibling: another attempt at the
        // same prompt, a retry under a new name) goes where that prefix is.
        const traj::Match m = tm.longest_prefix_match(q.prompt_ids);
        if (m.length == static_cast<int64_t>(q.prompt_ids.size())) {
            const int r = tm.rank(m.node);
            if (std::count(cfg.targets.begin(), cfg.targets.end(), r)) return r;
        }
        // Least loaded; ties go round-robin so that a trickle of new sessions still spreads.
        const size_t n = cfg.targets.size();
        int best = cfg.targets[rr % n];
        for (size_t k = 1; k < n; ++k) {
            const int r = cfg.targets[(rr + k) % n];
            if (load[r] < load[best]) best = r;
        }
        ++rr;
        return best;
    }

    void tokens(uint64_t rid, int32_t token, float lp, int32_t version) {
        auto it = live.find(rid);
        if (it == live.end()) return;
        Live& l = it->second;
        l.out.push_back(token);
        l.lp.push_back(lp);
        l.ver.push_back(version);
        l.sink->tokens({gateway::GeneratedToken{token, lp, version}});
    }

    void finish(uint64_t rid, uint8_t code, double now, const std::string& error = {}) {
        auto it = live.find(rid);
        if (it == live.end()) return;
        Live l = std::move(it->second);
        live.erase(it);
        --load[l.rank];
        {
            std::lock_guard<std::mutex> lk(inbox->mu);
            --inbox->pending;
            if (code == kFinCancelled) inbox->cancelled = ++n_cancelled;
        }
        auto s = sess.find(l.req.session);
        if (s != sess.end()) {
            --s->second.inflight;
            s->second.last = now;
        }
        struct Forget {  // after the sink's finish, whatever the path
            Impl& m;
            const std::string& name;
            ~Forget() { m.maybe_forget(name); }
        } forget{*this, l.req.session};
        gateway::Finish f;
        if (code == kFinError) {
            f.reason = "error";
            f.error = error.empty() ? "the rollout engine refused the request" : error;
            f.http_status = 400;
            l.sink->finish(f);
            return;
        }
        if (code == kFinCancelled) {  // its client went away: nothing to record
            f.reason = "cancelled";
            l.sink->finish(f);
            return;
        }
        f.reason = code == kFinStop ? "stop" : "length";
        if (!l.out.empty()) {
            traj::Request tr;
            tr.input = l.req.prompt_ids;
            tr.output = l.out;
            tr.logprobs = l.lp;
            tr.versions = l.ver;
            tr.rank = l.rank;
            tr.t_start = l.t_start;
            tr.t_end = now;
            tm_tokens += tm.insert(tr).stored;
            if (tm_tokens > cfg.route_tree_tokens) {  // only a routing hint: start afresh
                tm.clear();
                tm_tokens = 0;
                ++tm_resets;
            }
            // Token-level record to the coordinator (before the agent can see the end and
            // report a reward, which follows on the same channel, so in order).
            wire::Writer o;
            o.put<uint8_t>(1);
            o.str(l.req.session);
            o.str(l.req.completion_id);
            o.put<int32_t>(l.rank);
            o.put<double>(l.t_start);
            o.put<double>(now);
            o.put<uint8_t>(code);
            o.vec(l.req.prompt_ids);
            o.vec(l.out);
            o.vec(l.lp);
            o.vec(l.ver);
            sends.send(o.take(), cfg.coordinator, kTagGwRec, cfg.comm);
            ++served;
        }
        l.sink->finish(f);
    }
};

GatewayRouter::GatewayRouter(const GatewayConfig& cfg) : impl_(std::make_unique<Impl>()) {
    Impl& m = *impl_;
    m.cfg = cfg;
    if (cfg.targets.empty()) throw ConfigError("--gateway: no rank that only rolls out to serve requests");
    m.inbox->model.id = cfg.model_id;
    m.inbox->model.context_length = cfg.context;
    m.inbox->model.vocab_size = cfg.vocab;
    m.inbox->model.created = static_cast<int64_t>(std::time(nullptr));
    gateway::ServerConfig sc;
    sc.host = cfg.host;
    sc.port = cfg.port;
    sc.token = gateway::generate_token();
    std::filesystem::create_directories(cfg.out);
    // A restarted job (resume) finds the last job's files: the URL goes first, so a client that
    // reads gateway.url and then gateway.token never pairs the new URL with the old token.
    std::error_code ec;
    std::filesystem::remove(cfg.out + "/gateway.url", ec);
    gateway::write_token_file(cfg.out + "/gateway.token", sc.token);
    m.server = std::make_unique<gateway::Server>(sc, std::make_shared<QueueBackend>(m.inbox),
                                                 text::byte_level_tokenizer());
    m.server->start();
    const bool v6 = cfg.host.find(':') != std::string::npos;
    const std::string url = "http://" + (v6 ? "[" + cfg.host + "]" : cfg.host) + ":" +
                            std::to_string(m.server->port()) + "/v1";
    {
        const std::string tmp = cfg.out + "/gateway.url.tmp";
        std::ofstream(tmp) << url << "\n";
        std::filesystem::rename(tmp, cfg.out + "/gateway.url");  // appears complete
    }
    std::printf("gateway: rank %d listening on %s (token in %s/gateway.token%s)\n", cfg.me, url.c_str(),
                cfg.out.c_str(), is_loopback(cfg.host) ? "" : "; reachable from other hosts");
    std::fflush(stdout);
}

GatewayRouter::~GatewayRouter() {
    try {
        stop();
    } catch (...) {
    }
}

int GatewayRouter::port() const { return impl_->server ? impl_->server->port() : 0; }
int64_t GatewayRouter::served() const { return impl_->served; }
int64_t GatewayRouter::cancelled() const { return impl_->n_cancelled; }
int64_t GatewayRouter::live_sessions() const { return static_cast<int64_t>(impl_->sess.size()); }

void GatewayRouter::poll(rollout::Engine& engine, double now, int32_t version) {
    Impl& m = *impl_;
    if (m.stopped) return;
    m.inbox->version = version;
    std::deque<std::pair<gateway::CompletionRequest, gateway::TokenSinkPtr>> reqs;
    std::deque<gateway::RewardReport> rewards;
    std::deque<uint64_t> reward_seq;
    std::vector<uint64_t> cancels;
    {
        std::lock_guard<std::mutex> lk(m.inbox->mu);
        reqs.swap(m.inbox->reqs);
        rewards.swap(m.inbox->rewards);
        reward_seq.swap(m.inbox->reward_seq);
        cancels.swap(m.inbox->cancels);
    }
    for (auto& [q, sink] : reqs) {
        const int target = m.route(q);
        Impl::Sess& ss = m.sess[q.session];
        ss.rank = target;
        ++ss.routed;
        ss.last = now;
        ss.closing = false;  // a new request reopens a session whose reward came
        ss.cids.push_back(q.completion_id);
        m.cid_session[q.completion_id] = q.session;
        const uint64_t rid = q.request_id;
        Impl::Live l;
        l.rank = target;
        l.t_start = now;
        l.sink = sink;
        if (target == m.cfg.me) {
            try {
                engine.submit(to_gen(q));
            } catch (const std::exception& e) {
                {
                    std::lock_guard<std::mutex> lk(m.inbox->mu);
                    --m.inbox->pending;
                }
                gateway::Finish f;
                f.reason = "error";
                f.http_status = 400;
                f.error = e.what();
                sink->finish(f);
                continue;
            }
        } else {
            wire::Writer o;
            o.put<uint8_t>(kReqGenerate);
            o.put<uint64_t>(rid);
            o.put<int32_t>(q.max_tokens);
            o.put<double>(q.temperature);
            o.put<double>(q.top_p);
            o.put<int32_t>(q.top_k);
            o.put<uint64_t>(q.seed);
            o.vec(q.stop_ids);
            o.vec(q.prompt_ids);
            m.sends.send(o.take(), target, kTagGwReq, m.cfg.comm);
        }
        ++m.load[target];
        ++ss.inflight;
        l.req = std::move(q);
        m.live.emplace(rid, std::move(l));
    }
    // Clients that went away: cancel here, or tell the rank running it (which answers with a
    // kFinCancelled finish, or with the normal one if the request ended first).
    for (uint64_t rid : cancels) {
        auto it = m.live.find(rid);
        if (it == m.live.end() || it->second.cancel_sent) continue;
        if (it->second.rank == m.cfg.me) {
            if (engine.cancel(kGatewayIdBase + static_cast<int64_t>(rid))) m.finish(rid, kFinCancelled, now);
        } else {
            wire::Writer o;
            o.put<uint8_t>(kReqCancel);
            o.put<uint64_t>(rid);
            m.sends.send(o.take(), it->second.rank, kTagGwReq, m.cfg.comm);
            it->second.cancel_sent = true;
        }
    }
    // Tokens from the other ranks.
    std::vector<char> b;
    while (try_recv(m.cfg.comm, MPI_ANY_SOURCE, kTagGwTok, b)) {
        wire::Reader in(b, "gateway");
        const auto n = in.get<uint64_t>();
        for (uint64_t i = 0; i < n; ++i) {
            const auto rid = in.get<uint64_t>();
            const auto tok = in.get<int32_t>();
            const auto lp = in.get<float>();
            const auto ver = in.get<int32_t>();
            m.tokens(rid, tok, lp, ver);
        }
        const auto k = in.get<uint64_t>();
        for (uint64_t i = 0; i < k; ++i) {
            const auto rid = in.get<uint64_t>();
            const auto code = in.get<uint8_t>();
            m.finish(rid, code, now);
        }
    }
    m.last_now = now;
    for (size_t ri = 0; ri < rewards.size(); ++ri) {
        const gateway::RewardReport& r = rewards[ri];
        m.forward_reward(r, now);
        std::string name = r.session;
        if (!r.completion_id.empty()) {
            auto c = m.cid_session.find(r.completion_id);
            if (c != m.cid_session.end()) name = c->second;
        }
        auto s = m.sess.find(name);
        if (s == m.sess.end()) continue;
        s->second.last = now;
        // A session-level reward closes the session, unless a request under it came after the
        // reward (this poll routed it already): that one reopened it.
        if (r.completion_id.empty() && reward_seq[ri] == s->second.routed) {
            s->second.closing = true;
            m.maybe_forget(name);
        }
    }
    if (now >= m.next_expiry) {  // idle sessions, at most once a second
        m.next_expiry = now + 1.0;
        std::vector<std::string> idle;
        for (const auto& [name, s] : m.sess)
            if (s.inflight == 0 && now - s.last > m.cfg.session_idle_s) idle.push_back(name);
        for (const auto& name : idle) m.maybe_forget(name, true);
    }
    {
        std::lock_guard<std::mutex> lk(m.inbox->mu);
        m.inbox->live_sessions = static_cast<int64_t>(m.sess.size());
    }
    m.sends.test();
}

void GatewayRouter::on_token(const rollout::TokenEvent& e) {
    impl_->tokens(static_cast<uint64_t>(e.id - kGatewayIdBase), e.token, e.logprob, e.version);
}

void GatewayRouter::on_finish(const rollout::GenResult& g, double now) {
    impl_->finish(static_cast<uint64_t>(g.id - kGatewayIdBase), fin_code(g.finish), now);
}

void GatewayRouter::stop() {
    Impl& m = *impl_;
    if (m.stopped) return;
    m.stopped = true;
    if (m.server) m.server->stop();
    gateway::Finish f;
    f.reason = "abort";
    for (auto& [rid, l] : m.live) l.sink->finish(f);
    m.live.clear();
    {
        std::lock_guard<std::mutex> lk(m.inbox->mu);
        for (auto& [q, sink] : m.inbox->reqs) sink->finish(f);
        m.inbox->reqs.clear();
    }
    // Rewards the HTTP thread accepted (answered 200) since the last poll still go to the
    // coordinator (before this rank's final message, so a requeue checkpoint holds them).
    std::deque<gateway::RewardReport> rewards;
    {
        std::lock_guard<std::mutex> lk(m.inbox->mu);
        rewards.swap(m.inbox->rewards);
        m.inbox->reward_seq.clear();
    }
    for (const auto& r : rewards) m.forward_reward(r, m.last_now);
    m.sends.wait();
    // Token messages still on their way from other ranks: receive and drop them.
    std::vector<char> b;
    while (try_recv(m.cfg.comm, MPI_ANY_SOURCE, kTagGwTok, b)) {
    }
    std::printf("gateway: %lld requests served, %lld cancelled (client went away); sessions: %lld forgotten, "
                "%lld live; routing tree reset %lld times\n",
                static_cast<long long>(m.served), static_cast<long long>(m.n_cancelled),
                static_cast<long long>(m.n_forgotten), static_cast<long long>(m.sess.size()),
                static_cast<long long>(m.tm_resets));
    std::fflush(stdout);
}

// ================================================================================ GatewayWorker
struct GatewayWorker::Impl {
    int gw = 0;
    MPI_Comm comm = MPI_COMM_NULL;
    wire::Writer toks;
    uint64_t n_toks = 0;
    std::vector<std::pair<uint64_t, uint8_t>> fins;
    Sends sends;
};

GatewayWorker::GatewayWorker(int gateway_rank, MPI_Comm comm) : impl_(std::make_unique<Impl>()) {
    impl_->gw = gateway_rank;
    impl_->comm = comm;
}
GatewayWorker::~GatewayWorker() = default;

void GatewayWorker::poll(rollout::Engine& engine) {
    Impl& m = *impl_;
    std::vector<char> b;
    while (try_recv(m.comm, m.gw, kTagGwReq, b)) {
        wire::Reader in(b, "gateway");
        const auto kind = in.get<uint8_t>();
        if (kind == kReqCancel) {  // unknown here: it finished already (its finish is on its way)
            const auto rid = in.get<uint64_t>();
            if (engine.cancel(kGatewayIdBase + static_cast<int64_t>(rid))) m.fins.emplace_back(rid, kFinCancelled);
            continue;
        }
        if (kind != kReqGenerate) throw InternalError("gateway worker: unknown request kind " + std::to_string(kind));
        gateway::CompletionRequest q;
        q.request_id = in.get<uint64_t>();
        q.max_tokens = in.get<int32_t>();
        q.temperature = in.get<double>();
        q.top_p = in.get<double>();
        q.top_k = in.get<int32_t>();
        q.seed = in.get<uint64_t>();
        q.stop_ids = in.vec<int32_t>();
        q.prompt_ids = in.vec<int32_t>();
        try {
            engine.submit(to_gen(q));
        } catch (const std::exception&) {
            m.fins.emplace_back(q.request_id, kFinError);
        }
    }
}

void GatewayWorker::on_token(const rollout::TokenEvent& e) {
    Impl& m = *impl_;
    m.toks.put<uint64_t>(static_cast<uint64_t>(e.id - kGatewayIdBase));
    m.toks.put<int32_t>(e.token);
    m.toks.put<float>(e.logprob);
    m.toks.put<int32_t>(e.version);
    ++m.n_toks;
}

void GatewayWorker::on_finish(const rollout::GenResult& g) {
    impl_->fins.emplace_back(static_cast<uint64_t>(g.id - kGatewayIdBase), fin_code(g.finish));
}

void GatewayWorker::flush() {
    Impl& m = *impl_;
    if (m.n_toks == 0 && m.fins.empty()) {
        m.sends.test();
        return;
    }
    wire::Writer o;
    o.put<uint64_t>(m.n_toks);
    o.raw(m.toks.bytes());
    o.put<uint64_t>(m.fins.size());
    for (auto& [rid, code] : m.fins) {
        o.put<uint64_t>(rid);
        o.put<uint8_t>(code);
    }
    m.sends.send(o.take(), m.gw, kTagGwTok, m.comm);
    m.toks.clear();
    m.n_toks = 0;
    m.fins.clear();
}

void GatewayWorker::finish_sends() { impl_->sends.wait(); }

// ================================================================================ GatewayRecorder
struct GatewayRecorder::Impl {
    int32_t group_size = 2;
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
        rec = sample_row(s, "gateway", -1, RowColumns::kFromTree);  // write() fills the columns from the tree
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

GatewayRecorder::GatewayRecorder(int32_t group_size, RecorderLimits limits) : impl_(std::make_unique<Impl>()) {
    impl_->group_size = std::max(1, group_size);
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
        const traj::InsertResult ir = t.tm.insert(tr);
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
