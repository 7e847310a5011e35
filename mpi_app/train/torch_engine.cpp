// SPDX-License-Identifier: Apache-2.0
// torch_engine: forward under autocast, micro-batched forward/backward, gradient all-reduce
// through Collectives, clipped AdamW, and archive save/load. See torch_engine.hpp.
#include "train/torch_engine.hpp"

#include <cerrno>
#include <cstring>

#include <algorithm>
#include <cmath>
#include <fstream>
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

// Σ x² of a tensor in fp64, a million elements at a time: the fp64 copy of a whole shard (or of a
// 32k x 512 embedding's gradient) would be a temporary twice its size at the step's peak.
double sum_squares(const torch::Tensor& t) {
    const torch::Tensor flat = t.reshape({-1});
    constexpr int64_t kChunk = int64_t{1} << 20;
    double sq = 0.0;
    for (int64_t a = 0; a < flat.numel(); a += kChunk) {
        const torch::Tensor x = flat.narrow(0, a, std::min(kChunk, flat.numel() - a)).to(torch::kFloat64);
        sq += x.dot(x).item<double>();
    }
    return sq;
}

torch::Device parse_device(const std::string& s) {
    try {
        return torch::Device(s);
    } catch (const std::exception&) {
        throw ConfigError("engine: bad device '" + s + "' (e.g. cpu, cuda:0)");
    }
}

std::unique_ptr<torch::optim::AdamW> make_torch_adamw(const std::vector<torch::Tensor>& params, const OptimConfig& o) {
    std::vector<torch::Tensor> decay, no_decay;
    for (const auto& p : params) (p.dim() >= 2 ? decay : no_decay).push_back(p);
    auto opts = torch::optim::AdamWOptions(o.lr)
                    .betas(std::make_tuple(o.beta1, o.beta2))
                    .eps(o.eps)
                    .weight_decay(o.weight_decay);
    std::vector<torch::optim::OptimizerParamGroup> groups;
    groups.emplace_back(decay, std::make_unique<torch::optim::AdamWOptions>(opts));
    auto opts0 = opts;
    opts0.weight_decay(0.0);
    groups.emplace_back(no_decay, std::make_unique<torch::optim::AdamWOptions>(opts0));
    return std::make_unique<torch::optim::AdamW>(std::move(groups), opts);
}

std::string state_key(const torch::Tensor& p) { return c10::guts::to_string(p.unsafeGetTensorImpl()); }

// The overlap of [a, b) and [lo, hi), empty (first >= second) when they do not meet.
std::pair<int64_t, int64_t> overlap(int64_t a, int64_t b, int64_t lo, int64_t hi) {
    return {std::max(a, lo), std::min(b, hi)};
}

// out (b - a elements) <- [a, b) of the flat vector of `ts` (laid out as `layout`); an undefined
// tensor (a gradient never computed or freed) reads as zeros.
void gather_range(const std::vector<torch::Tensor>& ts, const std::vector<FlatRange>& layout, int64_t a, int64_t b,
                  const torch::Tensor& out) {
    for (size_t i = 0; i < ts.size(); ++i) {
        const auto [x, y] = overlap(layout[i].begin, layout[i].end, a, b);
        if (x >= y) continue;
        torch::Tensor dst = out.narrow(0, x - a, y - x);
        if (ts[i].defined()) dst.copy_(ts[i].detach().reshape({-1}).narrow(0, x - layout[i].begin, y - x));
        else dst.zero_();
    }
}

// [a, b) of the flat vector of `ts` <- in (b - a elements); every tensor defined and contiguous.
void scatter_range(const torch::Tensor& in, int64_t a, int64_t b, const std::vector<torch::Tensor>& ts,
                   const std::vector<FlatRange>& layout) {
    for (size_t i = 0; i < ts.size(); ++i) {
        const auto [x, y] = overlap(layout[i].begin, layout[i].end, a, b);
        if (x >= y) continue;
        ts[i].detach().view({-1}).narrow(0, x - layout[i].begin, y - x).copy_(in.narrow(0, x - a, y - x));
    }
}

// Each rank's part of [a, b) when the flat vector of n elements is split over `ranks` ranks.
std::vector<int64_t> part_counts(int64_t a, int64_t b, int64_t n, int ranks) {
    std::vector<int64_t> c(static_cast<size_t>(ranks));
    for (int r = 0; r < ranks; ++r) {
        const auto [lo, hi] = shard_bounds(n, ranks, r);
        const auto [x, y] = overlap(a, b, lo, hi);
        c[static_cast<size_t>(r)] = std::max<int64_t>(0, y - x);
    }
    return c;
}

// f(a, b, counts) for each bucket [a, b) of the flat vector of n elements in turn (buckets of
// `group`'s bucket size), with every rank's part of the bucket (part_counts): the loop of the
// reduce-scatter and of the all-gather, which must cut the vector the same way on every rank.
template <class F>
void for_each_bucket(int64_t n, const Collectives& group, F&& f) {
    const int64_t per = std::max<int64_t>(1, static_cast<int64_t>(group.bucket_bytes() / sizeof(float)));
    for (int64_t a = 0; a < n; a += per) {
        const int64_t b = std::min(n, a + per);
        f(a, b, part_counts(a, b, n, group.size()));
    }
}

// Writes `ar` to `out`. LibTorch's archive writer must never see a short write: it throws, then
// throws again from its destructor while unwinding (std::terminate, exit 134 on a full disk). The
// function takes every byte, stops writing at the first failure and keeps its errno; the error
// is ours to throw.
void write_archive(torch::serialize::OutputArchive& ar, std::ostream& out, const std::string& what) {
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
    if (err != 0) throw Error("engine: writing the " + what + " failed: " + std::strerror(err));
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
    trainable_ = true;
    const std::vector<torch::Tensor> params = model_.module->parameters();
    for (auto p : params) {
        p.set_requires_grad(true);
        if (cfg_.shard != Shard::kGradients) p.mutable_grad() = torch::zeros_like(p);
    }
    layout_ = flat_layout(params);
    numel_ = layout_.empty() ? 0 : layout_.back().end;
    if (cfg_.shard == Shard::kOff) {
        opt_ = make_torch_adamw(params, cfg_.optim);
    } else {
        set_group(nullptr);  // the whole vector until set_group gives a group
    }
}

void TorchEngine::require_trainable(const char* what) const {
    if (!trainable_) throw Error(std::string("engine: ") + what + " on a frozen " + model_.kind + " engine");
}

void TorchEngine::set_group(Collectives* group) {
    if (!trainable_ || cfg_.shard == Shard::kOff) return;
    if (step_ > 0 || (flat_ && flat_->steps() > 0))
        throw InternalError("engine: set_group after the " + model_.kind + " engine's first step");
    group_ = group;
    const int ranks = group ? group->size() : 1, rank = group ? group->rank() : 0;
    std::tie(lo_, hi_) = shard_bounds(numel_, ranks, rank);
    flat_ = std::make_unique<FlatAdamW>(shard_layout(layout_, lo_, hi_), cfg_.optim);
    if (!device_.is_cpu()) {
        const auto opts = torch::TensorOptions().dtype(torch::kFloat32).device(device_);
        flat_->set_state(0, torch::zeros({hi_ - lo_}, opts), torch::zeros({hi_ - lo_}, opts));
    }
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
    if (comm == nullptr || comm->size() == 1 || !trainable_) return {};
    if (cfg_.shard != Shard::kGradients) return comm->allreduce_sum(gradients());
    if (comm != group_)
        throw InternalError("engine: the " + model_.kind +
                            " gradients are reduce-scattered over another group than set_group's");
    // ZeRO stage 2: bucket by bucket of the flat vector, each rank receives the sum of its share
    // only, and writes it back into its own whole gradients at the same place. A whole gradient
    // outside the share is freed once the last bucket holding part of it has passed, so what is
    // held never exceeds the whole gradients plus one bucket; the share is copied out at the end,
    // when only the gradients it overlaps are left.
    torch::NoGradGuard no_grad;
    const auto opts = torch::TensorOptions().dtype(torch::kFloat32).device(device_);
    std::vector<torch::Tensor> params = model_.module->parameters(), grads = gradients();
    const auto in_share = [&](size_t i) { return layout_[i].end > lo_ && layout_[i].begin < hi_; };
    for (size_t i = 0; i < params.size(); ++i)  // the share's sums land in these: they must exist
        if (!grads[i].defined() && in_share(i)) grads[i] = params[i].mutable_grad() = torch::zeros_like(params[i]);
    size_t passed = 0;  // parameters [0, passed) have had their whole gradient summed
    SyncStats total;
    for_each_bucket(numel_, *comm, [&](int64_t a, int64_t b, const std::vector<int64_t>& counts) {
        torch::Tensor send = torch::empty({b - a}, opts);
        gather_range(grads, layout_, a, b, send);
        torch::Tensor part = torch::empty({counts[comm->rank()]}, opts);
        const SyncStats st = comm->reduce_scatter_sum(send, counts, part);
        send = torch::Tensor();
        const auto [x, y] = overlap(a, b, lo_, hi_);
        if (x < y) scatter_range(part, x, y, grads, layout_);
        total.bytes += st.bytes;
        total.buckets += st.buckets;
        total.seconds += st.seconds;
        for (; passed < params.size() && layout_[passed].end <= b; ++passed) {
            if (in_share(passed)) continue;  // holds part of the share: read once more at the end
            grads[passed] = torch::Tensor();
            params[passed].mutable_grad() = torch::Tensor();
        }
    });
    shard_grad_ = torch::empty({hi_ - lo_}, opts);
    gather_range(grads, layout_, lo_, hi_, shard_grad_);
    grads.clear();
    for (auto& p : params) p.mutable_grad() = torch::Tensor();
    return total;
}

double TorchEngine::clip_whole_gradients() {
    std::vector<torch::Tensor> params;
    for (const auto& p : model_.module->parameters())
        if (p.grad().defined()) params.push_back(p);
    if (cfg_.optim.grad_clip > 0.0) return torch::nn::utils::clip_grad_norm_(params, cfg_.optim.grad_clip);
    torch::NoGradGuard no_grad;
    double sq = 0.0;
    for (const auto& p : params) sq += sum_squares(p.grad());
    return std::sqrt(sq);
}

// ZeRO: the norm (of the whole summed gradients, or from the group's sum of the shares' squares),
// clipping, AdamW on this rank's share, then the all-gather of the updated share bucket by bucket.
double TorchEngine::sharded_step() {
    const auto opts = torch::TensorOptions().dtype(torch::kFloat32).device(device_);
    torch::Tensor g;
    double norm;
    if (shard_grad_.defined()) {
        torch::NoGradGuard no_grad;
        double sq = sum_squares(shard_grad_);
        if (group_ && group_->size() > 1) {
            torch::Tensor t = torch::tensor({static_cast<float>(sq)}, torch::kFloat32).to(device_);
            group_->allreduce_sum({t});
            sq = t.to(torch::kCPU).item<double>();
        }
        norm = std::sqrt(sq);
        g = shard_grad_;
        if (std::isfinite(norm) && cfg_.optim.grad_clip > 0.0) {
            const double coef = cfg_.optim.grad_clip / (norm + 1e-6);  // clip_grad_norm_'s
            if (coef < 1) g.mul_(coef);
        }
    } else {
        norm = clip_whole_gradients();
        if (std::isfinite(norm)) {
            g = torch::empty({hi_ - lo_}, opts);
            gather_range(gradients(), layout_, lo_, hi_, g);
        }
    }
    if (!std::isfinite(norm)) {  // as in step(): nothing moves, on every rank (the norm is the group's)
        zero_grad();
        return norm;
    }
    torch::NoGradGuard no_grad;
    const std::vector<torch::Tensor> params = model_.module->parameters();
    torch::Tensor mine = torch::empty({hi_ - lo_}, opts);
    gather_range(params, layout_, lo_, hi_, mine);
    flat_->step(mine, g);
    g = torch::Tensor();
    shard_grad_ = torch::Tensor();
    if (group_ && group_->size() > 1) {
        for_each_bucket(numel_, *group_, [&](int64_t a, int64_t b, const std::vector<int64_t>& counts) {
            const int64_t at = std::clamp<int64_t>(a - lo_, 0, hi_ - lo_);
            torch::Tensor all = torch::empty({b - a}, opts);
            group_->allgather(mine.narrow(0, at, counts[group_->rank()]), counts, all);
            scatter_range(all, a, b, params, layout_);
        });
    } else {
        scatter_range(mine, lo_, hi_, params, layout_);
    }
    ++step_;
    zero_grad();
    return norm;
}

double TorchEngine::step() {
    require_trainable("step");
    if (moments_pending_)
        throw Error("engine: the " + model_.kind +
                    " checkpoint's optimiser shards were not loaded (load_optim_shards)");
    if (flat_) return sharded_step();
    const double norm = clip_whole_gradients();
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
    if (!trainable_) return;
    torch::NoGradGuard no_grad;
    shard_grad_ = torch::Tensor();
    for (auto& p : model_.module->parameters()) {
        if (cfg_.shard == Shard::kGradients) {  // ZeRO 2 holds no whole gradients between steps
            p.mutable_grad() = torch::Tensor();
            continue;
        }
        if (p.grad().defined()) p.mutable_grad().zero_();
        else p.mutable_grad() = torch::zeros_like(p);
    }
}

void TorchEngine::set_lr(double lr) {
    require_trainable("set_lr");
    if (opt_)
        for (auto& group : opt_->param_groups()) static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
    if (flat_) flat_->set_lr(lr);
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
    if (flat_) ar.write("meta_optim_sharded", c10::IValue(true));  // moments in save_optim_shard files
    ar.write("meta_step", c10::IValue(step_));
    ar.write("meta_lr", c10::IValue(cfg_.optim.lr));
    ar.write("meta_kind", c10::IValue(model_.kind));
    write_archive(ar, out, model_.kind + " state");
}

void TorchEngine::save_optim_shard(std::ostream& out) const {
    if (!flat_) throw InternalError("engine: save_optim_shard on an unsharded " + model_.kind + " engine");
    if (moments_pending_) throw Error("engine: the " + model_.kind + " optimiser shards were never loaded");
    torch::serialize::OutputArchive ar;
    ar.write("lo", c10::IValue(lo_));
    ar.write("hi", c10::IValue(hi_));
    ar.write("numel", c10::IValue(numel_));
    ar.write("step", c10::IValue(flat_->steps()));
    ar.write("kind", c10::IValue(model_.kind));
    ar.write("exp_avg", flat_->exp_avg().to(torch::kCPU));
    ar.write("exp_avg_sq", flat_->exp_avg_sq().to(torch::kCPU));
    write_archive(ar, out, model_.kind + " optimiser shard");
}

void TorchEngine::load_optim_shards(const std::vector<std::string>& paths) {
    require_trainable("load_optim_shards");
    const int64_t lo = flat_ ? lo_ : 0, hi = flat_ ? hi_ : numel_;
    torch::Tensor m = torch::zeros({hi - lo}, torch::kFloat32), v = torch::zeros({hi - lo}, torch::kFloat32);
    int64_t covered = 0, steps = -1;
    for (const std::string& path : paths) {
        int64_t a = 0, b = 0;
        if (!parse_optim_shard_name(path, "", &a, &b))
            throw Error("optimiser shard " + path + ": not a <name>.<lo>-<hi>.pt file");
        const auto [x, y] = overlap(a, b, lo, hi);
        if (x >= y) continue;  // another rank's share: not read
        try {
            std::ifstream in(path, std::ios::binary);
            if (!in) throw Error("cannot open");
            torch::serialize::InputArchive ar;
            ar.load_from(in, torch::kCPU);
            c10::IValue ilo, ihi, inumel, istep, ikind;
            ar.read("lo", ilo);
            ar.read("hi", ihi);
            ar.read("numel", inumel);
            ar.read("step", istep);
            ar.read("kind", ikind);
            if (ikind.toStringRef() != model_.kind)
                throw Error("holds a " + ikind.toStringRef() + ", this engine trains a " + model_.kind);
            if (inumel.toInt() != numel_)
                throw Error("is a share of " + std::to_string(inumel.toInt()) + " elements, this " + model_.kind +
                            " has " + std::to_string(numel_));
            if (ilo.toInt() != a || ihi.toInt() != b) throw Error("holds another range than its name says");
            if (steps >= 0 && istep.toInt() != steps) throw Error("is from another step than the other shards");
            steps = istep.toInt();
            torch::Tensor ea, es;
            ar.read("exp_avg", ea);
            ar.read("exp_avg_sq", es);
            if (ea.numel() != b - a || es.numel() != b - a) throw Error("holds moments of another length");
            m.narrow(0, x - lo, y - x).copy_(ea.reshape({-1}).narrow(0, x - a, y - x));
            v.narrow(0, x - lo, y - x).copy_(es.reshape({-1}).narrow(0, x - a, y - x));
            covered += y - x;
        } catch (const tagflow::Error& e) {
            throw Error("optimiser shard " + path + ": " + e.what());
        } catch (const std::exception& e) {
            const std::string what = e.what();
            throw Error("optimiser shard " + path + ": unreadable: " + what.substr(0, what.find('\n')));
        }
    }
    if (covered != hi - lo)
        throw Error("engine: the " + model_.kind + " optimiser shards cover " + std::to_string(covered) + " of the " +
                    std::to_string(hi - lo) + " elements [" + std::to_string(lo) + ", " + std::to_string(hi) +
                    ") this rank needs (missing or overlapping files)");
    if (steps != step_)
        throw Error("engine: the " + model_.kind + " optimiser shards are from step " + std::to_string(steps) +
                    ", its weights from step " + std::to_string(step_));
    if (flat_) flat_->set_state(steps, m.to(device_), v.to(device_));
    else set_torch_moments(steps, m.to(device_), v.to(device_));
    moments_pending_ = false;
}

void TorchEngine::set_torch_moments(int64_t steps, const torch::Tensor& m, const torch::Tensor& v) {
    const std::vector<torch::Tensor> params = model_.module->parameters();
    for (size_t i = 0; i < params.size(); ++i) {
        const FlatRange& f = layout_[i];
        auto st = std::make_unique<torch::optim::AdamWParamState>();
        st->step(steps);
        st->exp_avg(m.narrow(0, f.begin, f.end - f.begin).view_as(params[i]).clone());
        st->exp_avg_sq(v.narrow(0, f.begin, f.end - f.begin).view_as(params[i]).clone());
        opt_->state()[state_key(params[i])] = std::move(st);
    }
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
        c10::IValue step, lr, sharded;
        ar.read("meta_step", step);
        ar.read("meta_lr", lr);
        step_ = step.toInt();
        if (trainable_) {
            torch::serialize::InputArchive opt_ar;
            if (ar.try_read("optim", opt_ar)) {
                if (opt_) {
                    opt_->load(opt_ar);
                } else {  // an unsharded checkpoint: this rank takes its share of the moments
                    const std::vector<torch::Tensor> params = model_.module->parameters();
                    auto whole = make_torch_adamw(params, cfg_.optim);
                    whole->load(opt_ar);
                    torch::Tensor m = torch::zeros({hi_ - lo_}, torch::kFloat32), v = torch::zeros_like(m);
                    for (size_t i = 0; i < params.size(); ++i) {
                        const auto [x, y] = overlap(layout_[i].begin, layout_[i].end, lo_, hi_);
                        const auto it = whole->state().find(state_key(params[i]));
                        if (x >= y || it == whole->state().end()) continue;
                        const auto& st = static_cast<const torch::optim::AdamWParamState&>(*it->second);
                        const int64_t off = x - layout_[i].begin;
                        m.narrow(0, x - lo_, y - x).copy_(st.exp_avg().reshape({-1}).narrow(0, off, y - x));
                        v.narrow(0, x - lo_, y - x).copy_(st.exp_avg_sq().reshape({-1}).narrow(0, off, y - x));
                    }
                    flat_->set_state(step_, m.to(device_), v.to(device_));
                }
                moments_pending_ = false;
            } else if (ar.try_read("meta_optim_sharded", sharded) && sharded.toBool()) {
                moments_pending_ = true;  // the caller reads them with load_optim_shards
            } else {
                throw Error("engine: state has no optimiser (saved by a frozen engine)");
            }
            set_lr(lr.toDouble());
        } else {
            cfg_.optim.lr = lr.toDouble();
        }
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
