// SPDX-License-Identifier: Apache-2.0
// torch_engine: the LibTorch backend of train::TrainEngine — fp32 master weights on one device
// (CPU here; any CUDA device in a CUDA LibTorch build, with no CUDA header needed), optional
// bf16 autocast for the forward, AdamW with decay/no-decay groups, global-norm clipping, and
// save/load through torch's archives. Data parallelism is the caller's Collectives (gradients
// SUMmed). With TrainEngineConfig::shard the AdamW state is split over the group given to
// set_group (ZeRO stage 1 or 2, FlatAdamW on this rank's share); the parameters stay whole.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include <torch/optim/adamw.h>

#include "train/engine.hpp"
#include "train/flat_adamw.hpp"

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
    void set_group(Collectives* group) override;
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
    bool sharded() const override { return flat_ != nullptr; }
    std::pair<int64_t, int64_t> shard_range() const override {
        return flat_ ? std::make_pair(lo_, hi_) : std::make_pair(int64_t{0}, numel_);
    }
    void save_optim_shard(std::ostream& out) const override;
    void load_optim_shards(const std::vector<std::string>& paths) override;

private:
    void require_trainable(const char* what) const;
    double clip_whole_gradients();  // norm of the (summed) whole gradients, clipped in place
    double sharded_step();
    // An unsharded engine's torch AdamW state <- whole-vector moments m, v (read from shard files).
    void set_torch_moments(int64_t steps, const torch::Tensor& m, const torch::Tensor& v);
    ModelHandle model_;
    TrainEngineConfig cfg_;
    torch::Device device_;
    bool trainable_ = false;
    std::unique_ptr<torch::optim::AdamW> opt_;  // Shard::kOff
    int64_t step_ = 0;
    // Sharded (flat_ set): this rank's share [lo_, hi_) of the flat vector of layout_.
    std::vector<FlatRange> layout_;
    int64_t numel_ = 0, lo_ = 0, hi_ = 0;
    Collectives* group_ = nullptr;
    std::unique_ptr<FlatAdamW> flat_;
    torch::Tensor shard_grad_;      // Shard::kGradients after a reduce-scatter: the share's summed gradients
    bool moments_pending_ = false;  // load() of a sharded checkpoint: load_optim_shards() must follow
};

}  // namespace tagflow::train
