// SPDX-License-Identifier: Apache-2.0
// task_builtin: internal to the tagflow_task library — the factories of the built-in tasks
// that live in their own files (task_addition.cpp, task_longtail.cpp) and the helpers they
// share with task.cpp (the digit tokens, a base class for tasks whose reference answer is a
// function of the prompt, counter-based hashing, per-position reward, exact best constant).
// Not a public header: users build tasks through make_task() (task.hpp).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "rollout/task.hpp"

namespace tagflow::rollout::detail {

/// splitmix64: a good 64-bit mixer; counter-based, so prompt i never depends on prompt i-1.
inline uint64_t mix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/// A uniform double in [0, 1) from a 64-bit hash (its top 53 bits).
inline double unit_double(uint64_t h) { return static_cast<double>(h >> 11) * 0x1.0p-53; }

/// Tokens of the digit tasks (reverse, sort, addition, longtail): 0..9 are the digits, then these
/// three; a task's own operator token (if any) is kDigitOp. (Prefixed: `calc` has its own kBos/kEos
/// in a namespace it pulls into detail with a using-directive, which these would silently hide.)
constexpr int32_t kDigitBos = 10;  // rendered '^'
constexpr int32_t kDigitSep = 11;  // rendered '='
constexpr int32_t kDigitEos = 12;  // rendered '$'
constexpr int32_t kDigitOp = 13;

/// A digit task whose reference answer is a function of the prompt: solution() is answer() + EOS,
/// render() spells digits, '^', '=', '$', `op_char` for kDigitOp (when the task has one) and '?' else.
class DigitAnswerTask : public Task {
public:
    explicit DigitAnswerTask(char op_char = 0) : op_char_(op_char) {}
    int32_t vocab_size() const override { return op_char_ ? kDigitOp + 1 : kDigitOp; }
    int32_t eos_token() const override { return kDigitEos; }
    std::vector<int32_t> solution(const std::vector<int32_t>& prompt) const override;
    std::string render(const std::vector<int32_t>& tokens) const override;

protected:
    /// The reference answer to `prompt`: digit tokens, no EOS.
    virtual std::vector<int32_t> answer(const std::vector<int32_t>& prompt) const = 0;
    /// answer(eval_prompt(i)) for i in [0, n_eval).
    std::vector<std::vector<int32_t>> eval_answers(int64_t n_eval) const;

private:
    char op_char_;
};

/// The tokens of `response` before its first `eos` (all of it if there is none).
std::vector<int32_t> before_eos(const std::vector<int32_t>& response, int32_t eos);

/// Matching positions / max(|target|, |answer|) (1 when both are empty).
float positional_credit(const std::vector<int32_t>& target, const std::vector<int32_t>& answer);

/// The best mean positional_credit() one fixed response of digit tokens 0..9 reaches over
/// `targets` (digit strings, no EOS), trying every length 0..max_len. Exact: given the
/// length L, positions are independent, so the best digit per position is the one with
/// the largest count weighted by 1 / max(|target|, L).
float best_constant_positional(const std::vector<std::vector<int32_t>>& targets, int32_t max_len);

std::unique_ptr<Task> make_addition_task(uint64_t seed, const TaskParams& params);
std::unique_ptr<Task> make_longtail_task(uint64_t seed, const TaskParams& params);
std::unique_ptr<Task> make_calc_task(uint64_t seed, const TaskParams& params);  // task_calc.cpp

}  // namespace tagflow::rollout::detail
