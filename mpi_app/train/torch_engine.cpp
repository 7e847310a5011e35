// SPDX-License-Identifier: Apache-2.0
// torch_engine: forward under autocast, micro-batched forward/backward, gradient all-reduce
// through Collectives, clipped AdamW, and archive save/load. See torch_engine.hpp.
#include "train/torch_engine.hpp"

#include <cerrno>
#include <cstring>

#include <cmath>
#include <istream>
#include <ostream>

#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include "common/error.hpp"
#include "model/hf_export.hpp"

namespace tagflow::train {
namespace {

// bf16 autocast for one scope, on the device's autocast flavour (thread-local ATen state).
class AutocastScope {
public:
    AutocastScope(bool on, const torch::Device& dev) : on_(on), cpu_(dev.is_cpu()) {
        if (!on_) return;
        if (cpu_) {
            prev_ = at::autocast::is_cpu_enabled();
            at::autocast::set_autocast_cpu_dtype(at::kBFloat16);
            at::autocast::set_cpu_enabled(true);
        } else {
            prev_ = at::autocast::is_enabled();
            at::autocast::set_autocast_gpu_dtype(at::kBFloat16);
            at::autocast::set_enabled(true);
        }
    }
    ~AutocastScope() {
        if (!on_) return;
        if (cpu_) at::autocast::set_cpu_enabled(prev_);
        else at::autocast::set_enabled(prev_);
    }
    AutocastScope(const AutocastScope&) = delete;
    AutocastScope& operator=(const AutocastScope&) = delete;

private:
    bool on_, cpu_, prev_ = false;
};

torch::Device parse_device(const std::string& s) {
    try {
        return torch::Device(s);
    } catch (const std::exception&) {
        throw ConfigError("engine: bad device '" + s + "' (e.g. cpu, cuda:0)");
    }
}

}  // namespace

TorchEngine::TorchEngine(ModelHandle model, const TrainEngineConfig& cfg)
    : model_(std::move(model)), cfg_(cfg), device_(parse_device(cfg.device)) {
    if (!model_.module || !model_.forward) throw ConfigError("engine: the " + model_.kind + " handle is empty");
    if (cfg.micro_batch < 1) throw ConfigError("engine: micro_batch must be >= 1");
    if (cfg.micro_batch_tokens < 0) throw ConfigError("engine: micro_batch_tokens must be >= 0");
    if (cfg.trainable && !(cfg.optim.lr >= 0.0)) throw ConfigError("engine: lr must be >= 0");
    model_.module->to(device_);
    torch::NoGradGuard no_grad;
    if (!cfg_.trainable) {
        for (auto& p : model_.module->parameters()) p.set_requires_grad(false);
        return;
    }
    std::vector<torch::Tensor> decay, no_decay;
    for (auto& p : model_.module->parameters()) {
        p.set_requires_grad(true);
        p.mutable_grad() = torch::zeros_like(p);
        (p.dim() >= 2 ? decay : no_decay).push_back(p);
    }
    const OptimConfig& o = cfg_.optim;
    auto opts = torch::optim::AdamWOptions(o.lr)
                    .betas(std::make_tuple(o.beta1, o.beta2))
                    .eps(o.eps)
                    .weight_decay(o.weight_decay);
    std::vector<torch::optim::OptimizerParamGroup> groups;
    groups.emplace_back(decay, std::make_unique<torch::optim::AdamWOptions>(opts));
    auto opts0 = opts;
    opts0.weight_decay(0.0);
    groups.emplace_back(no_decay, std::make_unique<torch::optim::AdamWOptions>(opts0));
    opt_ = std::make_unique<torch::optim::AdamW>(std::move(groups), opts);
}

void TorchEngine::require_trainable(const char* what) const {
    if (!opt_) throw Error(std::string("engine: ") + what + " on a frozen " + model_.kind + " engine");
}

torch::Tensor TorchEngine::forward(const torch::Tensor& tokens) {
    torch::Tensor out;
    {
        AutocastScope autocast(cfg_.bf16, device_);
        out = model_.forward(tokens.to(device_));
    }
    return out.to(torch::kFloat32);
}

double TorchEngine::forward_backward(const std::vector<TrainSeq>& batch, const LossFn& fn, bool train, bool rows_only) {
    if (train) require_trainable("forward_backward(train)");
    if (cfg_.pack && !model_.forward_packed)
        throw ConfigError("engine: packing needs a packed forward, and the " + model_.kind + " handle has none");
    rows_only = rows_only && (cfg_.pack || static_cast<bool>(model_.forward_rows));
    double total = 0.0;
    auto one = [&](const MicroBatch& mb) {
        auto run = [&] {
            torch::Tensor out;
            {
                AutocastScope autocast(cfg_.bf16, device_);
                const torch::Tensor rows = rows_only ? mb.mask.reshape({-1}).nonzero().squeeze(1) : torch::Tensor();
                if (mb.packed) out = model_.forward_packed(mb.inputs, mb.positions, mb.seq_id, rows);
                else if (rows_only) out = model_.forward_rows(mb.inputs, rows);
                else out = model_.forward(mb.inputs);
            }
            return fn(mb, out.to(torch::kFloat32));
        };
        if (!train) {
            torch::NoGradGuard no_grad;
            torch::Tensor loss = run();
            if (loss.defined()) total += loss.item<double>();
            return;
        }
        torch::Tensor loss = run();
        if (!loss.defined()) return;
        loss.backward();
        total += loss.item<double>();
    };
    if (cfg_.pack) {
        for (const PackPlan& plan : plan_packed_micro_batches(batch, cfg_.micro_batch, cfg_.micro_batch_tokens))
            one(pack_rows(batch, plan, device_));
    } else {
        for (const auto& [b, e] : split_micro_batches(batch, cfg_.micro_batch, cfg_.micro_batch_tokens))
            one(pack_micro_batch(batch, b, e, device_));
    }
    if (cfg_.bf16) at::autocast::clear_cache();
    return total;
}

void TorchEngine::backward(const torch::Tensor& loss) {
    require_trainable("backward");
    loss.backward();
}

SyncStats TorchEngine::allreduce_grads(Collectives* comm) {
    if (comm == nullptr || comm->size() == 1 || !opt_) return {};
    return comm->allreduce_sum(gradients());
}

double TorchEngine::step() {
    require_trainable("step");
    auto params = model_.module->parameters();
    double norm;
    if (cfg_.optim.grad_clip > 0.0) {
        norm = torch::nn::utils::clip_grad_norm_(params, cfg_.optim.grad_clip);
    } else {
        torch::NoGradGuard no_grad;
        double sq = 0.0;
        for (const auto& p : params) sq += p.grad().to(torch::kFloat64).pow(2).sum().item<double>();
        norm = std::sqrt(sq);
    }
    if (!std::isfinite(norm)) {
        // A NaN or inf gradient (a poisoned reward, an overflowing loss) never reaches the
        // weights or the AdamW moments: the update is dropped, the step counter stays. The
        // gradients were all-reduced first, so every rank of the group sees the same norm.
        zero_grad();
        return norm;
    }
    opt_->step();
    ++step_;
    zero_grad();
    return norm;
}

void TorchEngine::zero_grad() {
    if (!opt_) return;
    torch::NoGradGuard no_grad;
    for (auto& p : model_.module->parameters()) {
        if (p.grad().defined()) p.mutable_grad().zero_();
        else p.mutable_grad() = torch::zeros_like(p);
    }
}

void TorchEngine::set_lr(double lr) {
    require_trainable("set_lr");
    for (auto& group : opt_->param_groups()) static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
    cfg_.optim.lr = lr;
}

std::vector<torch::Tensor> TorchEngine::parameters() const { return model_.module->parameters(); }

std::vector<torch::Tensor> TorchEngine::gradients() const {
    std::vector<torch::Tensor> g;
    for (const auto& p : model_.module->parameters()) g.push_back(p.grad());
    return g;
}

void TorchEngine::save(std::ostream& out) const {
    model::check_finite(*model_.module, model_.kind);
    torch::serialize::OutputArchive ar;
    torch::serialize::OutputArchive model_ar;
    model_.module->save(model_ar);
    ar.write("model", model_ar);
    if (opt_) {
        torch::serialize::OutputArchive opt_ar;
        opt_->save(opt_ar);
        ar.write("optim", opt_ar);
    }
    ar.write("meta_step", c10::IValue(step_));
    ar.write("meta_lr", c10::IValue(cfg_.optim.lr));
    ar.write("meta_kind", c10::IValue(model_.kind));
    // LibTorch's archive writer must never see a short write: it throws, then throws again from
    // its destructor while unwinding (std::terminate, exit 134 on a full disk). The function takes
    // every byte, stops writing at the first failure and keeps its errno; the error is ours to throw.
    int err = 0;
    ar.save_to([&](const void* buf, size_t n) -> size_t {
        if (err == 0 && n > 0) {
            errno = 0;
            out.write(static_cast<const char*>(buf), static_cast<std::streamsize>(n));
            if (!out) err = errno != 0 ? errno : EIO;
        }
        return n;
    });
    if (err == 0 && !out.flush()) err = errno != 0 ? errno : EIO;
    if (err != 0) throw Error("engine: writing the " + model_.kind + " state failed: " + std::strerror(err));
}

void TorchEngine::load(std::istream& in) {
    try {
        torch::serialize::InputArchive ar;
        ar.load_from(in, device_);
        c10::IValue kind;
        ar.read("meta_kind", kind);
        if (kind.toStringRef() != model_.kind)
            throw Error("engine: state holds a " + kind.toStringRef() + ", this engine trains a " + model_.kind);
        torch::serialize::InputArchive model_ar;
        ar.read("model", model_ar);
        model_.module->load(model_ar);
        if (opt_) {
            torch::serialize::InputArchive opt_ar;
            if (!ar.try_read("optim", opt_ar)) throw Error("engine: state has no optimiser (saved by a frozen engine)");
            opt_->load(opt_ar);
        }
        c10::IValue step, lr;
        ar.read("meta_step", step);
        ar.read("meta_lr", lr);
        step_ = step.toInt();
        if (opt_) set_lr(lr.toDouble());
        else cfg_.optim.lr = lr.toDouble();
    } catch (const tagflow::Error&) {
        throw;
    } catch (const std::exception& e) {
        std::string what = e.what();
        throw Error("engine: cannot load " + model_.kind + " state: " + what.substr(0, what.find('\n')));
    }
    zero_grad();
}

std::unique_ptr<TrainEngine> make_engine(ModelHandle model, const TrainEngineConfig& cfg) {
    return std::make_unique<TorchEngine>(std::move(model), cfg);
}

}  // namespace tagflow::train
