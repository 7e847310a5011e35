// SPDX-License-Identifier: Apache-2.0
// task_calc: the vocabulary and the calculator of the built-in multi-turn task `calc`
// (task_calc.cpp; documented in share/doc/tasks.md). Exposed for tests and for users who want
// to read or build calc sessions. Pure C++, no LibTorch. Does not hold the task itself (use
// make_task("calc", ...)).
//
// Session: `^1234*56+7?<calc>1234*56+7</calc>=69111|69111$`
//   prompt `^ EXPR ?`; the model calls the tool with `<calc>EXPR</calc>` (the turn ends at
//   `</calc>`); the environment appends `=VALUE|` (or `=error|` for a malformed call); the
//   model writes VALUE and EOS `$`.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tagflow::rollout::calc {

// Token ids: 0..9 are the digits.
inline constexpr int32_t kPlus = 10;   // '+'
inline constexpr int32_t kMinus = 11;  // '-' (also the sign of a negative value)
inline constexpr int32_t kTimes = 12;  // '*'
inline constexpr int32_t kBos = 13;    // '^'
inline constexpr int32_t kAsk = 14;    // '?' ends the prompt
inline constexpr int32_t kCall = 15;   // "<calc>" opens a tool call
inline constexpr int32_t kEnd = 16;    // "</calc>" closes it (ends the model's turn)
inline constexpr int32_t kRes = 17;    // '=' starts the tool's output (environment)
inline constexpr int32_t kErr = 18;    // "error": the tool's output for a malformed call
inline constexpr int32_t kTerm = 19;   // '|' ends the tool's output
inline constexpr int32_t kEos = 20;    // '$'
inline constexpr int32_t kVocab = 21;

/// Longest tool call the calculator accepts (tokens between <calc> and </calc>).
inline constexpr size_t kMaxCallTokens = 48;
/// Longest number in a call (digits); longer ones are malformed.
inline constexpr size_t kMaxNumberDigits = 12;

/// The calculator: `tokens` must be NUMBER (OP NUMBER)* with OP in + - * (usual precedence,
/// left to right), at most kMaxCallTokens tokens, numbers of 1..kMaxNumberDigits digits.
/// nullopt for anything else (other tokens, empty, a leading/trailing/double operator, too
/// long) or when the value overflows int64.
std::optional<int64_t> evaluate(const std::vector<int32_t>& tokens);

/// The tool's output for a call's content: `=VALUE|` or `=error|`.
std::vector<int32_t> tool_output(const std::vector<int32_t>& call);

/// Decimal digits of v (most significant first, `-` first when negative).
std::vector<int32_t> number_tokens(int64_t v);

/// Text <-> tokens with the spellings above (`<calc>`, `</calc>`, `error` are one token each).
/// encode() throws tagflow::Error on a character it does not know.
std::string render(const std::vector<int32_t>& tokens);
std::vector<int32_t> encode(const std::string& text);

}  // namespace tagflow::rollout::calc
