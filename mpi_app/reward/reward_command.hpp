// SPDX-License-Identifier: Apache-2.0
// reward_command: `tagflow reward` — score JSON Lines samples from stdin with --reward-fn or
// --reward-url and write one JSON line per sample to stdout (share/doc/rewards.md).
// Does not: tokenize, generate or read data sets (the samples carry solution_str already).
#pragma once

namespace tagflow::reward {

/// argv[0] is "reward". Returns 0, 1 (a reward failed under --reward-error fail) or 2 (bad
/// usage, bad input line, bad reward file); bad input is found before anything is scored.
int reward_command(int argc, char** argv);

}  // namespace tagflow::reward
