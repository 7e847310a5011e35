// SPDX-License-Identifier: Apache-2.0
// torch_engine: the LibTorch backend of train::TrainEngine — fp32 master weights on one device
// (CPU here; any CUDA device in a CUDA LibTorch build, with no CUDA header needed), optional
// bf16 autocast for the forward, AdamW with decay/no-decay groups, global-norm clipping, and
// save/load through torch's archives. Data parallelism is the caller's Collectives (gradients
// SUMmed); this class holds no communicator and does not shard parameters or optimiser state.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include <torch/optim/adamw.h>

#include "train/engine.hpp"

namespace tagflow::train {

class TorchEngine final : public TrainEngine {
public:
    /// Moves `model.module` to cfg.device; trainable: zero gradients + AdamW, else frozen
    /// (requires_grad off). Throws ConfigError on a bad config or device string.
    TorchEngine(ModelHandle model, const TrainEngineConfig& cfg);

    std::string backend() const override { return "torch"; }
    torch::Device device() const override { return device_; }
    const TrainEngineConfig& config() const override { return cfg_; }
    torch::nn::Module& module() override { return *model_.module; }

    torch::Tensor forward(const torch::Tensor& tokens) override;
    double forward_backward(const std::vector<TrainSeq>& batch, const LossFn& fn, bool train = true,
                            bool rows_only = false) override;
    void backward(const torch::Tensor& loss) override;
    SyncStats allreduce_grads(Collectives* comm) override;
    double step() override;
    void zero_grad() override;
    void set_lr(double lr) override;
    double lr() const override { return cfg_.optim.lr; }
    int64_t global_step() const override { return step_; }
    std::vector<torch::Tensor> parameters() const override;
    std::vector<torch::Tensor> gradients() const override;
    void save(std::ostream& out) const override;
    void load(std::istream& in) override;

private:
    void require_trainable(const char* what) const;
    ModelHandle model_;
    TrainEngineConfig cfg_;
    torch::Device device_;
    std::unique_ptr<torch::optim::AdamW> opt_;
    int64_t step_ = 0;
};

}  // namespace tagflow::train
