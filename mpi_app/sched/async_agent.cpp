// SPDX-License-Identifier: Apache-2.0
// async_agent: multi-turn sessions (agent loops) on the generating ranks, interleaved in the
// engine's batch; a finished session becomes one sample (sched/agent_rollout.hpp).
// Part of the async scheduler (sched/async_scheduler_impl.hpp).
#include "sched/async_scheduler_impl.hpp"

namespace tagflow::sched::async {

void AsyncScheduler::setup_agent_sessions() {
    const rollout::AgentLoop* loop = rollout::as_agent_loop(*task_);
    if (!loop) return;
    rollout::AgentRunConfig cfg;
    cfg.temperature = opt_.temperature;
    cfg.top_p = opt_.top_p;
    cfg.top_k = opt_.top_k;
    cfg.stop_ids = {task_->eos_token()};
    cfg.max_session_tokens = task_->max_prompt_tokens() + max_new_;
    cfg.rank = me_;
    cfg.clock = [this] { return clock_.now(); };
    agent_ = std::make_unique<rollout::AgentSessions>(*loop, cfg);
}

void AsyncScheduler::start_session(const rollout::GenRequest& rq) {
    rollout::AgentJob job;
    job.id = rq.id;
    job.prompt = rq.prompt;
    job.seed = rq.params.seed;
    agent_->start(*engine_, rq.id, job);
}

void AsyncScheduler::agent_turn(const rollout::GenResult& g, std::vector<RolloutSample>& out) {
    agent_done_.clear();
    agent_->on_result(*engine_, g, agent_done_);
    for (const rollout::AgentResult& a : agent_done_) {
        auto it = groups_of_.find(a.id);
        if (it == groups_of_.end()) throw InternalError("agent session " + std::to_string(a.id) + " has no group");
        out.push_back(agent_sample(a, it->second, me_, clock_.now(), version_));
        groups_of_.erase(it);
    }
}

}  // namespace tagflow::sched::async
