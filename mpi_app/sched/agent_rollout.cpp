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

std::vector<RolloutSample> generate_agent_samples(rollout::InferenceEngine& engine, const rollout::Task& task,
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
        out[i] = agent_sample(res[i], groups[i], rank, clock ? clock() : 0.0, version);
        out[i].version = version;  // sync: every model token is this step's
        leaf[out[i].id] = res[i].traj;
    }
    return out;
}

RolloutSample agent_sample(const rollout::AgentResult& a, int64_t group, int32_t rank, double t_done,
                           int32_t version_if_none) {
    RolloutSample r;
    const auto P = static_cast<std::ptrdiff_t>(a.prompt_len);
    r.id = a.id;
    r.group = group;
    r.rank = rank;
    r.reward = a.reward;
    r.hit_eos = a.hit_eos;
    r.t_done = t_done;
    r.prompt.assign(a.tokens.begin(), a.tokens.begin() + P);
    r.response.assign(a.tokens.begin() + P, a.tokens.end());
    r.loss_mask.assign(a.loss_mask.begin() + P, a.loss_mask.end());
    r.versions.assign(a.versions.begin() + P, a.versions.end());
    r.logprobs.resize(r.response.size());
    int32_t oldest = -1;
    for (size_t t = 0; t < r.response.size(); ++t) {
        const bool model = r.loss_mask[t] != 0;
        r.logprobs[t] = model ? a.logprobs[static_cast<size_t>(P) + t] : 0.0f;
        if (!model) r.versions[t] = -1;
        else if (oldest < 0 || r.versions[t] < oldest) oldest = r.versions[t];
    }
    r.version = oldest >= 0 ? oldest : version_if_none;
    return r;
}

double evaluate_agent_task(rollout::InferenceEngine& engine, const rollout::Task& task, const rollout::AgentLoop& loop,
                           int64_t n) {
    return rollout::evaluate_agent(engine, task, loop, n).reward_mean;
}

GreedyScore score_agent_greedy(model::LlamaModelImpl& model, const rollout::Task& task, const rollout::AgentLoop& loop,
                               const std::vector<int64_t>& indices) {
    GreedyScore sc;
    if (indices.empty()) return sc;
    rollout::InferenceConfig ec;
    ec.max_batch = 256;
    rollout::InferenceEngine engine(
        model::LlamaModel(std::static_pointer_cast<model::LlamaModelImpl>(model.shared_from_this())), ec);
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
