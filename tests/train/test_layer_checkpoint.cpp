// SPDX-License-Identifier: Apache-2.0
// Activation checkpointing (model/layer_checkpoint.hpp, --activation-checkpointing): the actor's
// and the critic's accumulated gradients, padded and packed, fp32 and bf16 autocast, equal those
// without it; the model's plain forward gives the same logits and parameter gradients; nothing is
// recomputed or kept where no graph is recorded (a frozen forward under NoGradGuard).
#include <gtest/gtest.h>

#include "model/layer_checkpoint.hpp"
#include "model/llama.hpp"
#include "model/value_model.hpp"
#include "tiny.hpp"
#include "train/torch_engine.hpp"
#include "train/workers.hpp"

namespace tagflow::train {
namespace {
using namespace testing;

TrainEngineConfig cfg(bool pack, bool bf16) {
    TrainEngineConfig e;
    e.micro_batch = 3;
    e.optim.lr = 1e-2;
    e.pack = pack;
    e.bf16 = bf16;
    return e;
}

ActorWorker actor(bool ckpt, const TrainEngineConfig& ec) {
    model::LlamaModel m(tiny_config(), 5);
    m->model->activation_checkpointing = ckpt;
    ActorConfig ac;
    ac.entropy_coef = 0.01;  // the entropy term goes through the recomputed layers too
    return ActorWorker(make_engine(policy_handle(m), ec), ac);
}

// The mechanism itself: the layer runs once in the forward and once more in the backward, and the
// gradients of its input and of a weight it uses are those of the plain call.
TEST(LayerCheckpoint, RecomputesInTheBackward) {
    int calls = 0;
    const torch::Tensor w = torch::linspace(-0.5, 0.5, 4).requires_grad_(true);
    const model::LayerFn f = [&calls, w](const torch::Tensor& x) {
        ++calls;
        return (x * w).tanh() + x;
    };
    torch::Tensor x0 = torch::linspace(-1, 1, 12).reshape({3, 4}).requires_grad_(true);
    (model::run_layer(false, f, x0 * 2).pow(2).sum()).backward();
    EXPECT_EQ(calls, 1);
    const torch::Tensor gx = x0.grad().clone(), gw = w.grad().clone();
    x0.grad().zero_();
    w.grad().zero_();
    const torch::Tensor y = model::run_layer(true, f, x0 * 2);
    EXPECT_EQ(calls, 2);  // the forward
    y.pow(2).sum().backward();
    EXPECT_EQ(calls, 3);  // the recompute in the backward
    EXPECT_LT((x0.grad() - gx).abs().max().item<double>(), 1e-7);
    EXPECT_LT((w.grad() - gw).abs().max().item<double>(), 1e-7);
    {
        torch::NoGradGuard ng;  // no graph: run once, no recompute
        model::run_layer(true, f, x0 * 2);
    }
    EXPECT_EQ(calls, 4);
}

TEST(LayerCheckpoint, ActorGradientsEqualWithout) {
    const auto batch = tiny_batch(7);
    const BatchCounts g = count_batch(batch);
    for (bool pack : {false, true})
        for (bool bf16 : {false, true}) {
            ActorWorker plain = actor(false, cfg(pack, bf16)), ckpt = actor(true, cfg(pack, bf16));
            const ActorStats a = plain.accumulate(batch, g), b = ckpt.accumulate(batch, g);
            const double d = max_abs_diff(ckpt.engine().gradients(), plain.engine().gradients());
            EXPECT_LT(d, 1e-6) << "pack " << pack << " bf16 " << bf16;
            EXPECT_NEAR(a.loss, b.loss, 1e-6);
            double norm = 0;
            for (const auto& t : ckpt.engine().gradients()) norm += t.abs().sum().item<double>();
            EXPECT_GT(norm, 0.0) << "the gradients are there at all";
        }
}

TEST(LayerCheckpoint, CriticGradientsEqualWithout) {
    const auto batch = tiny_batch(6);
    const BatchCounts g = count_batch(batch);
    for (bool pack : {false, true}) {
        model::ValueModel a(tiny_config(), 6), b(tiny_config(), 6);
        b->model->activation_checkpointing = true;
        CriticConfig cc;
        cc.clip_range = 0.0;
        CriticWorker plain(make_engine(value_handle(a), cfg(pack, false)), cc);
        CriticWorker ckpt(make_engine(value_handle(b), cfg(pack, false)), cc);
        plain.accumulate(batch, g);
        ckpt.accumulate(batch, g);
        EXPECT_LT(max_abs_diff(ckpt.engine().gradients(), plain.engine().gradients()), 1e-6) << "pack " << pack;
    }
}

TEST(LayerCheckpoint, ModelForwardSameLogitsAndGradients) {
    model::LlamaModel a(tiny_config(), 8), b(tiny_config(), 8);
    b->model->activation_checkpointing = true;
    const torch::Tensor tokens = torch::tensor({{1, 4, 2, 7, 3, 9}, {5, 0, 6, 2, 8, 1}}, torch::kLong);
    const torch::Tensor la = a->forward(tokens), lb = b->forward(tokens);
    EXPECT_LT((la - lb).abs().max().item<double>(), 1e-6);
    const torch::Tensor w = torch::linspace(-1, 1, la.numel()).reshape(la.sizes());  // a loss that uses every logit
    (la * w).sum().backward();
    (lb * w).sum().backward();
    std::vector<torch::Tensor> ga, gb;
    for (const auto& p : a->parameters()) ga.push_back(p.grad());
    for (const auto& p : b->parameters()) gb.push_back(p.grad());
    ASSERT_EQ(ga.size(), gb.size());
    for (size_t i = 0; i < ga.size(); ++i) ASSERT_TRUE(gb[i].defined()) << "parameter " << i << " got no gradient";
    EXPECT_LT(max_abs_diff(ga, gb), 1e-6);
    // No graph recorded: the layers run once, as they are.
    torch::NoGradGuard ng;
    const torch::Tensor lc = b->forward(tokens);
    EXPECT_FALSE(lc.requires_grad());
    EXPECT_LT((lc - la).abs().max().item<double>(), 1e-6);
}

}  // namespace
}  // namespace tagflow::train
