// SPDX-License-Identifier: Apache-2.0
// agent_rollout: the sync scheduler's rollout for multi-turn tasks (a Task that is also a
// rollout::AgentLoop): one step's sessions run through rollout::run_agent_sessions on the
// rank's InferenceEngine, every model turn recorded in the step's trajectory manager, and come back as
// RolloutSamples whose response is everything after the prompt (model turns and tool output)
// with a per-token loss_mask (0 on tool/environment tokens, which the trainer leaves out of
// the loss). agent_sample, the session -> sample conversion, is shared with the async
// scheduler (whose rollout ranks run sessions with rollout::AgentSessions). Does not exchange
// samples, train or write the run file (the scheduler does).
#pragma once
#include <cstdint>
#include <functional>
#include <unordered_map>
#include <vector>

#include "step/greedy_score.hpp"
#include "sched/sample.hpp"
#include "traj/trajectory_manager.hpp"

namespace tagflow::config {
struct Options;
}
namespace tagflow::model {
class LlamaModelImpl;
}
namespace tagflow::rollout {
class InferenceEngine;
class Task;
class AgentLoop;
struct AgentResult;
}  // namespace tagflow::rollout

namespace tagflow::sched {

/// Sessions for prompts[i] (prompt group groups[i]; sample id groups[i] * G + i % G with
/// G = opt.group_size, random stream derive_seed(opt.seed, id), like single-turn samples) at
/// policy version `version`, sampled with opt's temperature/top_p/top_k; session budget
/// task.max_prompt_tokens() + max_new_tokens. Inserts every model request into `tm` and
/// sets leaf[id] to each session's trajectory.
std::vector<RolloutSample> generate_agent_samples(rollout::InferenceEngine& engine, const rollout::Task& task,
                                                  const rollout::AgentLoop& loop, const config::Options& opt,
                                                  const std::vector<std::vector<int32_t>>& prompts,
                                                  const std::vector<int64_t>& groups, int32_t max_new_tokens,
                                                  int32_t version, int32_t rank, const std::function<double()>& clock,
                                                  traj::TrajectoryManager& tm,
                                                  std::unordered_map<int64_t, traj::NodeId>& leaf);

/// A finished session as a sample (sync and async modes alike): response = everything after
/// the prompt (model turns and environment tokens), loss_mask 0 on environment tokens, logprobs
/// 0 there (masked out by the trainer) and versions -1 there; `version` = the oldest model
/// token's version (the sample's staleness), `version_if_none` when no model token exists.
RolloutSample agent_sample(const rollout::AgentResult& a, int64_t group, int32_t rank, double t_done,
                           int32_t version_if_none);

/// Held-out greedy score of a multi-turn task on eval prompts [0, n) (mean reward).
double evaluate_agent_task(rollout::InferenceEngine& engine, const rollout::Task& task, const rollout::AgentLoop& loop,
                           int64_t n);

/// `tagflow sft`'s held-out score for a multi-turn task: greedy sessions on eval prompts
/// `indices` with a fresh InferenceEngine on `model` (which must be owned by a shared_ptr); exact =
/// sessions with reward 1. Local, not collective.
GreedyScore score_agent_greedy(model::LlamaModelImpl& model, const rollout::Task& task, const rollout::AgentLoop& loop,
                               const std::vector<int64_t>& indices);

}  // namespace tagflow::sched
