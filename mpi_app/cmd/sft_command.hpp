// SPDX-License-Identifier: Apache-2.0
// sft_command: `tagflow sft` — supervised warm start of a Llama-family policy on a task's
// reference solutions (cross-entropy on the response tokens only), data-parallel over
// MPI_COMM_WORLD, with a greedy held-out exact-match evaluation before and after, written
// as a Hugging Face checkpoint directory. Also the small greedy decoder it evaluates with.
// Does not do RL (`tagflow train`) and does not sample (rollout/ does).
#pragma once
#include <cstdint>
#include <vector>

#include "step/greedy_score.hpp"

namespace tagflow::model {
class LlamaModelImpl;
}
namespace tagflow::rollout {
class Task;
}

namespace tagflow::cmd {

/// Runs `tagflow sft` (argv[0] = "sft"). Returns the exit code (0; `--help` also 0). Bad
/// usage throws ConfigError on every rank before anything is written; later errors throw
/// other exceptions (main() aborts the job on them).
int sft_command(int argc, char** argv);

/// Greedy (argmax) continuation of each prompt with the model's KV cache: at most
/// `max_tokens` tokens per prompt, a row stops after `eos`. Prompts of equal length are
/// decoded together, at most `batch_size` rows at a time. No autograd. Local (not collective).
std::vector<std::vector<int32_t>> greedy_decode(model::LlamaModelImpl& model,
                                                const std::vector<std::vector<int32_t>>& prompts, int32_t max_tokens,
                                                int32_t eos, int64_t batch_size = 256);

/// Greedy held-out scores on eval prompts `indices` (local, not collective): how many
/// responses equal the task's solution up to EOS, and the sum of their rewards.
sched::GreedyScore score_greedy(model::LlamaModelImpl& model, const rollout::Task& task,
                                const std::vector<int64_t>& indices);

}  // namespace tagflow::cmd
