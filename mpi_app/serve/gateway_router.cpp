// SPDX-License-Identifier: Apache-2.0
// gateway_router: see the header. This file: GatewayRouter; GatewayWorker, GatewayRecorder and
// what they share are in gateway_worker.cpp, gateway_recorder.cpp and gateway_link.hpp.
// Messages (all MPI_CHAR, point-to-point, on the scheduler's p2p communicator):
//   kTagGwReq  gateway -> worker   kind 0: [rid][max_tokens][temperature][top_p][top_k][seed][stop ids][prompt]
//                                  kind 1: [rid] cancel it (same tag: never overtakes its request)
//   kTagGwTok  worker -> gateway   [n]{rid, token, logprob, version} [m]{rid, finish}
//   kTagGwRec  gateway -> coord    kind 1: a finished request at token level; kind 2: a reward
// A reward closes what its session has so far: the session's trajectories that no other request
// of the session continues (and that no earlier reward took) become samples. Session and tree
// lifetime: see the header.
#include "serve/gateway_router.hpp"

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
#include <functional>
#include <limits>
#include <list>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "common/error.hpp"
#include "common/mpi_env.hpp"
#include "common/safe_file.hpp"
#include "gateway/backend.hpp"
#include "gateway/server.hpp"
#include "model/tokenizer.hpp"
#include "profile/profile_request.hpp"
#include "serve/gateway_link.hpp"
#include "serve/gateway_queue.hpp"
#include "step/wire.hpp"
#include "traj/trajectory_manager.hpp"

namespace tagflow::sched {

using namespace gw;  // the parts' shared message helpers (gateway_link.hpp, gateway_queue.hpp)

namespace {

bool is_loopback(const std::string& h) { return h == "localhost" || h == "::1" || h.rfind("127.", 0) == 0; }

}  // namespace

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
    std::map<int, int64_t> load;  // rank -> requests in flight there
    struct Sess {
        int rank = -1;         // where its requests go
        int64_t inflight = 0;  // requests routed, not finished
        uint64_t routed = 0;   // requests taken from the inbox under this session
        double last = 0;       // last request, finish or reward (run clock)
        bool closing = false;  // a session-level reward came: forget it once nothing is in flight
        std::vector<std::string> cids;
    };
    std::unordered_map<std::string, Sess> sess;
    std::unordered_map<std::string, std::string> cid_session;
    traj::TrajectoryManager tm;  // routing: who served which prefix
    int64_t tm_tokens = 0, tm_resets = 0;
    Sends sends;
    int64_t served = 0, n_cancelled = 0, n_forgotten = 0;
    double next_expiry = 0;
    size_t rr = 0;  // round-robin start for new sessions
    bool stopped = false;
    double last_now = 0;  // the run clock at the last poll

    // A reward to the coordinator (kTagGwRec kind 2), after the records of its requests.
    void forward_reward(const gateway::RewardReport& r, double now) {
        sends.send(gw::reward_record(r, now), cfg.coordinator, kTagGwRec, cfg.comm);
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
            sends.send(gw::request_record(l.req.session, l.req.completion_id, tr, code), cfg.coordinator, kTagGwRec,
                       cfg.comm);
            ++served;
        }
        l.sink->finish(f);
    }
};

namespace {

// POST /v1/profile {"ranks": "0,1" | "all" | [0, 1], "steps": N, "shapes": true, "memory": false}
// -> 202 {"id", "ranks", "steps", "status_url"}; GET /v1/profile/ID -> 200 {"id", "done", "ranks":
// [{"rank", "status": pending|done|failed, ...}]}. The same request file and result records as
// `tagflow profile` (profile/profile_request.hpp). Only the gateway's I/O thread calls it.
std::function<gateway::ProfileAnswer(const std::string&, const std::string&)> profile_endpoint(const std::string& out) {
    using nlohmann::json;
    auto asked = std::make_shared<std::deque<std::pair<std::string, std::vector<int>>>>();
    return [out, asked](const std::string& id, const std::string& body) -> gateway::ProfileAnswer {
        gateway::ProfileAnswer a;
        auto fail = [&](int status, const std::string& why) {
            a.status = status;
            a.error = why;
            return a;
        };
        if (!id.empty()) {  // GET /v1/profile/ID
            auto it = std::find_if(asked->begin(), asked->end(), [&](const auto& q) { return q.first == id; });
            if (it == asked->end())
                return fail(404, "No profile request '" + id.substr(0, 64) + "' was made through this gateway");
            json ranks = json::array();
            bool done = true;
            for (const profile::ProfileResult& r : profile::read_profile_results(out, id, it->second)) {
                json j{{"rank", r.rank}, {"status", r.status}};
                if (r.status == "done") {
                    j["trace"] = std::string(profile::kProfilesDir) + "/" + r.trace;
                    j["first_step"] = r.first_step;
                    j["last_step"] = r.last_step;
                    j["events"] = r.events;
                }
                if (!r.reason.empty()) j["reason"] = r.reason;
                done = done && r.status != "pending";
                ranks.push_back(std::move(j));
            }
            a.body = json{{"id", id}, {"done", done}, {"ranks", std::move(ranks)}}.dump();
            return a;
        }
        const json b = json::parse(body, nullptr, false);
        if (b.is_discarded() || !b.is_object()) return fail(400, "The body must be a JSON object");
        for (const auto& kv : b.items())
            if (kv.key() != "ranks" && kv.key() != "steps" && kv.key() != "shapes" && kv.key() != "memory")
                return fail(400, "Unknown field '" + kv.key().substr(0, 64) + "' (ranks, steps, shapes, memory)");
        std::string ranks;
        if (b.contains("ranks") && b["ranks"].is_string()) {
            ranks = b["ranks"].get<std::string>();
        } else if (b.contains("ranks") && b["ranks"].is_array() && !b["ranks"].empty()) {
            for (const json& r : b["ranks"]) {
                if (!r.is_number_unsigned() || r.get<uint64_t>() > 1000000)
                    return fail(400, "\"ranks\" must be \"all\", a list like \"0,2-3\" or an array of rank numbers");
                ranks += (ranks.empty() ? "" : ",") + std::to_string(r.get<uint64_t>());
            }
        } else {
            return fail(400, "\"ranks\" must be \"all\", a list like \"0,2-3\" or an array of rank numbers");
        }
        if (!b.contains("steps") || !b["steps"].is_number_integer())
            return fail(400, "\"steps\" must be an integer in [1, " + std::to_string(profile::kProfileMaxSteps) + "]");
        for (const char* k : {"shapes", "memory"})
            if (b.contains(k) && !b[k].is_boolean())
                return fail(400, std::string("\"") + k + "\" must be true or false");
        profile::ProfileRequest req;
        try {
            req = profile::submit_profile_request(out, ranks, b["steps"].get<int64_t>(), b.value("shapes", true),
                                                  b.value("memory", false));
        } catch (const Error& e) {
            return fail(400, e.what());
        }
        asked->emplace_back(req.id, req.ranks);
        if (asked->size() > 64) asked->pop_front();
        a.status = 202;
        a.body =
            json{{"id", req.id}, {"ranks", req.ranks}, {"steps", req.steps}, {"status_url", "/v1/profile/" + req.id}}
                .dump();
        return a;
    };
}

}  // namespace

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
    sc.status_file = cfg.out + "/status.json";  // GET /v1/status: the live status record (health/status.hpp)
    sc.profile = profile_endpoint(cfg.out);
    std::filesystem::create_directories(cfg.out);
    // A restarted job (resume) finds the last job's files: the URL goes first, so a client that
    // reads gateway.url and then gateway.token never pairs the new URL with the old token.
    std::error_code ec;
    std::filesystem::remove(cfg.out + "/gateway.url", ec);
    gateway::write_token_file(cfg.out + "/gateway.token", sc.token);
    m.server = std::make_unique<gateway::Server>(sc, std::make_shared<QueueBackend>(m.inbox),
                                                 cfg.tokenizer ? cfg.tokenizer : text::byte_level_tokenizer());
    m.server->start();
    const bool v6 = cfg.host.find(':') != std::string::npos;
    const std::string url =
        "http://" + (v6 ? "[" + cfg.host + "]" : cfg.host) + ":" + std::to_string(m.server->port()) + "/v1";
    // Appears complete (a random temporary renamed into place), never through a planted link.
    write_file_replace(cfg.out + "/gateway.url", url + "\n");
    std::printf("gateway: rank %d listening on %s (token in %s/gateway.token%s)\n", cfg.me, url.c_str(),
                cfg.out.c_str(), is_loopback(cfg.host) ? "" : "; reachable from other hosts");
    std::fflush(stdout);
}

GatewayRouter::~GatewayRouter() {
    try {
        stop();
    } catch (...) {}
}

int GatewayRouter::port() const { return impl_->server ? impl_->server->port() : 0; }
int64_t GatewayRouter::served() const { return impl_->served; }
int64_t GatewayRouter::cancelled() const { return impl_->n_cancelled; }
int64_t GatewayRouter::live_sessions() const { return static_cast<int64_t>(impl_->sess.size()); }

void GatewayRouter::poll(rollout::InferenceEngine& engine, double now, int32_t version) {
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
    while (try_recv(m.cfg.comm, MPI_ANY_SOURCE, kTagGwTok, b)) {}
    std::printf(
        "gateway: %lld requests served, %lld cancelled (client went away); sessions: %lld forgotten, "
        "%lld live; routing tree reset %lld times\n",
        static_cast<long long>(m.served), static_cast<long long>(m.n_cancelled), static_cast<long long>(m.n_forgotten),
        static_cast<long long>(m.sess.size()), static_cast<long long>(m.tm_resets));
    std::fflush(stdout);
}

}  // namespace tagflow::sched
