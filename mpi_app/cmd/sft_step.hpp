// SPDX-License-Identifier: Apache-2.0
// sft_step: one optimizer step of `tagflow sft` and what it trains on. A batch is the rank's share
// of the step's sequences, padded, with a mask of the positions whose next token is a response
// token; the loss is the summed cross-entropy there; the gradients and the token count travel in
// one bucketed all-reduce and the gradients are divided by the global token count, so every rank
// applies the same AdamW update. A step whose loss or gradient norm is NaN/inf is skipped on every
// rank alike, and --max-bad-steps of them in a row stop the run (BadSteps).
// Does NOT: choose the rows (sft_command.cpp, sft_data.cpp), evaluate, or write anything.
#pragma once
#include <cstdint>
#include <vector>

#include <torch/optim/adamw.h>
#include <torch/torch.h>

#include "cmd/sft_data.hpp"

namespace tagflow::model {
class LlamaModelImpl;
}
namespace tagflow::rollout {
class Task;
}
namespace tagflow::train {
class MpiCollectives;
}

namespace tagflow::cmd {

/// One step's local share of the batch as a padded [b, T] token tensor plus a [b, T-1] mask of
/// the positions whose *next* token is a response token.
struct Batch {
    torch::Tensor tokens, mask;
    int64_t response_tokens = 0;
};

/// Pads `seqs` with `pad` into a Batch; the loss covers the tokens after each prompt (those whose
/// `resp_mask` entry is 0 excepted, when given: a multi-turn demonstration's tool tokens).
Batch pack(const std::vector<SftSeq>& seqs, const std::vector<std::vector<uint8_t>>* resp_mask, int32_t pad);

/// This rank's share (every size-th) of the task's training prompts first .. first+count-1 with
/// their reference solutions.
Batch make_batch(const rollout::Task& task, int64_t first, int64_t count, int rank, int size);

/// The logits [N, V] of the positions where `mask` [B, T] is 1, for tokens [B, T]: the decoder as
/// LlamaModelImpl::forward runs it, but the output projection only on those positions.
torch::Tensor masked_logits(model::LlamaModelImpl& m, const torch::Tensor& tokens, const torch::Tensor& mask);

struct SftStep {
    double loss_sum = 0, tokens = 0;  // over every rank
    bool skipped = false;             // the loss or the gradient norm was NaN/inf: no update
};

/// Tests only: TAGFLOW_TEST_SFT_NAN_STEPS="3,4" makes rank 0's loss NaN at those (1-based) steps,
/// so the all-reduced gradients are NaN on every rank (Hostile.sft_nan).
bool test_poisoned(int64_t step, int rank);

/// One optimizer step on this rank's share `b` (COLLECTIVE over MPI_COMM_WORLD). `only_masked`:
/// the projection on the response positions only (masked_logits). `poison`: tests.
SftStep sft_step(model::LlamaModelImpl& m, torch::optim::AdamW& opt, train::MpiCollectives& coll,
                 std::vector<at::Tensor>& params, const Batch& b, double lr, double grad_clip, bool only_masked,
                 bool poison);

/// The model's parameters, the same on every rank, and the torch threads of this rank.
struct SharedWeights {
    int threads = 1;
    std::vector<at::Tensor> params;
    int64_t n_params = 0;
};

/// COLLECTIVE over `coll`'s communicator: sets this rank's torch threads (`requested`, or 0 = the
/// cores of its node shared among the node's ranks), broadcasts rank 0's weights into every rank's
/// model (whatever their source) and bumps the version counters MPI wrote behind.
SharedWeights share_weights(model::LlamaModelImpl& m, train::MpiCollectives& coll, int requested);

/// Counts consecutive skipped steps; throws tagflow::Error (exit 1, OUT/model not written) after
/// `limit` of them in a row (0 = never).
struct BadSteps {
    int32_t limit = 3, run = 0;
    int64_t total = 0;
    void record(bool skipped, int64_t step);
};

}  // namespace tagflow::cmd
