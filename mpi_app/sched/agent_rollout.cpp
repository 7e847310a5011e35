// SPDX-License-Identifier: Apache-2.0
// agent_rollout: multi-turn sessions -> RolloutSamples (see agent_rollout.hpp). Environment
// tokens carry logprob 0 in the sample (the trainer masks them out; NaN would poison the
// masked arithmetic); /samples gets its NaN/-1 columns from the trajectory manager.
#include "sched/agent_rollout.hpp"

#include "common/error.hpp"
#include "config/options.hpp"
#include "model/llama.hpp"
#include "rollout/agent_loop.hpp"
#include "rollout/engine.hpp"
#include "rollout/sampling.hpp"

namespace tagflow::sched {

std::vector<RolloutSample> generate_agent_samples(rollout::Engine& engine, const rollout::Task& task,
                                                  const rollout::AgentLoop& loop, const config::Options& opt,
                                                  const std::vector<std::vector<int32_t>>& prompts,
                                                  const std::vector<int64_t>& groups, int32_t max_new_tokens,
                                                  int32_t version, int32_t rank, const std::function<double()>& clock,
                                                  traj::TrajectoryManager& tm,
                                                  std::unordered_map<int64_t, traj::NodeId>& leaf) {
    const int64_t G = opt.group_size;
    std::vector<rollout::AgentJob> jobs(prompts.size());
    for (size_t i = 0; i < prompts.size(); ++i) {
        jobs[i].id = groups[i] * G + static_cast<int64_t>(i % static_cast<size_t>(G));
        jobs[i].prompt = prompts[i];
        jobs[i].seed = rollout::derive_seed(static_cast<uint64_t>(opt.seed), static_cast<uint64_t>(jobs[i].id));
    }
    rollout::AgentRunConfig cfg;
    cfg.temperature = opt.temperature;
    cfg.top_p = opt.top_p;
    cfg.top_k = opt.top_k;
    cfg.stop_ids = {task.eos_token()};
    cfg.max_session_tokens = task.max_prompt_tokens() + max_new_tokens;
    cfg.rank = rank;
    cfg.clock = clock;
    engine.set_policy_version(version);  // the tokens of this step carry its version
    std::vector<rollout::AgentResult> res = rollout::run_agent_sessions(engine, loop, jobs, cfg, &tm);
    std::vector<RolloutSample> out(res.size());
    for (size_t i = 0; i < res.size(); ++i) {
        rollout::AgentResult& a = res[i];
        RolloutSample& r = out[i];
        const auto P = static_cast<size_t>(a.prompt_len);
        r.id = a.id;
        r.group = groups[i];
        r.rank = rank;
        r.version = version;
        r.reward = a.reward;
        r.hit_eos = a.hit_eos;
        r.t_done = clock ? clock() : 0.0;
        r.prompt.assign(a.tokens.begin(), a.tokens.begin() + static_cast<std::ptrdiff_t>(P));
        r.response.assign(a.tokens.begin() + static_cast<std::ptrdiff_t>(P), a.tokens.end());
        r.loss_mask.assign(a.loss_mask.begin() + static_cast<std::ptrdiff_t>(P), a.loss_mask.end());
        r.logprobs.resize(r.response.size());
        for (size_t t = 0; t < r.response.size(); ++t) r.logprobs[t] = r.loss_mask[t] ? a.logprobs[P + t] : 0.0f;
        leaf[r.id] = a.traj;
    }
    return out;
}

double evaluate_agent_task(rollout::Engine& engine, const rollout::Task& task, const rollout::AgentLoop& loop,
                           int64_t n) {
    return rollout::evaluate_agent(engine, task, loop, n).reward_mean;
}

GreedyScore score_agent_greedy(model::LlamaModelImpl& model, const rollout::Task& task, const rollout::AgentLoop& loop,
                               const std::vector<int64_t>& indices) {
    GreedyScore sc;
    if (indices.empty()) return sc;
    rollout::EngineConfig ec;
    ec.max_batch = 256;
    rollout::Engine engine(model::LlamaModel(std::static_pointer_cast<model::LlamaModelImpl>(model.shared_from_this())),
                           ec);
    std::vector<rollout::AgentJob> jobs(indices.size());
    for (size_t k = 0; k < indices.size(); ++k) {
        jobs[k].id = indices[k];
        jobs[k].prompt = task.eval_prompt(indices[k]);
    }
    rollout::AgentRunConfig cfg;
    cfg.temperature = 0.0;
    cfg.stop_ids = {task.eos_token()};
    cfg.max_session_tokens = task.max_prompt_tokens() + task.max_response_tokens();
    for (const rollout::AgentResult& r : rollout::run_agent_sessions(engine, loop, jobs, cfg)) {
        sc.exact += r.reward >= 1.0f ? 1 : 0;
        sc.reward_sum += r.reward;
        ++sc.n;
    }
    return sc;
}

}  // namespace tagflow::sched
