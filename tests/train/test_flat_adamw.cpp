// SPDX-License-Identifier: Apache-2.0
// train/flat_adamw: a model's parameters stepped by torch::optim::AdamW (decay and no-decay groups
// as TorchEngine builds them) and the same parameters flattened, cut into 1 to 4 uneven shards,
// each stepped by its own FlatAdamW, end equal after several steps with new gradients each and a
// learning-rate change: within 1e-6 (issue 22 point 2), bit for bit on this machine.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdio>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "train/flat_adamw.hpp"

using namespace tagflow;
using train::FlatAdamW;

namespace {
std::vector<torch::Tensor> make_params() {
    torch::manual_seed(7);
    // matrices (decay) and vectors (no decay), interleaved, so shard edges fall inside both kinds
    return {torch::randn({4, 5}), torch::randn({5}), torch::randn({3, 3}), torch::randn({7}), torch::randn({2, 6})};
}
torch::Tensor flat(const std::vector<torch::Tensor>& v) {
    std::vector<torch::Tensor> f;
    for (const auto& t : v) f.push_back(t.detach().reshape({-1}));
    return torch::cat(f);
}
}  // namespace

TEST(FlatAdamW, ShardBounds) {
    std::vector<std::pair<int64_t, int64_t>> got;
    for (int r = 0; r < 3; ++r) got.push_back(train::shard_bounds(10, 3, r));
    EXPECT_EQ(got, (std::vector<std::pair<int64_t, int64_t>>{{0, 4}, {4, 7}, {7, 10}}));
    EXPECT_EQ(train::shard_bounds(10, 1, 0), (std::pair<int64_t, int64_t>{0, 10}));
    EXPECT_EQ(train::shard_bounds(2, 3, 2), (std::pair<int64_t, int64_t>{2, 2}));  // an empty shard
    EXPECT_THROW(train::shard_bounds(10, 3, 3), InternalError);
    const std::vector<train::FlatRange> lay = {{0, 4, true}, {4, 6, false}, {6, 10, true}};
    const std::vector<train::FlatRange> s = train::shard_layout(lay, 3, 7);
    ASSERT_EQ(s.size(), 3u);
    EXPECT_TRUE(s[0].begin == 0 && s[0].end == 1 && s[0].decay);
    EXPECT_TRUE(s[1].begin == 1 && s[1].end == 3 && !s[1].decay);
    EXPECT_TRUE(s[2].begin == 3 && s[2].end == 4 && s[2].decay);
}

TEST(FlatAdamW, ShardsStepExactlyAsTorchAdamW) {
    train::OptimConfig o;
    o.lr = 3e-3;
    o.weight_decay = 0.1;
    std::vector<torch::Tensor> ref = make_params();
    const std::vector<train::FlatRange> layout = train::flat_layout(ref);
    const int64_t n = flat(ref).numel();
    std::vector<torch::Tensor> decay, no_decay;
    for (auto& p : ref) {
        p.set_requires_grad(true);
        (p.dim() >= 2 ? decay : no_decay).push_back(p);
    }
    auto opts = torch::optim::AdamWOptions(o.lr)
                    .betas(std::make_tuple(o.beta1, o.beta2))
                    .eps(o.eps)
                    .weight_decay(o.weight_decay);
    auto opts0 = opts;
    opts0.weight_decay(0.0);
    std::vector<torch::optim::OptimizerParamGroup> groups;
    groups.emplace_back(decay, std::make_unique<torch::optim::AdamWOptions>(opts));
    groups.emplace_back(no_decay, std::make_unique<torch::optim::AdamWOptions>(opts0));
    torch::optim::AdamW adamw(std::move(groups), opts);

    for (int ranks = 1; ranks <= 4; ++ranks) {
        // every shard layout starts from the same parameters as the reference did
        std::vector<torch::Tensor> shard_p;
        std::vector<FlatAdamW> opt;
        const torch::Tensor start = flat(make_params());
        for (int r = 0; r < ranks; ++r) {
            const auto [lo, hi] = train::shard_bounds(n, ranks, r);
            shard_p.push_back(start.narrow(0, lo, hi - lo).clone());
            opt.emplace_back(train::shard_layout(layout, lo, hi), o);
        }
        torch::manual_seed(11);
        std::vector<std::vector<torch::Tensor>> grads;
        for (int s = 0; s < 6; ++s) {
            std::vector<torch::Tensor> g;
            for (const auto& p : ref) g.push_back(torch::randn(p.sizes()));
            grads.push_back(g);
        }
        for (int s = 0; s < 6; ++s) {
            const double lr = s < 3 ? o.lr : 0.5 * o.lr;  // a schedule's change between steps
            const torch::Tensor g = flat(grads[static_cast<size_t>(s)]);
            for (int r = 0; r < ranks; ++r) {
                const auto [lo, hi] = train::shard_bounds(n, ranks, r);
                opt[static_cast<size_t>(r)].set_lr(lr);
                opt[static_cast<size_t>(r)].step(shard_p[static_cast<size_t>(r)], g.narrow(0, lo, hi - lo));
            }
            if (ranks == 1) {  // the reference, once
                for (auto& group : adamw.param_groups())
                    static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
                for (size_t k = 0; k < ref.size(); ++k) ref[k].mutable_grad() = grads[static_cast<size_t>(s)][k];
                adamw.step();
            }
        }
        const torch::Tensor got = torch::cat(shard_p), want = flat(ref);
        EXPECT_EQ(opt[0].steps(), 6);
        EXPECT_FALSE(torch::equal(got, start)) << "the parameters moved";
        // Bit for bit here (the same elementwise ops); the bound is 1e-6.
        const double diff = (got - want).abs().max().item<double>();
        printf("%d shard(s): max |diff| to torch's AdamW %.3g%s\n", ranks, diff,
               torch::equal(got, want) ? " (bit for bit)" : "");
        EXPECT_LE(diff, 1e-6) << ranks << " shard(s)";
    }
}

TEST(FlatAdamW, StateRoundTripAndBadSizes) {
    train::OptimConfig o;
    FlatAdamW a({{0, 3, true}, {3, 5, false}}, o);
    torch::Tensor p = torch::ones({5}), g = torch::full({5}, 0.5);
    a.step(p, g);
    FlatAdamW b({{0, 3, true}, {3, 5, false}}, o);
    b.set_state(a.steps(), a.exp_avg(), a.exp_avg_sq());
    torch::Tensor p1 = p.clone(), p2 = p.clone();
    a.step(p1, g);
    b.step(p2, g);
    EXPECT_TRUE(torch::equal(p1, p2)) << "a restored shard steps as the original";
    EXPECT_THROW(b.set_state(1, torch::zeros({4}), torch::zeros({5})), Error);
    torch::Tensor short_p = torch::ones({4});
    EXPECT_THROW(a.step(short_p, g), InternalError);
    EXPECT_THROW(FlatAdamW({{0, 3, true}, {4, 5, false}}, o), InternalError);  // a gap
}
