// SPDX-License-Identifier: Apache-2.0
// flat_adamw: see flat_adamw.hpp.
#include "train/flat_adamw.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "common/error.hpp"

namespace tagflow::train {

std::vector<FlatRange> flat_layout(const std::vector<torch::Tensor>& params) {
    std::vector<FlatRange> out;
    int64_t at = 0;
    for (const torch::Tensor& p : params) {
        out.push_back({at, at + p.numel(), p.dim() >= 2});
        at += p.numel();
    }
    return out;
}

std::pair<int64_t, int64_t> shard_bounds(int64_t n, int ranks, int r) {
    if (ranks < 1 || r < 0 || r >= ranks || n < 0)
        throw InternalError("shard_bounds: rank " + std::to_string(r) + " of " + std::to_string(ranks));
    const int64_t base = n / ranks, extra = n % ranks;
    const int64_t lo = r * base + std::min<int64_t>(r, extra);
    return {lo, lo + base + (r < extra ? 1 : 0)};
}

std::vector<FlatRange> shard_layout(const std::vector<FlatRange>& layout, int64_t lo, int64_t hi) {
    std::vector<FlatRange> out;
    for (const FlatRange& f : layout) {
        const int64_t b = std::max(f.begin, lo), e = std::min(f.end, hi);
        if (b < e) out.push_back({b - lo, e - lo, f.decay});
    }
    return out;
}

FlatAdamW::FlatAdamW(std::vector<FlatRange> ranges, const OptimConfig& o) : ranges_(std::move(ranges)), o_(o) {
    int64_t at = 0;
    for (const FlatRange& f : ranges_) {
        if (f.begin != at || f.end < f.begin)
            throw InternalError("FlatAdamW: the ranges do not cover the shard in order");
        at = f.end;
    }
    n_ = at;
    m_ = torch::zeros({n_}, torch::kFloat32);
    v_ = torch::zeros({n_}, torch::kFloat32);
}

void FlatAdamW::step(torch::Tensor& params, const torch::Tensor& grads) {
    if (params.numel() != n_ || grads.numel() != n_ || params.dim() != 1 || grads.dim() != 1)
        throw InternalError("FlatAdamW::step: " + std::to_string(params.numel()) + " parameters and " +
                            std::to_string(grads.numel()) + " gradients for a shard of " + std::to_string(n_));
    torch::NoGradGuard ng;
    // torch::optim::AdamW, in its order: decoupled decay (matrices only), the moments, the bias
    // corrections, then p -= lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps).
    if (o_.weight_decay != 0)
        for (const FlatRange& f : ranges_)
            if (f.decay) params.narrow(0, f.begin, f.end - f.begin).mul_(1 - o_.lr * o_.weight_decay);
    ++step_;
    const double bc1 = 1 - std::pow(o_.beta1, static_cast<double>(step_));
    const double bc2 = 1 - std::pow(o_.beta2, static_cast<double>(step_));
    m_.mul_(o_.beta1).add_(grads, 1 - o_.beta1);
    v_.mul_(o_.beta2).addcmul_(grads, grads, 1 - o_.beta2);
    const torch::Tensor denom = v_.sqrt().div_(std::sqrt(bc2)).add_(o_.eps);  // one temporary of the shard's size
    params.addcdiv_(m_, denom, -(o_.lr / bc1));
}

void FlatAdamW::set_state(int64_t steps, const torch::Tensor& exp_avg, const torch::Tensor& exp_avg_sq) {
    if (steps < 0 || exp_avg.numel() != n_ || exp_avg_sq.numel() != n_)
        throw Error("optimiser shard: " + std::to_string(exp_avg.numel()) + " moments for a shard of " +
                    std::to_string(n_));
    step_ = steps;
    m_ = exp_avg.to(torch::kFloat32).reshape({n_}).clone();
    v_ = exp_avg_sq.to(torch::kFloat32).reshape({n_}).clone();
}

}  // namespace tagflow::train
