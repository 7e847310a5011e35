// SPDX-License-Identifier: Apache-2.0
// flat_adamw: AdamW on one rank's shard of the flat fp32 parameter vector, the building block of
// sharded optimiser state (ZeRO stage 1 and 2, issue 22 point 2): each train rank keeps the two
// moments of its shard only and steps it; the parameters are then all-gathered. The arithmetic
// is torch::optim::AdamW's, op for op (decoupled decay first, then the moments, the bias
// corrections and addcdiv), so a shard steps exactly as the same elements do in the replicated
// optimiser (tests/train/test_flat_adamw.cpp checks it against torch's AdamW).
// The flat vector is the parameters in the model's parameters() order, each flattened; decay
// applies to matrices only (dim >= 2), as in TorchEngine.
// Does not: communicate (the caller reduce-scatters gradients and all-gathers parameters), clip
// gradients (the caller scales them by the global norm first), or save files (state() and
// set_state() give the shard's tensors to the checkpoint code).
#pragma once
#include <torch/types.h>

#include <cstdint>
#include <vector>

#include "train/engine.hpp"

namespace tagflow::train {

/// A run of the flat vector [begin, end) belonging to one parameter, decayed or not.
struct FlatRange {
    int64_t begin = 0, end = 0;
    bool decay = false;
};

/// The flat layout of `params` (in order): one range per parameter, decay for dim >= 2.
std::vector<FlatRange> flat_layout(const std::vector<torch::Tensor>& params);

/// Rank r's share [lo, hi) of n elements split over `ranks` ranks as evenly as can be (the first
/// n % ranks ranks hold one more). Throws InternalError on ranks < 1 or r out of range.
std::pair<int64_t, int64_t> shard_bounds(int64_t n, int ranks, int r);

/// `layout` cut to [lo, hi) and shifted to start at 0 (the ranges a shard's optimiser needs).
std::vector<FlatRange> shard_layout(const std::vector<FlatRange>& layout, int64_t lo, int64_t hi);

class FlatAdamW {
public:
    /// `ranges` cover the shard [0, n) in order (shard_layout). Moments start at zero.
    FlatAdamW(std::vector<FlatRange> ranges, const OptimConfig& o);

    /// One step on the shard: `params` and `grads` are 1-D fp32 of the shard's length;
    /// `params` is updated in place.
    void step(torch::Tensor& params, const torch::Tensor& grads);
    void set_lr(double lr) { o_.lr = lr; }
    double lr() const { return o_.lr; }
    int64_t steps() const { return step_; }
    int64_t size() const { return n_; }

    /// The shard's optimiser state (for checkpoints) and its restore (same length as size()).
    const torch::Tensor& exp_avg() const { return m_; }
    const torch::Tensor& exp_avg_sq() const { return v_; }
    void set_state(int64_t steps, const torch::Tensor& exp_avg, const torch::Tensor& exp_avg_sq);

private:
    std::vector<FlatRange> ranges_;
    OptimConfig o_;
    int64_t n_ = 0, step_ = 0;
    torch::Tensor m_, v_;
};

}  // namespace tagflow::train
