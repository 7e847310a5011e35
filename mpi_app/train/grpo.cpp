// SPDX-License-Identifier: Apache-2.0
// grpo: advantages, the clipped surrogate, and the learner's micro-batched
// forward/backward (padding, response masks, optional k3 KL to a frozen reference,
// entropy, diagnostics) plus the AdamW step. Does not talk to MPI.
#include "train/grpo.hpp"

#include <cmath>

#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include "common/error.hpp"
#include "common/torch_compat.hpp"

namespace tagflow::train {

std::vector<float> group_advantages(const std::vector<float>& rewards, int group_size,
                                    bool normalize_std) {
    if (group_size < 1 || rewards.size() % static_cast<size_t>(group_size) != 0)
        throw Error("group_advantages: " + std::to_string(rewards.size()) +
                    " rewards do not split into groups of " + std::to_string(group_size));
    std::vector<float> adv(rewards.size(), 0.0f);
    for (size_t g = 0; g < rewards.size(); g += group_size) {
        double mean = 0.0;
        for (int i = 0; i < group_size; ++i) mean += rewards[g + i];
        mean /= group_size;
        double var = 0.0;
        for (int i = 0; i < group_size; ++i) var += (rewards[g + i] - mean) * (rewards[g + i] - mean);
        const double denom = normalize_std ? std::sqrt(var / group_size) + 1e-6 : 1.0;
        for (int i = 0; i < group_size; ++i) {
            const double d = rewards[g + i] - mean;
            // Exact zero for equal rewards, whatever rounding `mean` picked up.
            adv[g + i] = var == 0.0 ? 0.0f : static_cast<float>(d / denom);
        }
    }
    return adv;
}

TrainSample make_train_sample(const std::vector<int32_t>& prompt,
                              const rollout::Completion& completion, float advantage) {
    TrainSample s;
    s.tokens = prompt;
    s.tokens.insert(s.tokens.end(), completion.response.begin(), completion.response.end());
    s.prompt_len = static_cast<int32_t>(prompt.size());
    s.old_logprobs = completion.logprobs;
    s.advantage = advantage;
    return s;
}

torch::Tensor clipped_pg_loss(const torch::Tensor& logp, const torch::Tensor& old_logp,
                              const torch::Tensor& adv, double clip_eps, torch::Tensor* clipped) {
    torch::Tensor ratio = torch::exp(logp - old_logp);
    torch::Tensor unclipped = -ratio * adv;
    torch::Tensor clipped_term = -torch::clamp(ratio, 1.0 - clip_eps, 1.0 + clip_eps) * adv;
    if (clipped) *clipped = (clipped_term > unclipped).detach().to(torch::kFloat32);
    return torch::max(unclipped, clipped_term);
}

namespace {

// Turns CPU bf16 autocast on for one scope (thread-local state in ATen).
class AutocastScope {
public:
    explicit AutocastScope(bool on) : on_(on) {
        if (!on_) return;
        compat::set_cpu_autocast(true, at::kBFloat16);
    }
    ~AutocastScope() {
        if (on_) compat::set_cpu_autocast(false);
    }
    AutocastScope(const AutocastScope&) = delete;
    AutocastScope& operator=(const AutocastScope&) = delete;

private:
    bool on_;
};

struct MicroBatch {
    torch::Tensor inputs, targets, old_logp, mask, adv;  // [n, T] / [n, 1]
};

MicroBatch pack(const std::vector<TrainSample>& batch, size_t begin, size_t end) {
    size_t lmax = 0;
    for (size_t i = begin; i < end; ++i) {
        const TrainSample& s = batch[i];
        const size_t n_resp = s.tokens.size() - std::min<size_t>(s.tokens.size(), s.prompt_len);
        if (s.prompt_len < 1 || static_cast<size_t>(s.prompt_len) > s.tokens.size() ||
            s.old_logprobs.size() != n_resp)
            throw Error("GrpoLearner: sample " + std::to_string(i) +
                        " has inconsistent prompt_len / tokens / old_logprobs");
        lmax = std::max(lmax, s.tokens.size());
    }
    const int64_t n = static_cast<int64_t>(end - begin);
    const int64_t T = std::max<int64_t>(static_cast<int64_t>(lmax) - 1, 1);
    MicroBatch mb;
    mb.inputs = torch::zeros({n, T}, torch::kInt64);
    mb.targets = torch::zeros({n, T}, torch::kInt64);
    mb.old_logp = torch::zeros({n, T}, torch::kFloat32);
    mb.mask = torch::zeros({n, T}, torch::kFloat32);
    mb.adv = torch::zeros({n, 1}, torch::kFloat32);
    auto in = mb.inputs.accessor<int64_t, 2>();
    auto tg = mb.targets.accessor<int64_t, 2>();
    auto ol = mb.old_logp.accessor<float, 2>();
    auto mk = mb.mask.accessor<float, 2>();
    auto ad = mb.adv.accessor<float, 2>();
    for (int64_t b = 0; b < n; ++b) {
        const TrainSample& s = batch[begin + b];
        ad[b][0] = s.advantage;
        // Logits at slot t predict token t + 1; response tokens start at prompt_len.
        for (size_t t = 0; t + 1 < s.tokens.size(); ++t) {
            in[b][t] = s.tokens[t];
            tg[b][t] = s.tokens[t + 1];
            if (static_cast<int32_t>(t + 1) >= s.prompt_len) {
                mk[b][t] = 1.0f;
                ol[b][t] = s.old_logprobs[t + 1 - s.prompt_len];
            }
        }
    }
    return mb;
}

}  // namespace

GrpoLearner::GrpoLearner(model::Policy policy, const GrpoConfig& cfg)
    : policy_(std::move(policy)), cfg_(cfg) {
    if (cfg.micro_batch < 1) throw ConfigError("grpo: micro_batch must be >= 1");
    if (cfg.temperature <= 0.0) throw ConfigError("grpo: temperature must be > 0");
    std::vector<torch::Tensor> decay, no_decay;
    for (auto& p : policy_->parameters()) {
        p.mutable_grad() = torch::zeros_like(p);
        (p.dim() >= 2 ? decay : no_decay).push_back(p);
    }
    auto opts = torch::optim::AdamWOptions(cfg.lr)
                    .betas(std::make_tuple(cfg.beta1, cfg.beta2))
                    .weight_decay(cfg.weight_decay);
    std::vector<torch::optim::OptimizerParamGroup> groups;
    groups.emplace_back(decay, std::make_unique<torch::optim::AdamWOptions>(opts));
    auto opts0 = opts;
    opts0.weight_decay(0.0);
    groups.emplace_back(no_decay, std::make_unique<torch::optim::AdamWOptions>(opts0));
    opt_ = std::make_unique<torch::optim::AdamW>(std::move(groups), opts);
    if (cfg.kl_coef > 0.0) {
        ref_ = model::Policy(policy_->config(), /*seed=*/0);
        model::copy_parameters(*ref_, *policy_);
        for (auto& p : ref_->parameters()) p.set_requires_grad(false);
    }
}

StepStats GrpoLearner::accumulate(const std::vector<TrainSample>& local_batch, double global_norm) {
    StepStats st;
    if (local_batch.empty()) return st;
    if (!(global_norm > 0.0)) throw Error("GrpoLearner::accumulate: global_norm must be > 0");
    double loss = 0, kl = 0, ent = 0, clip = 0, diff = 0, ntok = 0;
    const size_t mbs = static_cast<size_t>(cfg_.micro_batch);
    for (size_t begin = 0; begin < local_batch.size(); begin += mbs) {
        const size_t end = std::min(local_batch.size(), begin + mbs);
        MicroBatch mb = pack(local_batch, begin, end);
        torch::Tensor logits;
        torch::Tensor ref_logp;
        {
            AutocastScope autocast(cfg_.bf16);
            logits = policy_->forward(mb.inputs);
            if (ref_) {
                torch::NoGradGuard no_grad;
                auto rl = torch::log_softmax(ref_->forward(mb.inputs).to(torch::kFloat32) /
                                             cfg_.temperature, -1);
                ref_logp = rl.gather(-1, mb.targets.unsqueeze(-1)).squeeze(-1);
            }
        }
        torch::Tensor logp_all = torch::log_softmax(logits.to(torch::kFloat32) / cfg_.temperature, -1);
        torch::Tensor logp = logp_all.gather(-1, mb.targets.unsqueeze(-1)).squeeze(-1);
        torch::Tensor clipped;
        torch::Tensor per_tok = clipped_pg_loss(logp, mb.old_logp, mb.adv, cfg_.clip_eps, &clipped);
        torch::Tensor entropy = -(logp_all.exp() * logp_all).sum(-1);
        torch::Tensor kl_tok;
        if (ref_) {
            torch::Tensor delta = ref_logp - logp;
            kl_tok = torch::exp(delta) - delta - 1.0;  // k3: unbiased, always >= 0
            per_tok = per_tok + cfg_.kl_coef * kl_tok;
        }
        if (cfg_.entropy_coef > 0.0) per_tok = per_tok - cfg_.entropy_coef * entropy;
        torch::Tensor mb_loss = (per_tok * mb.mask).sum() / global_norm;
        mb_loss.backward();

        torch::NoGradGuard no_grad;
        loss += mb_loss.item<double>();
        ntok += mb.mask.sum().item<double>();
        ent += (entropy * mb.mask).sum().item<double>();
        clip += (clipped * mb.mask).sum().item<double>();
        diff += ((logp - mb.old_logp).abs() * mb.mask).sum().item<double>();
        if (ref_) kl += (kl_tok * mb.mask).sum().item<double>();
    }
    st.loss = loss;
    st.tokens = static_cast<int64_t>(ntok);
    if (ntok > 0) {
        st.kl = kl / ntok;
        st.entropy = ent / ntok;
        st.clip_frac = clip / ntok;
        st.logprob_diff_mean = diff / ntok;
    }
    return st;
}

std::vector<torch::Tensor> GrpoLearner::parameters() const { return policy_->parameters(); }

std::vector<torch::Tensor> GrpoLearner::gradients() const {
    std::vector<torch::Tensor> g;
    for (const auto& p : policy_->parameters()) g.push_back(p.grad());
    return g;
}

void GrpoLearner::zero_grad() {
    torch::NoGradGuard no_grad;
    for (auto& p : policy_->parameters()) {
        if (p.grad().defined()) p.mutable_grad().zero_();
        else p.mutable_grad() = torch::zeros_like(p);
    }
}

double GrpoLearner::step() {
    auto params = policy_->parameters();
    double norm;
    if (cfg_.grad_clip > 0.0) {
        norm = torch::nn::utils::clip_grad_norm_(params, cfg_.grad_clip);
    } else {
        torch::NoGradGuard no_grad;
        double sq = 0.0;
        for (const auto& p : params) sq += p.grad().pow(2).sum().item<double>();
        norm = std::sqrt(sq);
    }
    opt_->step();
    zero_grad();
    if (cfg_.bf16) at::autocast::clear_cache();
    return norm;
}

void GrpoLearner::set_lr(double lr) {
    for (auto& group : opt_->param_groups())
        static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
    cfg_.lr = lr;
}

}  // namespace tagflow::train
