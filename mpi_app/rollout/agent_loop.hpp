// SPDX-License-Identifier: Apache-2.0
// agent_loop: multi-turn rollout (veRL 0.7's AgentLoop, in C++). An AgentLoop is the rollout
// logic of one multi-turn task: after every model turn it looks at the session so far and
// either ends it or appends environment / tool tokens, after which the model continues. The
// runner (run_agent_sessions) drives many sessions at once on ONE rollout InferenceEngine with
// continuous batching: a session whose turn finished gets its environment tokens appended and
// is resubmitted as a continuation request whose prompt is the whole session so far, while
// the other sessions keep decoding. Every model request can go through a trajectory manager,
// so the turns of a session extend one path of the prefix tree and the sessions of a group
// branch from their shared prompt.
//
// Per session the runner gives the flat token sequence with the /samples conventions:
// loss_mask 1 exactly on model-sampled tokens (0 on the prompt and on environment tokens),
// logprobs NaN and versions -1 where the mask is 0, plus the loss's reward, finish reason and
// the number of model turns.
//
// Writing a multi-turn task: derive one class from both Task (task.hpp: prompts, held-out set,
// reward of a whole continuation, solution) and AgentLoop (this file); `tagflow train`
// (every mode) and `tagflow sft` find the loop with as_agent_loop(task). share/doc/tasks.md
// has a worked example; task_calc.cpp is the built-in one.
//
// Does not train, tokenize or do MPI; the runner is single-threaded like the InferenceEngine.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "rollout/task.hpp"
#include "traj/trajectory_manager.hpp"

namespace tagflow::rollout {

class InferenceEngine;
struct GenResult;

/// What ended a session.
enum class AgentFinish : uint8_t {
    kDone = 0,    ///< the loop said so (e.g. the model wrote its final answer and EOS)
    kLength = 1,  ///< the session's token budget ran out (a model turn hit it, or the
                  ///< environment tokens would not fit)
    kTurns = 2,   ///< the loop still wanted the model to continue after max_turns turns
};
/// "done" / "length" / "turns".
const char* agent_finish_name(AgentFinish f);

/// The session as the loop sees it after a model turn.
struct AgentSession {
    std::vector<int32_t> prompt;     ///< the task prompt
    std::vector<int32_t> tokens;     ///< prompt + every turn and environment token so far
    std::vector<uint8_t> loss_mask;  ///< one per token: 1 = sampled by the model
    int32_t turns = 0;               ///< model turns finished (the one just finished included)
    size_t turn_begin = 0;           ///< index in `tokens` of the last turn's first token
    bool turn_stopped = false;       ///< the last turn ended on a stop token (else: its length budget)
    /// The last model turn's tokens: tokens[turn_begin:].
    std::vector<int32_t> last_turn() const {
        return {tokens.begin() + static_cast<std::ptrdiff_t>(turn_begin), tokens.end()};
    }
};

/// The loop's decision after a model turn.
struct AgentAction {
    bool done = true;                 ///< end the session (its reward comes from AgentLoop::reward)
    std::vector<int32_t> env_tokens;  ///< !done: appended with loss_mask 0, then the model continues
    static AgentAction finish() { return {}; }
    static AgentAction append(std::vector<int32_t> env) { return {false, std::move(env)}; }
};

/// A supervised demonstration of one session (for `tagflow sft`): the tokens after the prompt
/// and whether each is the model's (1, trained) or the environment's (0, not trained).
struct AgentDemo {
    std::vector<int32_t> tokens;
    std::vector<uint8_t> loss_mask;
};

/// The multi-turn logic of a task. Implementations must be immutable after construction: the
/// runner calls them from one thread, but several runners may share one loop.
class AgentLoop {
public:
    virtual ~AgentLoop() = default;
    /// Tokens that end a model turn and hand control to the loop, in addition to the task's EOS
    /// (e.g. the token closing a tool call). A turn also ends when it reaches its length budget.
    virtual std::vector<int32_t> turn_stop_tokens() const = 0;
    /// Called after every model turn (also one that ended on EOS or on its length budget):
    /// end the session, or append environment tokens and let the model continue.
    virtual AgentAction on_turn(const AgentSession& session) const = 0;
    /// The session's reward in [0, 1], called once when it ended for any reason.
    virtual float reward(const AgentSession& session) const = 0;
    /// Most model turns per session (the runner stops with AgentFinish::kTurns after it).
    virtual int32_t max_turns() const { return 4; }
    /// The reference session for `prompt` (tokens after it, with the loss mask). The default
    /// throws tagflow::Error (a loop without demonstrations cannot be used by `tagflow sft`).
    /// (Inline, like the rest of this class, so tasks defining a loop need not link the runner.)
    virtual AgentDemo demonstration(const std::vector<int32_t>& /*prompt*/) const {
        throw Error("this agent loop has no demonstrations (AgentLoop::demonstration is not implemented)");
    }
};

/// The task's agent loop, or nullptr for a single-turn task (a Task that also derives from
/// AgentLoop is a multi-turn task).
inline const AgentLoop* as_agent_loop(const Task& task) { return dynamic_cast<const AgentLoop*>(&task); }

/// One session to run.
struct AgentJob {
    int64_t id = 0;               ///< the caller's id, copied into the result
    std::vector<int32_t> prompt;  ///< at least one token
    uint64_t seed = 0;            ///< turn t samples from the stream derive_seed(seed, t)
};

/// How the runner samples and bounds sessions.
struct AgentRunConfig {
    double temperature = 1.0;  ///< 0 = greedy
    double top_p = 1.0;
    int32_t top_k = 0;
    std::vector<int32_t> stop_ids;  ///< end a turn (the task's EOS); the loop's turn_stop_tokens() are added
    /// Whole-session budget: prompt + turns + environment tokens (at most the model's
    /// max_position_embeddings). Must exceed every prompt.
    int32_t max_session_tokens = 64;
    int32_t max_turn_tokens = 0;    ///< per model turn; 0 = only the session budget
    int32_t max_turns = 0;          ///< 0 = the loop's max_turns()
    int32_t rank = 0;               ///< recorded with each request in the trajectory manager
    std::function<double()> clock;  ///< request timestamps for the manager (empty: 0)
};

/// One finished session.
struct AgentResult {
    int64_t id = 0;
    int32_t prompt_len = 0;
    std::vector<int32_t> tokens;     ///< prompt + turns + environment tokens
    std::vector<uint8_t> loss_mask;  ///< 1 exactly on model-sampled tokens
    std::vector<float> logprobs;     ///< the engine's logprob on mask-1 tokens, NaN elsewhere
    std::vector<int32_t> versions;   ///< policy version on mask-1 tokens, -1 elsewhere
    float reward = 0;
    AgentFinish finish = AgentFinish::kDone;
    bool hit_eos = false;  ///< the last model turn ended on a stop_ids token
    int32_t turns = 0;
    int64_t env_tokens = 0;
    /// The last request's trajectory in the manager (its path is the whole session, since the
    /// last token is always the model's); -1 when run without a manager.
    traj::NodeId traj = -1;
};

/// Runs every job to the end on `engine` (which must be idle: nothing queued or in flight) and
/// returns the results in job order. Up to the engine's max_batch sessions decode together; a
/// finished turn's continuation is queued at once. Each model request is inserted into `tm`
/// when given (input = the session so far, output = the turn). Throws tagflow::Error on an
/// empty prompt, a prompt not shorter than max_session_tokens, or bad sampling parameters.
std::vector<AgentResult> run_agent_sessions(InferenceEngine& engine, const AgentLoop& loop,
                                            const std::vector<AgentJob>& jobs, const AgentRunConfig& cfg,
                                            traj::TrajectoryManager* tm = nullptr);

/// The runner in incremental form, for a caller that owns the engine loop (the async
/// scheduler: sessions share the engine with other requests, turn by turn, and may span a weight
/// update, so one session's model tokens can carry several versions). start() queues a session's
/// first turn; the caller steps the engine and hands every GenResult to on_result(), which
/// continues a session (its next turn is submitted at once, from the engine's callback) or
/// ends it. Columns, budgets, seeds and trajectory-manager records are run_agent_sessions'.
class AgentSessions {
public:
    /// Throws tagflow::Error when the turn limit (cfg.max_turns or the loop's) is below 1.
    AgentSessions(const AgentLoop& loop, AgentRunConfig cfg, traj::TrajectoryManager* tm = nullptr);
    ~AgentSessions();
    AgentSessions(const AgentSessions&) = delete;
    AgentSessions& operator=(const AgentSessions&) = delete;
    /// Queues session `job`'s first turn on `engine` under engine request id `request_id`
    /// (every turn of the session uses it; it must differ from every other request's id).
    /// Throws tagflow::Error (nothing queued) on an empty prompt, a prompt not shorter than
    /// max_session_tokens, or a request id already in use by a live session.
    void start(InferenceEngine& engine, int64_t request_id, const AgentJob& job);
    /// One finished engine request: false when it is no session's turn. Otherwise the turn
    /// joins its session, which either continues (next turn submitted to `engine`) or ends
    /// (its AgentResult appended to `done`). Call it from engine.step()'s callback.
    bool on_result(InferenceEngine& engine, const GenResult& g, std::vector<AgentResult>& done);
    bool owns(int64_t request_id) const;
    size_t live() const;  ///< sessions started and not ended

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

/// Held-out score of greedy sessions on eval prompts [first, first + n_prompts) of `task`.
struct AgentEval {
    double reward_mean = 0;
    double solved = 0;  ///< fraction with reward >= 1
    double turns_mean = 0;
    double env_tokens_mean = 0;  ///< environment tokens per session (0: the tool was never called)
    int64_t n = 0;
};
/// Greedy (temperature 0) sessions, session budget max_prompt_tokens + max_response_tokens.
AgentEval evaluate_agent(InferenceEngine& engine, const Task& task, const AgentLoop& loop, int64_t n_prompts,
                         int64_t first = 0);

}  // namespace tagflow::rollout
