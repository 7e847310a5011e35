// SPDX-License-Identifier: Apache-2.0
// agent_loop: the multi-turn session runner on one InferenceEngine (see agent_loop.hpp). Each session
// owns its flat columns; a model turn is one engine request whose prompt is the whole session
// so far and whose id is the session's (AgentSessions: the caller's request id; run_agent_sessions:
// the job's index), so the engine's callback finds the session,
// asks the loop, and either finishes it or resubmits the continuation (the engine allows
// submit() from the callback; the new request is admitted into the next free slot while the
// other sessions keep decoding). Does not train or write files.
#include "rollout/agent_loop.hpp"

#include <algorithm>
#include <limits>
#include <string>
#include <unordered_map>
#include <utility>

#include "common/error.hpp"
#include "rollout/engine.hpp"
#include "rollout/sampling.hpp"

namespace tagflow::rollout {

const char* agent_finish_name(AgentFinish f) {
    switch (f) {
        case AgentFinish::kDone: return "done";
        case AgentFinish::kLength: return "length";
        case AgentFinish::kTurns: return "turns";
    }
    return "?";
}

namespace {

struct Live {
    int64_t job_id = 0;
    AgentSession s;
    std::vector<float> logprobs;
    std::vector<int32_t> versions;
    uint64_t seed = 0;
    int64_t env_tokens = 0;
    double t_submit = 0;
    traj::NodeId traj = -1;
    bool hit_eos = false;
};

}  // namespace

struct AgentSessions::Impl {
    Impl(const AgentLoop& l, AgentRunConfig c, traj::TrajectoryManager* t) : loop(l), cfg(std::move(c)), tm(t) {}
    const AgentLoop& loop;
    AgentRunConfig cfg;
    traj::TrajectoryManager* tm;
    int32_t max_turns = 0;
    std::vector<int32_t> stops;              // cfg.stop_ids + the loop's turn stop tokens
    std::unordered_map<int64_t, Live> live;  // engine request id -> session

    double now() const { return cfg.clock ? cfg.clock() : 0.0; }

    // Queues the next model turn of session `id` (the whole session is the prompt).
    void submit(InferenceEngine& engine, int64_t id, Live& L) {
        GenRequest rq;
        rq.id = id;
        rq.prompt = L.s.tokens;
        rq.params.temperature = cfg.temperature;
        rq.params.top_p = cfg.top_p;
        rq.params.top_k = cfg.top_k;
        int64_t budget = static_cast<int64_t>(cfg.max_session_tokens) - static_cast<int64_t>(L.s.tokens.size());
        if (cfg.max_turn_tokens > 0) budget = std::min<int64_t>(budget, cfg.max_turn_tokens);
        rq.params.max_tokens = static_cast<int32_t>(budget);
        rq.params.stop_ids = stops;
        rq.params.seed = derive_seed(L.seed, static_cast<uint64_t>(L.s.turns));
        L.t_submit = now();
        engine.submit(std::move(rq));
    }

    void finish(int64_t id, AgentFinish why, std::vector<AgentResult>& done) {
        auto node = live.extract(id);
        Live& L = node.mapped();
        AgentResult r;
        r.id = L.job_id;
        r.prompt_len = static_cast<int32_t>(L.s.prompt.size());
        r.reward = loop.reward(L.s);
        r.finish = why;
        r.hit_eos = L.hit_eos;
        r.turns = L.s.turns;
        r.env_tokens = L.env_tokens;
        r.traj = L.traj;
        r.tokens = std::move(L.s.tokens);
        r.loss_mask = std::move(L.s.loss_mask);
        r.logprobs = std::move(L.logprobs);
        r.versions = std::move(L.versions);
        done.push_back(std::move(r));
    }
};

AgentSessions::AgentSessions(const AgentLoop& loop, AgentRunConfig cfg, traj::TrajectoryManager* tm)
    : impl_(std::make_unique<Impl>(loop, std::move(cfg), tm)) {
    Impl& m = *impl_;
    m.max_turns = m.cfg.max_turns > 0 ? m.cfg.max_turns : loop.max_turns();
    if (m.max_turns < 1) throw Error("agent sessions: max_turns must be at least 1");
    m.stops = m.cfg.stop_ids;
    for (int32_t t : loop.turn_stop_tokens())
        if (std::find(m.stops.begin(), m.stops.end(), t) == m.stops.end()) m.stops.push_back(t);
}

AgentSessions::~AgentSessions() = default;

bool AgentSessions::owns(int64_t request_id) const { return impl_->live.count(request_id) > 0; }
size_t AgentSessions::live() const { return impl_->live.size(); }

void AgentSessions::start(InferenceEngine& engine, int64_t request_id, const AgentJob& j) {
    Impl& m = *impl_;
    if (j.prompt.empty()) throw Error("agent session " + std::to_string(j.id) + " has an empty prompt");
    if (static_cast<int64_t>(j.prompt.size()) >= m.cfg.max_session_tokens)
        throw Error("agent session " + std::to_string(j.id) + "'s prompt of " + std::to_string(j.prompt.size()) +
                    " tokens leaves no room in max_session_tokens " + std::to_string(m.cfg.max_session_tokens));
    if (m.live.count(request_id))
        throw Error("agent session " + std::to_string(j.id) + ": request id " + std::to_string(request_id) +
                    " is already a live session's");
    Live& L = m.live[request_id];
    L.job_id = j.id;
    L.s.prompt = j.prompt;
    L.s.tokens = j.prompt;
    L.s.loss_mask.assign(j.prompt.size(), 0);
    L.logprobs.assign(j.prompt.size(), std::numeric_limits<float>::quiet_NaN());
    L.versions.assign(j.prompt.size(), -1);
    L.seed = j.seed;
    m.submit(engine, request_id, L);
}

bool AgentSessions::on_result(InferenceEngine& engine, const GenResult& g, std::vector<AgentResult>& done) {
    Impl& m = *impl_;
    auto it = m.live.find(g.id);
    if (it == m.live.end()) return false;
    Live& L = it->second;
    const AgentRunConfig& cfg = m.cfg;
    if (m.tm) {
        traj::Request tr;
        tr.input = L.s.tokens;
        tr.output = g.response;
        tr.logprobs = g.logprobs;
        tr.versions = g.versions;
        tr.rank = cfg.rank;
        tr.t_start = L.t_submit;
        tr.t_end = m.now();
        L.traj = m.tm->insert(tr).traj;
    }
    L.s.turn_begin = L.s.tokens.size();
    L.s.tokens.insert(L.s.tokens.end(), g.response.begin(), g.response.end());
    L.s.loss_mask.insert(L.s.loss_mask.end(), g.response.size(), 1);
    L.logprobs.insert(L.logprobs.end(), g.logprobs.begin(), g.logprobs.end());
    L.versions.insert(L.versions.end(), g.versions.begin(), g.versions.end());
    L.s.turns += 1;
    L.s.turn_stopped = g.finish == FinishReason::kStop;
    L.hit_eos = L.s.turn_stopped && !g.response.empty() &&
                std::find(cfg.stop_ids.begin(), cfg.stop_ids.end(), g.response.back()) != cfg.stop_ids.end();
    AgentAction a = m.loop.on_turn(L.s);
    if (a.done) {
        m.finish(g.id, L.s.turn_stopped ? AgentFinish::kDone : AgentFinish::kLength, done);
        return true;
    }
    if (L.s.turns >= m.max_turns) {
        m.finish(g.id, AgentFinish::kTurns, done);
        return true;
    }
    // The environment tokens plus at least one model token must fit in the budget.
    if (static_cast<int64_t>(L.s.tokens.size() + a.env_tokens.size()) >= cfg.max_session_tokens) {
        m.finish(g.id, AgentFinish::kLength, done);
        return true;
    }
    L.s.tokens.insert(L.s.tokens.end(), a.env_tokens.begin(), a.env_tokens.end());
    L.s.loss_mask.insert(L.s.loss_mask.end(), a.env_tokens.size(), 0);
    L.logprobs.insert(L.logprobs.end(), a.env_tokens.size(), std::numeric_limits<float>::quiet_NaN());
    L.versions.insert(L.versions.end(), a.env_tokens.size(), -1);
    L.env_tokens += static_cast<int64_t>(a.env_tokens.size());
    m.submit(engine, g.id, L);
    return true;
}

std::vector<AgentResult> run_agent_sessions(InferenceEngine& engine, const AgentLoop& loop,
                                            const std::vector<AgentJob>& jobs, const AgentRunConfig& cfg,
                                            traj::TrajectoryManager* tm) {
    if (engine.active() != 0 || engine.waiting() != 0)
        throw Error("run_agent_sessions: the engine is busy (" + std::to_string(engine.active() + engine.waiting()) +
                    " requests queued or in flight)");
    const int32_t max_turns = cfg.max_turns > 0 ? cfg.max_turns : loop.max_turns();
    if (max_turns < 1) throw Error("run_agent_sessions: max_turns must be at least 1");
    // Validated up front so a bad job leaves nothing queued.
    for (const AgentJob& j : jobs) {
        if (j.prompt.empty()) throw Error("run_agent_sessions: job " + std::to_string(j.id) + " has an empty prompt");
        if (static_cast<int64_t>(j.prompt.size()) >= cfg.max_session_tokens)
            throw Error("run_agent_sessions: job " + std::to_string(j.id) + "'s prompt of " +
                        std::to_string(j.prompt.size()) + " tokens leaves no room in max_session_tokens " +
                        std::to_string(cfg.max_session_tokens));
    }
    AgentSessions sessions(loop, cfg, tm);
    // The engine request id of job i is i, so results land in job order.
    for (size_t i = 0; i < jobs.size(); ++i) sessions.start(engine, static_cast<int64_t>(i), jobs[i]);
    std::vector<AgentResult> out(jobs.size());
    std::vector<AgentResult> done;
    while (engine.step([&](const GenResult& g) {
        done.clear();
        if (sessions.on_result(engine, g, done) && !done.empty())
            out[static_cast<size_t>(g.id)] = std::move(done.back());
    })) {}
    return out;
}

AgentEval evaluate_agent(InferenceEngine& engine, const Task& task, const AgentLoop& loop, int64_t n_prompts,
                         int64_t first) {
    AgentEval ev;
    if (n_prompts <= 0) return ev;
    std::vector<AgentJob> jobs(static_cast<size_t>(n_prompts));
    for (int64_t k = 0; k < n_prompts; ++k) {
        jobs[static_cast<size_t>(k)].id = first + k;
        jobs[static_cast<size_t>(k)].prompt = task.eval_prompt(first + k);
    }
    AgentRunConfig cfg;
    cfg.temperature = 0.0;
    cfg.stop_ids = {task.eos_token()};
    cfg.max_session_tokens = task.max_prompt_tokens() + task.max_response_tokens();
    const std::vector<AgentResult> res = run_agent_sessions(engine, loop, jobs, cfg);
    for (const AgentResult& r : res) {
        ev.reward_mean += r.reward;
        ev.solved += r.reward >= 1.0f ? 1.0 : 0.0;
        ev.turns_mean += r.turns;
        ev.env_tokens_mean += static_cast<double>(r.env_tokens);
    }
    const auto n = static_cast<double>(res.size());
    ev.reward_mean /= n;
    ev.solved /= n;
    ev.turns_mean /= n;
    ev.env_tokens_mean /= n;
    ev.n = static_cast<int64_t>(res.size());
    return ev;
}

}  // namespace tagflow::rollout
