// SPDX-License-Identifier: Apache-2.0
// losses: token log-probs, KL estimators, loss aggregation, PPO policy and value losses.
// See losses.hpp.
#include "train/losses.hpp"

#include <torch/torch.h>

#include "common/error.hpp"

namespace tagflow::train {

torch::Tensor token_log_probs(const torch::Tensor& logits, const torch::Tensor& targets, double temperature,
                              torch::Tensor* entropy) {
    if (!(temperature > 0.0)) throw ConfigError("token_log_probs: temperature must be > 0");
    torch::Tensor lp = torch::log_softmax(logits.to(torch::kFloat32) / temperature, -1);
    if (entropy) *entropy = -(lp.exp() * lp).sum(-1);
    return lp.gather(-1, targets.unsqueeze(-1)).squeeze(-1);
}

torch::Tensor kl_penalty(const torch::Tensor& logp, const torch::Tensor& ref_logp, KlMode mode) {
    const torch::Tensor d = logp - ref_logp;
    switch (mode) {
        case KlMode::kK1: return d;
        case KlMode::kK2: return 0.5 * d.pow(2);
        case KlMode::kAbs: return d.abs();
        case KlMode::kK3: {
            // r = ref - logp clamped to [-20, 20] BEFORE the exp (veRL): an unclamped exp overflows
            // to inf on a masked slot whose log-prob is a placeholder, and 0 * inf = NaN gradients.
            const torch::Tensor r = torch::clamp(-d, -20.0, 20.0);
            return torch::clamp(torch::exp(r) - r - 1.0, -10.0, 10.0);
        }
    }
    return d;
}

torch::Tensor agg_loss(const torch::Tensor& loss, const torch::Tensor& mask, LossAgg mode, const BatchCounts& global,
                       double norm_tokens, const torch::Tensor& seq_id, int64_t n_seq) {
    // where(), not loss * mask: a non-finite loss on a masked slot must not become NaN (0 * inf).
    const torch::Tensor masked = torch::where(mask > 0, loss * mask, torch::zeros_like(loss));
    switch (mode) {
        case LossAgg::kTokenMean:
            if (!(global.tokens > 0)) throw Error("agg_loss: token-mean needs a global token count > 0");
            return masked.sum() / global.tokens;
        case LossAgg::kSeqMeanTokenSum:
            if (!(global.seqs > 0)) throw Error("agg_loss: seq-mean modes need a global sequence count > 0");
            return masked.sum() / global.seqs;
        case LossAgg::kSeqMeanTokenMean: {
            if (!(global.seqs > 0)) throw Error("agg_loss: seq-mean modes need a global sequence count > 0");
            if (seq_id.defined()) {  // packed rows: sums per sequence id (the last bin is padding)
                const torch::Tensor id = seq_id.reshape({-1});
                const torch::Tensor zero = torch::zeros({n_seq + 1}, masked.options());
                const torch::Tensor num = zero.index_add(0, id, masked.reshape({-1})).narrow(0, 0, n_seq);
                const torch::Tensor den = zero.index_add(0, id, mask.reshape({-1}).to(masked.scalar_type()));
                return (num / den.narrow(0, 0, n_seq).clamp_min(1.0)).sum() / global.seqs;
            }
            const torch::Tensor per_seq = masked.sum(-1) / mask.sum(-1).clamp_min(1.0);
            return per_seq.sum() / global.seqs;
        }
        case LossAgg::kSeqMeanTokenSumNorm:
            if (!(global.seqs > 0)) throw Error("agg_loss: seq-mean modes need a global sequence count > 0");
            if (!(norm_tokens > 0)) throw Error("agg_loss: seq-mean-token-sum-norm needs a token normaliser > 0");
            return masked.sum() / (global.seqs * norm_tokens);
    }
    return masked.sum();
}

torch::Tensor agg_loss(const torch::Tensor& loss, const MicroBatch& mb, LossAgg mode, const BatchCounts& global,
                       double norm_tokens) {
    return agg_loss(loss, mb.mask, mode, global, norm_tokens, mb.packed ? mb.seq_id : torch::Tensor(),
                    static_cast<int64_t>(mb.index.size()));
}

PolicyLossTerms ppo_policy_loss(const torch::Tensor& logp, const torch::Tensor& old_logp, const torch::Tensor& adv,
                                double clip_low, double clip_high, double dual_clip, const torch::Tensor& is_weights) {
    const torch::Tensor ratio = torch::exp(torch::clamp(logp - old_logp, -20.0, 20.0));
    const torch::Tensor l1 = -adv * ratio;
    const torch::Tensor l2 = -adv * torch::clamp(ratio, 1.0 - clip_low, 1.0 + clip_high);
    PolicyLossTerms out;
    torch::Tensor clip1 = torch::max(l1, l2);
    out.clipped = (l2 > l1).detach().to(torch::kFloat32);
    if (dual_clip > 1.0) {
        const torch::Tensor l3 = -adv * dual_clip;
        const torch::Tensor neg = adv < 0;
        out.clipped_lower = ((clip1 > l3) & neg).detach().to(torch::kFloat32);
        out.loss = torch::where(neg, torch::min(clip1, l3), clip1);
    } else {
        out.clipped_lower = torch::zeros_like(out.clipped);
        out.loss = clip1;
    }
    if (is_weights.defined()) out.loss = out.loss * is_weights.detach();  // veRL: pg_losses * rollout_is_weights
    return out;
}

ValueLossTerms value_loss(const torch::Tensor& vpred, const torch::Tensor& old_values, const torch::Tensor& returns,
                          double clip_range) {
    ValueLossTerms out;
    const torch::Tensor l1 = (vpred - returns).pow(2);
    if (clip_range > 0.0) {
        const torch::Tensor vclip = old_values + torch::clamp(vpred - old_values, -clip_range, clip_range);
        const torch::Tensor l2 = (vclip - returns).pow(2);
        out.loss = 0.5 * torch::max(l1, l2);
        // Only where the clamp was active: inside the range vclip equals vpred up to one
        // rounding, which must not count as clipped.
        out.clipped = ((l2 > l1) & ((vpred - old_values).abs() > clip_range)).detach().to(torch::kFloat32);
    } else {
        out.loss = 0.5 * l1;
        out.clipped = torch::zeros_like(l1).detach();
    }
    return out;
}

}  // namespace tagflow::train
