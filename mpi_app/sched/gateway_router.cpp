// SPDX-License-Identifier: Apache-2.0
// gateway_router: see the header. Messages (all MPI_CHAR, point-to-point, on the scheduler's
// p2p communicator):
//   kTagGwReq  gateway -> worker   [rid][max_tokens][temperature][top_p][top_k][seed][stop ids][prompt]
//   kTagGwTok  worker -> gateway   [n]{rid, token, logprob, version} [m]{rid, finish}
//   kTagGwRec  gateway -> coord    kind 1: a finished request at token level; kind 2: a reward
// A reward closes what its session has so far: the session's trajectories that no other request
// of the session continues (and that no earlier reward took) become samples.
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
#include "traj/tree_file_mpi.hpp"
#include "traj/trajectory_manager.hpp"

namespace tagflow::sched {

namespace {

// ---- byte packing -------------------------------------------------------------------------------
struct Out {
    std::vector<char> b;
    template <typename T>
    void put(const T& v) {
        const char* p = reinterpret_cast<const char*>(&v);
        b.insert(b.end(), p, p + sizeof(T));
    }
    template <typename T>
    void vec(const std::vector<T>& v) {
        put<uint64_t>(v.size());
        const char* p = reinterpret_cast<const char*>(v.data());
        b.insert(b.end(), p, p + v.size() * sizeof(T));
    }
    void str(const std::string& s) {
        put<uint64_t>(s.size());
        b.insert(b.end(), s.begin(), s.end());
    }
};
struct In {
    const char* p;
    const char* end;
    template <typename T>
    T get() {
        if (static_cast<size_t>(end - p) < sizeof(T)) throw InternalError("gateway: truncated message");
        T v;
        std::memcpy(&v, p, sizeof(T));
        p += sizeof(T);
        return v;
    }
    template <typename T>
    std::vector<T> vec() {
        const auto n = get<uint64_t>();
        if (static_cast<size_t>(end - p) / sizeof(T) < n) throw InternalError("gateway: truncated vector");
        std::vector<T> v(n);
        std::memcpy(v.data(), p, n * sizeof(T));
        p += n * sizeof(T);
        return v;
    }
    std::string str() {
        const auto n = get<uint64_t>();
        if (static_cast<size_t>(end - p) < n) throw InternalError("gateway: truncated string");
        std::string s(p, p + n);
        p += n;
        return s;
    }
};

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
constexpr uint8_t kFinStop = 0, kFinLength = 1, kFinError = 2;
uint8_t fin_code(rollout::FinishReason r) { return r == rollout::FinishReason::kStop ? kFinStop : kFinLength; }

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
    std::set<std::string> sessions, completion_ids;
    std::set<uint64_t> cancelled;
    int64_t pending = 0;
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
        return b;
    }
    void submit(gateway::CompletionRequest req, gateway::TokenSinkPtr sink) override {
        std::lock_guard<std::mutex> lk(in_->mu);
        in_->sessions.insert(req.session);
        in_->completion_ids.insert(req.completion_id);
        in_->reqs.emplace_back(std::move(req), std::move(sink));
        ++in_->pending;
    }
    void cancel(uint64_t id) override {
        std::lock_guard<std::mutex> lk(in_->mu);
        in_->cancelled.insert(id);
    }
    gateway::RewardStatus report_reward(const gateway::RewardReport& r) override {
        std::lock_guard<std::mutex> lk(in_->mu);
        const bool known = (!r.session.empty() && in_->sessions.count(r.session)) ||
                           (!r.completion_id.empty() && in_->completion_ids.count(r.completion_id));
        if (!known) return gateway::RewardStatus::kUnknown;
        in_->rewards.push_back(r);
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
    };
    std::unordered_map<uint64_t, Live> live;
    std::map<int, int64_t> load;                  // rank -> requests in flight there
    std::unordered_map<std::string, int> session_rank;  // session -> rank of its last request
    traj::TrajectoryManager tm;                   // routing: who served which prefix
    Sends sends;
    int64_t served = 0;
    size_t rr = 0;  // round-robin start for new sessions
    bool stopped = false;

    int route(const gateway::CompletionRequest& q) {
        // A session seen before stays on the rank that holds its prefix (so its trajectory
        // and caches stay on one rank).
        auto known = session_rank.find(q.session);
        if (known != session_rank.end()) return known->second;
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
            inbox->cancelled.erase(rid);
        }
        gateway::Finish f;
        if (code == kFinError) {
            f.reason = "error";
            f.error = error.empty() ? "the rollout engine refused the request" : error;
            f.http_status = 400;
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
            tm.insert(tr);
            // Token-level record to the coordinator (before the agent can see the end and
            // report a reward, which follows on the same channel, so in order).
            Out o;
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
            sends.send(std::move(o.b), cfg.coordinator, kTagGwRec, cfg.comm);
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
    gateway::write_token_file(cfg.out + "/gateway.token", sc.token);
    m.server = std::make_unique<gateway::Server>(sc, std::make_shared<QueueBackend>(m.inbox),
                                                 std::make_shared<const model::Tokenizer>());
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

void GatewayRouter::poll(rollout::Engine& engine, double now, int32_t version) {
    Impl& m = *impl_;
    if (m.stopped) return;
    m.inbox->version = version;
    std::deque<std::pair<gateway::CompletionRequest, gateway::TokenSinkPtr>> reqs;
    std::deque<gateway::RewardReport> rewards;
    {
        std::lock_guard<std::mutex> lk(m.inbox->mu);
        reqs.swap(m.inbox->reqs);
        rewards.swap(m.inbox->rewards);
    }
    for (auto& [q, sink] : reqs) {
        const int target = m.route(q);
        m.session_rank[q.session] = target;
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
            Out o;
            o.put<uint64_t>(rid);
            o.put<int32_t>(q.max_tokens);
            o.put<double>(q.temperature);
            o.put<double>(q.top_p);
            o.put<int32_t>(q.top_k);
            o.put<uint64_t>(q.seed);
            o.vec(q.stop_ids);
            o.vec(q.prompt_ids);
            m.sends.send(std::move(o.b), target, kTagGwReq, m.cfg.comm);
        }
        ++m.load[target];
        l.req = std::move(q);
        m.live.emplace(rid, std::move(l));
    }
    // Tokens from the other ranks.
    std::vector<char> b;
    while (try_recv(m.cfg.comm, MPI_ANY_SOURCE, kTagGwTok, b)) {
        In in{b.data(), b.data() + b.size()};
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
    for (const auto& r : rewards) {
        Out o;
        o.put<uint8_t>(2);
        o.str(r.session);
        o.str(r.completion_id);
        o.str(r.group);
        o.put<double>(r.reward);
        m.sends.send(std::move(o.b), m.cfg.coordinator, kTagGwRec, m.cfg.comm);
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
    // Rewards queued but not forwarded are lost with the run; the records already sent are in.
    m.sends.wait();
    // Token messages still on their way from other ranks: receive and drop them.
    std::vector<char> b;
    while (try_recv(m.cfg.comm, MPI_ANY_SOURCE, kTagGwTok, b)) {
    }
}

// ================================================================================ GatewayWorker
struct GatewayWorker::Impl {
    int gw = 0;
    MPI_Comm comm = MPI_COMM_NULL;
    Out toks;
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
        In in{b.data(), b.data() + b.size()};
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
    Out o;
    o.put<uint64_t>(m.n_toks);
    o.b.insert(o.b.end(), m.toks.b.begin(), m.toks.b.end());
    o.put<uint64_t>(m.fins.size());
    for (auto& [rid, code] : m.fins) {
        o.put<uint64_t>(rid);
        o.put<uint8_t>(code);
    }
    m.sends.send(std::move(o.b), m.gw, kTagGwTok, m.comm);
    m.toks.b.clear();
    m.n_toks = 0;
    m.fins.clear();
}

void GatewayWorker::finish_sends() { impl_->sends.wait(); }

// ================================================================================ GatewayRecorder
struct GatewayRecorder::Impl {
    int32_t group_size = 2;
    // One replica per serving rank, as each rank's own tree in sync mode: /tree rows only
    // continue rows of the same rank (share/doc/hdf5-schema.md), and routing keeps a session on
    // one rank.
    std::map<int32_t, traj::TrajectoryManager> tms;
    struct Req {
        traj::NodeId node = -1;
        bool taken = false;
        uint8_t finish = kFinLength;
        int32_t rank = 0;
        double t_end = 0;
    };
    std::unordered_map<std::string, std::vector<Req>> sessions;
    std::unordered_map<std::string, std::pair<std::string, size_t>> by_completion;  // id -> (session, index)
    struct Open {
        std::vector<std::pair<Req, float>> members;  // trajectory, reward
        std::set<std::string> sessions;
    };
    std::map<std::string, Open> open;  // group key -> sessions reported so far
    std::vector<std::pair<io::SampleRecord, std::pair<int32_t, traj::NodeId>>> pending;
    int64_t next_id = 0, next_group = 0, n_requests = 0, n_samples = 0;

    RolloutSample make_sample(const Req& q, float reward, int64_t id, int64_t group, io::SampleRecord& rec) const {
        const traj::Trajectory t = tms.at(q.rank).rebuild(q.node);
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
        rec.id = id;
        rec.group = group;
        rec.prompt_index = -1;
        rec.task = "gateway";
        rec.reward = reward;
        rec.finish_reason = s.hit_eos ? io::FinishReason::kStop : io::FinishReason::kLength;
        rec.rank = q.rank;
        rec.t_done = q.t_end;
        return s;
    }

    // The session's requests (indices in `idx`) that no other request of the session continues.
    std::vector<size_t> finals(const std::vector<Req>& all, const std::vector<size_t>& idx) const {
        using Key = std::pair<int32_t, traj::NodeId>;  // (rank, node in that rank's tree)
        std::set<Key> inner;  // strict ancestors of some trajectory of the session
        for (const Req& q : all) {
            const traj::TrajectoryManager& tm = tms.at(q.rank);
            for (traj::NodeId n = tm.parent(q.node); n > traj::kRoot; n = tm.parent(n)) inner.insert({q.rank, n});
        }
        std::vector<size_t> out;
        std::set<Key> seen;
        for (size_t i : idx) {
            const Req& q = all[i];
            if (q.taken || inner.count({q.rank, q.node}) || !seen.insert({q.rank, q.node}).second) continue;
            out.push_back(i);
        }
        return out;
    }
};

GatewayRecorder::GatewayRecorder(int32_t group_size) : impl_(std::make_unique<Impl>()) {
    impl_->group_size = std::max(1, group_size);
}
GatewayRecorder::~GatewayRecorder() = default;
int64_t GatewayRecorder::requests() const { return impl_->n_requests; }
int64_t GatewayRecorder::samples() const { return impl_->n_samples; }

void GatewayRecorder::ingest(const char* data, size_t size, std::vector<std::vector<RolloutSample>>& groups) {
    Impl& m = *impl_;
    In in{data, data + size};
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
        q.node = m.tms[q.rank].insert(tr).traj;
        auto& v = m.sessions[session];
        m.by_completion[cid] = {session, v.size()};
        v.push_back(q);
        ++m.n_requests;
        return;
    }
    if (kind != 2) throw InternalError("gateway recorder: unknown record kind " + std::to_string(kind));
    const std::string session = in.str(), cid = in.str(), group = in.str();
    const auto reward = static_cast<float>(in.get<double>());
    std::string sess = session;
    std::vector<size_t> idx;
    if (!cid.empty() && m.by_completion.count(cid)) {
        sess = m.by_completion.at(cid).first;
        idx.push_back(m.by_completion.at(cid).second);
    }
    auto it = m.sessions.find(sess);
    if (it == m.sessions.end()) return;  // reported before anything finished: nothing to train on
    if (idx.empty())
        for (size_t i = 0; i < it->second.size(); ++i) idx.push_back(i);
    const std::vector<size_t> fin = m.finals(it->second, idx);
    const std::string key = group.empty() ? "\x01session:" + sess : group;
    Impl::Open& o = m.open[key];
    for (size_t i : fin) {
        it->second[i].taken = true;
        o.members.emplace_back(it->second[i], reward);
    }
    o.sessions.insert(sess);
    const int32_t need = group.empty() ? 1 : m.group_size;
    if (static_cast<int32_t>(o.sessions.size()) < need) return;
    Impl::Open done = std::move(o);
    m.open.erase(key);
    if (done.members.empty()) return;
    const int64_t g = kGatewayIdBase + m.next_group++;
    std::vector<RolloutSample> out;
    for (auto& [q, r] : done.members) {
        io::SampleRecord rec;
        out.push_back(m.make_sample(q, r, kGatewayIdBase + m.next_id++, g, rec));
        m.pending.emplace_back(std::move(rec), std::make_pair(q.rank, q.node));
        ++m.n_samples;
    }
    groups.push_back(std::move(out));
}

void GatewayRecorder::write(io::RunFile& f, std::vector<io::SampleRecord>& samples) {
    Impl& m = *impl_;
    for (auto& [rank, tm] : m.tms) traj::write_tree(f, tm);
    for (auto& [rec, where] : m.pending) {
        traj::fill_sample(m.tms.at(where.first), where.second, rec);
        samples.push_back(std::move(rec));
    }
    m.pending.clear();
}

}  // namespace tagflow::sched
