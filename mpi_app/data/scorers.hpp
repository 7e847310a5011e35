// SPDX-License-Identifier: Apache-2.0
// scorers: the built-in rule rewards, with veRL's signature (data_source, solution_str,
// ground_truth, extra_info) -> float, chosen with `builtin:NAME` or by data_source (veRL's
// default_compute_score table, for the sources a rule can score):
//   exact  1 when the solution, trimmed, equals the ground truth, trimmed; else 0.
//   gsm8k  veRL's gsm8k.compute_score (method "strict"): the last "#### <number>" of the final
//          300 characters, commas and $ removed, compared as a string; 1 or 0.
//   math   the final answer — the last \boxed{...} (nested braces; also veRL's "\boxed x" and
//          \fbox{...}), else the text after the last "####", else the last number — equal to the
//          ground truth (itself taken from a \boxed{} or "####" when it has one) after veRL's
//          math.strip_string normalisation, or as a number: integers, decimals, "1,000", a/b,
//          \frac{a}{b} (\dfrac, \tfrac), a trailing %, compared exactly as fractions. Whatever
//          veRL's math.compute_score scores 1 scores 1 here (for a boxed answer); more is accepted.
// A ground truth that is a list is matched by any of its items; a missing one (null) is a
// ConfigError. Pure functions, thread-safe. Does NOT: run Python or URLs (mpi_app/reward).
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace tagflow::data {

using ScoreFn = double (*)(std::string_view data_source, std::string_view solution,
                           const nlohmann::ordered_json& ground_truth, const nlohmann::ordered_json& extra_info);

struct BuiltinScorer {
    const char* name;
    ScoreFn fn;
    const char* what;
};

/// Every built-in scorer, in the order `--help` lists them.
const std::vector<BuiltinScorer>& builtin_scorers();
/// The scorer NAME (ConfigError listing the names for an unknown one).
ScoreFn builtin_scorer(std::string_view name);
/// A `--reward` value: "builtin:NAME". ConfigError for anything else.
ScoreFn parse_reward_spec(std::string_view spec);
/// The scorer veRL's default table gives `data_source` ("openai/gsm8k" -> gsm8k, the MATH sets ->
/// math), or nullptr.
ScoreFn default_scorer(std::string_view data_source);
/// The name of a scorer `fn` ("" if not built in).
std::string scorer_name(ScoreFn fn);

// ---- building blocks (tests, and the reward layer's per-sample records) ----

/// veRL gsm8k extract_solution(method="strict"): nullopt when there is no "#### <number>".
std::optional<std::string> gsm8k_strict_answer(std::string_view solution);
/// veRL math.last_boxed_only_string + remove_boxed: the content of the last \boxed{...}.
std::optional<std::string> last_boxed(std::string_view s);
/// The final answer as `math` reads it (boxed, then ####, then the last number).
std::optional<std::string> math_answer(std::string_view solution);
/// veRL math.compute_score(solution_str, ground_truth): 1 when the content of the last \boxed{}
/// (remove_boxed: \fbox and malformed boxes give 0) is_equiv the ground truth, else 0.
double verl_math_score(std::string_view solution, std::string_view ground_truth);
/// veRL math.is_equiv (strip_string on both, string compare; raw compare where it throws).
bool verl_math_equiv(std::string_view a, std::string_view b);
/// An exact fraction num/den (den > 0, reduced) for a numeric answer, else nullopt.
std::optional<std::pair<long long, long long>> parse_number(std::string_view s);
/// `math`'s equivalence of two answers (verl_math_equiv, or equal numbers).
bool math_equiv(std::string_view answer, std::string_view truth);

}  // namespace tagflow::data
