// SPDX-License-Identifier: Apache-2.0
// task: the learnable tasks (prompt streams, held-out prompts, reward, rendering) and
// their factory. Pure C++, no LibTorch: rewards and prompt orders are unit-testable alone.
// Does not generate or train (see engine.hpp, step/rl_trainer.hpp).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace tagflow::rollout {

/// Knobs shared by the built-in tasks (each task reads the ones it needs, ignores the rest).
struct TaskParams {
    /// 0 = the task's default. `reverse`/`sort`: digits of a prompt (the longest, if
    /// min_digits is set; default 5). `addition`: digits of each addend (default 3).
    /// `longtail` ignores it.
    int32_t digits = 0;
    /// `reverse`/`sort`: 0 = every prompt has `digits` digits; otherwise lengths are drawn
    /// uniformly from [min_digits, digits].
    int32_t min_digits = 0;
    /// `addition`: reward = fraction of correct answer digits instead of exact match
    /// (exact match stays the accuracy metric of `tagflow sft`).
    bool partial_credit = false;
};

/// A task: a deterministic, seeded stream of training prompts, a disjoint held-out set
/// and a reward in [0, 1]. Token ids are in [0, vocab_size()). Implementations are
/// immutable after construction, so every method is safe to call from any thread.
class Task {
public:
    virtual ~Task() = default;
    virtual std::string name() const = 0;
    virtual int32_t vocab_size() const = 0;
    virtual int32_t eos_token() const = 0;
    virtual int32_t max_prompt_tokens() const = 0;
    /// Longest useful response, EOS included (a sensible SamplingParams::max_tokens).
    virtual int32_t max_response_tokens() const = 0;
    /// Training prompt number `index` of this task's prompt order (same seed+index =>
    /// same prompt on every rank and every run). Never a held-out prompt.
    virtual std::vector<int32_t> train_prompt(int64_t index) const = 0;
    /// Held-out prompt number `index`; disjoint from every training prompt.
    virtual std::vector<int32_t> eval_prompt(int64_t index) const = 0;
    /// Reward of `response` (EOS and anything after it ignored) for `prompt`, in [0, 1].
    virtual float reward(const std::vector<int32_t>& prompt, const std::vector<int32_t>& response) const = 0;
    /// The reference response to `prompt`, EOS included: reward(prompt, solution(prompt))
    /// is 1. Used for supervised warm starts (`tagflow sft`) and tests. The default throws
    /// tagflow::Error (a task without a reference answer cannot be used by `tagflow sft`).
    virtual std::vector<int32_t> solution(const std::vector<int32_t>& prompt) const;
    /// Human-readable text of a token sequence (prompt or response).
    virtual std::string render(const std::vector<int32_t>& tokens) const = 0;
    /// The best mean reward that one fixed response (the same for every prompt) achieves
    /// on eval prompts [0, n_eval): the "constant output" baseline a policy must beat.
    virtual float best_constant_score(int64_t n_eval) const = 0;
};

/// Builds a task from the run's seed and parameters; throws tagflow::ConfigError on bad params.
using TaskFactory = std::function<std::unique_ptr<Task>(uint64_t seed, const TaskParams& params)>;

/// Adds a task to the registry make_task() consults (built-ins: reverse, sort, addition,
/// longtail). Call it before
/// `tagflow train` builds its task, e.g. first thing in your own main(); see
/// share/doc/tasks.md. Throws tagflow::Error if the name is empty or already taken.
void register_task(const std::string& name, const std::string& description, TaskFactory factory);

/// Builds a task by name. Throws tagflow::ConfigError on an unknown name or bad params.
std::unique_ptr<Task> make_task(const std::string& name, uint64_t seed, const TaskParams& params = TaskParams{});
/// The names make_task() accepts, sorted.
std::vector<std::string> task_names();

/// Mean reward of responses drawn uniformly from the vocabulary (stopping at EOS, at most
/// max_response_tokens() tokens) on eval prompts [0, n_eval): the "random policy" score.
float random_policy_score(const Task& task, int64_t n_eval, uint64_t seed);

}  // namespace tagflow::rollout
