// SPDX-License-Identifier: Apache-2.0
// workers: model handles, and the actor / critic / reference workers' loss functions,
// statistics and mini-batch/epoch update loops on top of a TrainEngine. See workers.hpp.
#include "train/workers.hpp"

#include <algorithm>
#include <cmath>
#include <map>

#include <torch/torch.h>

#include "common/error.hpp"
#include "train/losses.hpp"

namespace tagflow::train {

torch::Tensor policy_logits_rows(model::LlamaModelImpl& m, const torch::Tensor& tokens, const torch::Tensor& rows) {
    const model::HfConfig& c = m.config();
    const int64_t T = tokens.size(1);
    TORCH_CHECK(T <= c.max_position_embeddings, "policy_logits_rows: ", T, " positions, over max_position_embeddings ",
                c.max_position_embeddings);
    const auto fopt = torch::TensorOptions().dtype(torch::kFloat).device(tokens.device());
    const torch::Tensor inv_freq = model::rope_inv_freq(c).to(tokens.device());
    const torch::Tensor freqs = torch::outer(torch::arange(0, T, fopt), inv_freq);  // as LlamaModelImpl::forward
    const torch::Tensor emb = torch::cat({freqs, freqs}, -1);
    const torch::Tensor cos = emb.cos(), sin = emb.sin();
    torch::Tensor h = m.model->embed(tokens, 0);
    h = m.model->norm(m.model->run_layers(h, cos, sin));
    h = h.reshape({-1, h.size(-1)}).index_select(0, rows);
    return c.tie_word_embeddings ? torch::nn::functional::linear(h, m.model->embed_tokens->weight) : m.lm_head(h);
}

ModelHandle policy_handle(model::LlamaModel m) {
    ModelHandle h;
    h.module = m.ptr();
    h.forward = [m](const torch::Tensor& tokens) mutable { return m->forward(tokens); };
    h.forward_rows = [m](const torch::Tensor& tokens, const torch::Tensor& rows) mutable {
        return policy_logits_rows(*m, tokens, rows);
    };
    h.forward_packed = [m](const torch::Tensor& tokens, const torch::Tensor& positions, const torch::Tensor& segments,
                           const torch::Tensor& rows) mutable {
        if (!rows.defined()) return m->forward_packed(tokens, positions, segments);
        const torch::Tensor hidden = model::packed_hidden_states(*m->model, m->config(), tokens, positions, segments);
        return m->head(hidden.reshape({-1, hidden.size(-1)}).index_select(0, rows));
    };
    h.kind = "policy";
    return h;
}

ModelHandle value_handle(model::ValueModel m) {
    ModelHandle h;
    h.module = m.ptr();
    h.forward = [m](const torch::Tensor& tokens) mutable { return m->forward(tokens); };
    h.forward_packed = [m](const torch::Tensor& tokens, const torch::Tensor& positions, const torch::Tensor& segments,
                           const torch::Tensor& rows) mutable {
        const torch::Tensor v = m->forward_packed(tokens, positions, segments);
        return rows.defined() ? v.reshape({-1}).index_select(0, rows) : v;
    };
    h.kind = "value";
    return h;
}

model::LlamaModel clone_llama(const model::LlamaModel& m) {
    model::LlamaModel c(m->config(), /*seed=*/0);
    std::map<std::string, torch::Tensor> sd;
    for (const auto& [name, t] : m->hf_state_dict()) sd[name] = t.detach();
    c->load_hf_state_dict(sd);
    return c;
}

namespace {

// Consecutive, nearly equal chunks of `local` (some may be empty on a small rank).
std::vector<std::vector<TrainSeq>> split_chunks(const std::vector<TrainSeq>& local, int32_t k) {
    if (k < 1) throw ConfigError("update: mini_batches must be >= 1");
    std::vector<std::vector<TrainSeq>> out(static_cast<size_t>(k));
    const size_t n = local.size();
    for (size_t c = 0; c < out.size(); ++c) {
        const size_t b = n * c / out.size(), e = n * (c + 1) / out.size();
        out[c].assign(local.begin() + static_cast<std::ptrdiff_t>(b), local.begin() + static_cast<std::ptrdiff_t>(e));
    }
    return out;
}

void require(const std::vector<TrainSeq>& batch, std::vector<float> TrainSeq::*field, const char* who,
             const char* name) {
    for (size_t i = 0; i < batch.size(); ++i)
        if ((batch[i].*field).empty() && batch[i].n_resp() > 0)
            throw Error(std::string(who) + ": sample " + std::to_string(i) + " has no " + name);
}

// Sums over tokens/steps, reduced in one collective at the end of an update.
enum ActorSum { aLoss, aPg, aKl, aEnt, aClip, aClipLow, aPpoKl, aDiff, aTok, aReal, aSlots, aNumSums };
enum CriticSum { cLoss, cClip, cV, cR, cR2, cE, cE2, cTokEv, cTok, cNumSums };

std::vector<double> reduce_sums(std::vector<double> s, Collectives* comm, const torch::Device& dev) {
    if (comm == nullptr || comm->size() == 1) return s;
    torch::Tensor t = torch::tensor(std::vector<float>(s.begin(), s.end())).to(dev);
    comm->allreduce_sum({t});
    t = t.to(torch::kCPU);
    for (size_t i = 0; i < s.size(); ++i) s[i] = t[static_cast<int64_t>(i)].item<float>();
    return s;
}

double safe_div(double a, double b) { return b > 0 ? a / b : 0.0; }

// COLLECTIVE over comm, after the gradient all-reduce: one optimiser step unless the loss on
// some rank or the (all-reduced, so common) gradient norm is not finite. Adds the norm of an
// applied step to *norm_sum and counts it in *steps, or counts the skip in *skipped.
void step_if_finite(TrainEngine& engine, double local_loss, Collectives* comm, double* norm_sum, int32_t* steps,
                    int32_t* skipped) {
    const bool bad_loss = reduce_sums({std::isfinite(local_loss) ? 0.0 : 1.0}, comm, engine.device())[0] > 0;
    if (bad_loss) {
        engine.zero_grad();
        ++*skipped;
        return;
    }
    const double norm = engine.step();
    if (!std::isfinite(norm)) {
        ++*skipped;
        return;
    }
    *norm_sum += norm;
    ++*steps;
}

}  // namespace

// ---- off-policy correction ----

CorrectionStats apply_rollout_correction(std::vector<TrainSeq>& local, const RolloutCorrectionConfig& cfg) {
    CorrectionStats st;
    for (size_t i = 0; i < local.size(); ++i) {
        TrainSeq& s = local[i];
        const size_t n = s.n_resp();
        if (s.old_logprobs.size() != n || s.rollout_logprobs.size() != n)
            throw Error("rollout correction: sample " + std::to_string(i) + " has " +
                        std::to_string(s.old_logprobs.size()) + " proximal and " +
                        std::to_string(s.rollout_logprobs.size()) + " rollout log-probs for " + std::to_string(n) +
                        " response tokens");
        SeqCorrection c = correct_sequence(s.old_logprobs, s.rollout_logprobs, s.loss_mask, cfg);
        if (cfg.is != IsLevel::kOff) s.is_weights = c.weights;
        if (c.rejected) {
            s.loss_mask.assign(n, 0);
        } else if (!c.token_keep.empty()) {  // --rollout-rs token: the tokens out of the band leave the loss
            if (s.loss_mask.empty()) s.loss_mask.assign(n, 1);
            for (size_t j = 0; j < n; ++j) s.loss_mask[j] = static_cast<uint8_t>(s.loss_mask[j] & c.token_keep[j]);
        }
        st.add(c);
    }
    return st;
}

void scale_is_weights(std::vector<TrainSeq>& local, double factor) {
    if (!(factor > 0) || !std::isfinite(factor))
        throw Error("rollout correction: batch normalisation factor " + std::to_string(factor) + " (need > 0)");
    for (TrainSeq& s : local)
        for (float& w : s.is_weights) w = static_cast<float>(w / factor);
}

// ---- actor ----

ActorWorker::ActorWorker(std::unique_ptr<TrainEngine> engine, const ActorConfig& cfg)
    : engine_(std::move(engine)), cfg_(cfg) {
    if (!engine_) throw ConfigError("actor: no engine");
    if (!engine_->config().trainable) throw ConfigError("actor: the engine is frozen (trainable = false)");
    if (!(cfg.temperature > 0.0)) throw ConfigError("actor: temperature must be > 0");
    if (!(cfg.clip_eps > 0.0)) throw ConfigError("actor: clip_eps must be > 0");
    if (cfg.dual_clip != 0.0 && !(cfg.dual_clip > 1.0)) throw ConfigError("actor: dual_clip must be > 1 (or 0 = off)");
    if (cfg.loss_agg == LossAgg::kSeqMeanTokenSumNorm && !(cfg.loss_norm_tokens > 0.0))
        throw ConfigError("actor: seq-mean-token-sum-norm needs loss_norm_tokens > 0");
    if (cfg.kl_loss_coef < 0.0 || cfg.entropy_coef < 0.0) throw ConfigError("actor: coefficients must be >= 0");
}

std::vector<std::vector<float>> ActorWorker::compute_log_probs(const std::vector<TrainSeq>& batch,
                                                               std::vector<std::vector<float>>* entropy) {
    std::vector<std::vector<float>> out;
    if (entropy) entropy->clear();
    engine_->forward_backward(
        batch,
        [&](const MicroBatch& mb, const torch::Tensor& logits) {
            torch::Tensor ent;
            torch::Tensor lp = token_log_probs(logits, mb.targets, cfg_.temperature, entropy ? &ent : nullptr);
            unpack_response(lp, batch, mb, out);
            if (entropy) unpack_response(ent, batch, mb, *entropy);
            return torch::Tensor();
        },
        /*train=*/false);
    return out;
}

namespace {

ActorStats actor_stats(const std::vector<double>& s, double steps) {
    ActorStats st;
    const double tok = s[aTok];
    st.loss = safe_div(s[aLoss], steps);
    st.pg_loss = safe_div(s[aPg], steps);
    st.kl = safe_div(s[aKl], tok);
    st.entropy = safe_div(s[aEnt], tok);
    st.clip_frac = safe_div(s[aClip], tok);
    st.clip_frac_lower = safe_div(s[aClipLow], tok);
    st.ppo_kl = safe_div(s[aPpoKl], tok);
    st.logprob_diff_mean = safe_div(s[aDiff], tok);
    st.tokens = static_cast<int64_t>(tok);
    st.real_tokens = static_cast<int64_t>(s[aReal] + 0.5);
    st.token_slots = static_cast<int64_t>(s[aSlots] + 0.5);
    return st;
}

std::vector<double> actor_sums(TrainEngine& engine, const ActorConfig& cfg, const std::vector<TrainSeq>& local,
                               const BatchCounts& global) {
    std::vector<double> s(aNumSums, 0.0);
    if (local.empty()) return s;
    require(local, &TrainSeq::old_logprobs, "actor", "old_logprobs");
    require(local, &TrainSeq::advantages, "actor", "advantages");
    if (cfg.kl_loss_coef > 0.0) require(local, &TrainSeq::ref_logprobs, "actor", "ref_logprobs (kl_loss_coef > 0)");
    const double clip_high = cfg.clip_eps_high > 0.0 ? cfg.clip_eps_high : cfg.clip_eps;
    // The output projection runs on the response tokens only (rows_only; with a 150k-token
    // vocabulary it is most of the step): log-probs and entropies of those rows go back into
    // [n,T] slots; the others hold the old log-probs (ratio 1) and entropy 0, and are masked out.
    engine.forward_backward(
        local,
        [&](const MicroBatch& mb, const torch::Tensor& logits) {
            torch::Tensor ent, logp;
            if (logits.dim() == 2) {
                const torch::Tensor rows = mb.mask.reshape({-1}).nonzero().squeeze(1);
                torch::Tensor ent_rows;
                const torch::Tensor lp_rows =
                    token_log_probs(logits, mb.targets.reshape({-1}).index_select(0, rows), cfg.temperature, &ent_rows);
                logp = mb.old_logp.detach().reshape({-1}).index_put({rows}, lp_rows).reshape(mb.mask.sizes());
                ent = torch::zeros_like(logp).reshape({-1}).index_put({rows}, ent_rows).reshape(mb.mask.sizes());
            } else {
                logp = token_log_probs(logits, mb.targets, cfg.temperature, &ent);
            }
            if (cfg.entropy_coef == 0.0) ent = ent.detach();
            const torch::Tensor& m = mb.mask;
            const torch::Tensor w = mb.weight;
            PolicyLossTerms pg =
                ppo_policy_loss(logp, mb.old_logp, mb.adv, cfg.clip_eps, clip_high, cfg.dual_clip, mb.is_w);
            const double nt = cfg.loss_norm_tokens;
            const torch::Tensor pg_agg = agg_loss(pg.loss * w, mb, cfg.loss_agg, global, nt);
            torch::Tensor loss = pg_agg;
            if (cfg.entropy_coef > 0.0)
                loss = loss - cfg.entropy_coef * agg_loss(ent * w, mb, cfg.loss_agg, global, nt);
            torch::Tensor kl;
            if (mb.ref_logp.defined()) {
                kl = kl_penalty(logp, mb.ref_logp, cfg.kl_loss_mode);
                if (cfg.kl_loss_coef > 0.0)
                    loss = loss + cfg.kl_loss_coef * agg_loss(kl * w, mb, cfg.loss_agg, global, nt);
            }
            torch::NoGradGuard no_grad;
            const torch::Tensor lpd = logp.detach();
            const torch::Tensor roll = mb.rollout_logp.defined() ? mb.rollout_logp : mb.old_logp;
            s[aLoss] += loss.item<double>();
            s[aPg] += pg_agg.item<double>();
            if (kl.defined()) s[aKl] += (kl.detach() * m).sum().item<double>();
            s[aEnt] += (ent.detach() * m).sum().item<double>();
            s[aClip] += (pg.clipped * m).sum().item<double>();
            s[aClipLow] += (pg.clipped_lower * m).sum().item<double>();
            s[aPpoKl] += ((mb.old_logp - lpd) * m).sum().item<double>();
            s[aDiff] += ((roll - lpd).abs() * m).sum().item<double>();
            s[aTok] += m.sum().item<double>();
            s[aReal] += static_cast<double>(mb.real_tokens);
            s[aSlots] += static_cast<double>(mb.slots());
            return loss;
        },
        /*train=*/true, /*rows_only=*/true);
    return s;
}

}  // namespace

ActorStats ActorWorker::accumulate(const std::vector<TrainSeq>& local, const BatchCounts& global) {
    return actor_stats(actor_sums(*engine_, cfg_, local, global), 1.0);
}

ActorStats ActorWorker::update(const std::vector<TrainSeq>& local, Collectives* comm, const UpdateSchedule& sched) {
    if (sched.epochs < 1) throw ConfigError("actor: epochs must be >= 1");
    const auto chunks = split_chunks(local, sched.mini_batches);
    std::vector<double> sums(aNumSums, 0.0);
    double norm_sum = 0;
    int32_t steps = 0, skipped = 0;
    for (int32_t ep = 0; ep < sched.epochs; ++ep)
        for (const auto& chunk : chunks) {
            const BatchCounts global = allreduce_counts(count_batch(chunk), comm, engine_->device());
            if (!(global.tokens > 0)) continue;  // the same decision on every rank
            const std::vector<double> s = actor_sums(*engine_, cfg_, chunk, global);
            for (size_t i = 0; i < sums.size(); ++i) sums[i] += s[i];
            engine_->allreduce_grads(comm);
            step_if_finite(*engine_, s[aLoss], comm, &norm_sum, &steps, &skipped);
        }
    sums = reduce_sums(sums, comm, engine_->device());
    ActorStats st = actor_stats(sums, steps + skipped);
    st.skipped_steps = skipped;
    st.tokens = static_cast<int64_t>(sums[aTok] / sched.epochs + 0.5);
    st.grad_norm = safe_div(norm_sum, steps);
    st.optimizer_steps = steps;
    return st;
}

// ---- critic ----

CriticWorker::CriticWorker(std::unique_ptr<TrainEngine> engine, const CriticConfig& cfg)
    : engine_(std::move(engine)), cfg_(cfg) {
    if (!engine_) throw ConfigError("critic: no engine");
    if (!engine_->config().trainable) throw ConfigError("critic: the engine is frozen (trainable = false)");
}

std::vector<std::vector<float>> CriticWorker::compute_values(const std::vector<TrainSeq>& batch) {
    std::vector<std::vector<float>> out;
    engine_->forward_backward(
        batch,
        [&](const MicroBatch& mb, const torch::Tensor& values) {
            unpack_response(values, batch, mb, out);
            return torch::Tensor();
        },
        /*train=*/false);
    return out;
}

namespace {

std::vector<double> critic_sums(TrainEngine& engine, const CriticConfig& cfg, const std::vector<TrainSeq>& local,
                                const BatchCounts& global, bool explained_var) {
    std::vector<double> s(cNumSums, 0.0);
    if (local.empty()) return s;
    require(local, &TrainSeq::returns, "critic", "returns");
    if (cfg.clip_range > 0.0) require(local, &TrainSeq::old_values, "critic", "old_values (clip_range > 0)");
    engine.forward_backward(local, [&](const MicroBatch& mb, const torch::Tensor& values) {
        if (values.dim() != 2) throw Error("critic: the model must return values [B,T]");
        const torch::Tensor& m = mb.mask;
        const torch::Tensor old = mb.old_values.defined() ? mb.old_values : values.detach();
        ValueLossTerms vl = value_loss(values, old, mb.returns, cfg.clip_range);
        torch::Tensor loss = agg_loss(vl.loss * mb.weight, mb, cfg.loss_agg, global, cfg.loss_norm_tokens);
        torch::NoGradGuard no_grad;
        const torch::Tensor v = values.detach();
        s[cLoss] += loss.item<double>();
        s[cClip] += (vl.clipped * m).sum().item<double>();
        s[cV] += (v * m).sum().item<double>();
        s[cTok] += m.sum().item<double>();
        if (explained_var) {
            const torch::Tensor e = mb.returns - v;
            s[cR] += (mb.returns * m).sum().item<double>();
            s[cR2] += (mb.returns.pow(2) * m).sum().item<double>();
            s[cE] += (e * m).sum().item<double>();
            s[cE2] += (e.pow(2) * m).sum().item<double>();
            s[cTokEv] += m.sum().item<double>();
        }
        return loss;
    });
    return s;
}

CriticStats critic_stats(const std::vector<double>& s, double steps) {
    CriticStats st;
    st.vf_loss = safe_div(s[cLoss], steps);
    st.vf_clip_frac = safe_div(s[cClip], s[cTok]);
    st.vpred_mean = safe_div(s[cV], s[cTok]);
    st.tokens = static_cast<int64_t>(s[cTok]);
    const double n = s[cTokEv];
    if (n > 0) {
        const double var_r = s[cR2] / n - (s[cR] / n) * (s[cR] / n);
        const double var_e = s[cE2] / n - (s[cE] / n) * (s[cE] / n);
        st.vf_explained_var = var_r > 1e-12 ? 1.0 - var_e / var_r : 0.0;
    }
    return st;
}

}  // namespace

CriticStats CriticWorker::accumulate(const std::vector<TrainSeq>& local, const BatchCounts& global) {
    return critic_stats(critic_sums(*engine_, cfg_, local, global, true), 1.0);
}

CriticStats CriticWorker::update(const std::vector<TrainSeq>& local, Collectives* comm, const UpdateSchedule& sched) {
    if (sched.epochs < 1) throw ConfigError("critic: epochs must be >= 1");
    const auto chunks = split_chunks(local, sched.mini_batches);
    std::vector<double> sums(cNumSums, 0.0);
    double norm_sum = 0;
    int32_t steps = 0, skipped = 0;
    for (int32_t ep = 0; ep < sched.epochs; ++ep)
        for (const auto& chunk : chunks) {
            const BatchCounts global = allreduce_counts(count_batch(chunk), comm, engine_->device());
            if (!(global.tokens > 0)) continue;
            const std::vector<double> s = critic_sums(*engine_, cfg_, chunk, global, ep == 0);
            for (size_t i = 0; i < sums.size(); ++i) sums[i] += s[i];
            engine_->allreduce_grads(comm);
            step_if_finite(*engine_, s[cLoss], comm, &norm_sum, &steps, &skipped);
        }
    sums = reduce_sums(sums, comm, engine_->device());
    CriticStats st = critic_stats(sums, steps + skipped);
    st.skipped_steps = skipped;
    st.tokens = static_cast<int64_t>(sums[cTok] / sched.epochs + 0.5);
    st.grad_norm = safe_div(norm_sum, steps);
    st.optimizer_steps = steps;
    return st;
}

// ---- reference ----

ReferenceWorker::ReferenceWorker(std::unique_ptr<TrainEngine> engine, double temperature)
    : engine_(std::move(engine)), temperature_(temperature) {
    if (!engine_) throw ConfigError("reference: no engine");
    if (!(temperature > 0.0)) throw ConfigError("reference: temperature must be > 0");
}

std::vector<std::vector<float>> ReferenceWorker::compute_ref_log_probs(const std::vector<TrainSeq>& batch) {
    std::vector<std::vector<float>> out;
    engine_->forward_backward(
        batch,
        [&](const MicroBatch& mb, const torch::Tensor& logits) {
            unpack_response(token_log_probs(logits, mb.targets, temperature_), batch, mb, out);
            return torch::Tensor();
        },
        /*train=*/false);
    return out;
}

}  // namespace tagflow::train
