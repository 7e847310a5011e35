// SPDX-License-Identifier: Apache-2.0
// objectives_driver: tagflow's side of the golden objective tests (tests/train/golden_objectives.py).
// Reads cases from stdin and writes tagflow's outputs to stdout, both in a plain line format:
//   begin KIND            one case; KIND is adv, kl, ppo or agg
//   KEY v1 v2 ...         numbers (none: an empty vector), or
//   KEY word              a name (estimator, KL mode, aggregation mode)
//   end
// adv: train::compute_advantages on samples i = 0..n-1 (keys g.i score.i len.i mask.i values.i
//      lp.i ref.i) -> adv.i ret.i seq_adv kl_mean.
// kl:  train::kl_value and train::kl_penalty per element, and d(token-mean of the masked KL)/d lp.
// ppo: train::ppo_policy_loss + agg_loss on [rows, cols] tensors -> per-token loss, clip masks,
//      the aggregated loss and its gradient with respect to lp.
// agg: train::agg_loss of x under mask -> value.
// tis: off-policy correction of [rows, cols] sequences (train::apply_rollout_correction on TrainSeqs
//      with proximal log-probs `old`, behaviour log-probs `beh` and mask), packed by
//      train::pack_micro_batch, then ppo_policy_loss with the packed importance weights and agg_loss
//      over the corrected global counts (plus other ranks' `extra_tokens`/`extra_seqs`) -> weights,
//      rejected rows, ratio_max per row, the batch statistics, loss and d loss / d lp. With
//      batch_norm 1 the weights are divided by the batch's mean weight, other ranks' weights
//      (extra_norm_sum over extra_norm_count of them) included.
// Does not compute any reference value: the Python side does, from the published definitions.
#include <cctype>
#include <cstdio>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "common/error.hpp"
#include "train/algorithms.hpp"
#include "train/losses.hpp"
#include "train/rollout_correction.hpp"
#include "train/workers.hpp"

namespace {

using tagflow::train::AdvConfig;
using tagflow::train::AdvSample;
using tagflow::train::BatchCounts;

struct Case {
    std::string kind;
    std::map<std::string, std::vector<double>> num;
    std::map<std::string, std::string> word;

    const std::vector<double>& v(const std::string& k) const {
        auto it = num.find(k);
        if (it == num.end()) throw tagflow::Error("case " + kind + ": missing key " + k);
        return it->second;
    }
    double d(const std::string& k) const {
        const auto& x = v(k);
        if (x.size() != 1) throw tagflow::Error("case " + kind + ": key " + k + " must hold one number");
        return x[0];
    }
    const std::string& w(const std::string& k) const {
        auto it = word.find(k);
        if (it == word.end()) throw tagflow::Error("case " + kind + ": missing name " + k);
        return it->second;
    }
};

void put(std::ostream& out, const std::string& key, const std::vector<double>& x) {
    out << key;
    char b[40];
    for (double e : x) {
        std::snprintf(b, sizeof b, " %.17g", e);
        out << b;
    }
    out << '\n';
}

template <class T>
std::vector<double> to_d(const std::vector<T>& x) {
    return std::vector<double>(x.begin(), x.end());
}

std::vector<double> to_d(const torch::Tensor& t) {
    torch::Tensor c = t.detach().to(torch::kFloat64).contiguous().view({-1});
    return std::vector<double>(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
}

torch::Tensor tensor(const std::vector<double>& x, int64_t rows, int64_t cols) {
    if (static_cast<int64_t>(x.size()) != rows * cols) throw tagflow::Error("tensor: size does not match rows x cols");
    std::vector<float> f(x.begin(), x.end());
    return torch::tensor(f).view({rows, cols});
}

void run_adv(const Case& c, std::ostream& out) {
    AdvConfig cfg;
    cfg.estimator = tagflow::train::parse_adv_estimator(c.w("estimator"));
    cfg.kl_mode = tagflow::train::parse_kl_mode(c.w("kl_mode"));
    cfg.norm_adv_by_std = c.d("norm_std") != 0;
    cfg.grpo_unbiased_std = c.d("unbiased") != 0;
    cfg.gamma = c.d("gamma");
    cfg.lam = c.d("lam");
    cfg.kl_in_reward = c.d("kl_in_reward") != 0;
    cfg.kl_coef = c.d("kl_coef");
    cfg.whiten = c.d("whiten") != 0;
    const auto n = static_cast<size_t>(c.d("n"));
    std::vector<AdvSample> s(n);
    for (size_t i = 0; i < n; ++i) {
        const std::string k = "." + std::to_string(i);
        s[i].group = static_cast<int64_t>(c.d("g" + k));
        s[i].score = static_cast<float>(c.d("score" + k));
        s[i].n_resp = static_cast<size_t>(c.d("len" + k));
        for (double m : c.v("mask" + k)) s[i].mask.push_back(m != 0 ? 1 : 0);
        for (double x : c.v("values" + k)) s[i].values.push_back(static_cast<float>(x));
        for (double x : c.v("lp" + k)) s[i].logprobs.push_back(static_cast<float>(x));
        for (double x : c.v("ref" + k)) s[i].ref_logprobs.push_back(static_cast<float>(x));
    }
    const tagflow::train::AdvResult r = tagflow::train::compute_advantages(cfg, s);
    for (size_t i = 0; i < n; ++i) {
        put(out, "adv." + std::to_string(i), to_d(r.advantages[i]));
        put(out, "ret." + std::to_string(i), to_d(r.returns[i]));
    }
    put(out, "seq_adv", to_d(r.seq_advantages));
    put(out, "kl_mean", {r.kl_mean});
}

void run_kl(const Case& c, std::ostream& out) {
    const tagflow::train::KlMode mode = tagflow::train::parse_kl_mode(c.w("mode"));
    const std::vector<double>& lp = c.v("lp");
    const std::vector<double>& ref = c.v("ref");
    const std::vector<double>& mask = c.v("mask");
    const auto n = static_cast<int64_t>(lp.size());
    std::vector<double> scalar;
    for (size_t j = 0; j < lp.size(); ++j)
        scalar.push_back(tagflow::train::kl_value(static_cast<float>(lp[j]), static_cast<float>(ref[j]), mode));
    torch::Tensor tlp = tensor(lp, 1, n).requires_grad_(true);
    torch::Tensor k = tagflow::train::kl_penalty(tlp, tensor(ref, 1, n), mode);
    double tokens = 0;
    for (double m : mask) tokens += m;
    torch::Tensor loss = tagflow::train::agg_loss(k, tensor(mask, 1, n), tagflow::train::LossAgg::kTokenMean,
                                                  BatchCounts{tokens > 0 ? tokens : 1, 1});
    loss.backward();
    put(out, "kl_scalar", scalar);
    put(out, "kl_tensor", to_d(k));
    put(out, "loss", {loss.item<double>()});
    put(out, "grad", to_d(tlp.grad()));
}

void run_ppo(const Case& c, std::ostream& out) {
    const auto rows = static_cast<int64_t>(c.d("rows")), cols = static_cast<int64_t>(c.d("cols"));
    torch::Tensor lp = tensor(c.v("lp"), rows, cols).requires_grad_(true);
    const tagflow::train::PolicyLossTerms t =
        tagflow::train::ppo_policy_loss(lp, tensor(c.v("old"), rows, cols), tensor(c.v("adv"), rows, cols),
                                        c.d("clip_low"), c.d("clip_high"), c.d("dual_clip"));
    const torch::Tensor loss =
        tagflow::train::agg_loss(t.loss, tensor(c.v("mask"), rows, cols), tagflow::train::parse_loss_agg(c.w("agg")),
                                 BatchCounts{c.d("tokens"), c.d("seqs")}, c.d("norm_tokens"));
    loss.backward();
    put(out, "loss_tok", to_d(t.loss));
    put(out, "clipped", to_d(t.clipped));
    put(out, "clipped_lower", to_d(t.clipped_lower));
    put(out, "loss", {loss.item<double>()});
    put(out, "grad", to_d(lp.grad()));
}

void run_tis(const Case& c, std::ostream& out) {
    const auto rows = static_cast<int64_t>(c.d("rows")), cols = static_cast<int64_t>(c.d("cols"));
    tagflow::train::RolloutCorrectionConfig cfg;
    cfg.is = tagflow::train::parse_is_level(c.w("is"));
    cfg.is_threshold = c.d("cap");
    cfg.rs = tagflow::train::parse_rs_level(c.w("rs"));
    cfg.rs_upper = c.d("rs_upper");
    cfg.rs_lower = c.d("rs_lower");
    cfg.veto = c.d("veto");
    const std::vector<double>&old = c.v("old"), &beh = c.v("beh"), &mask = c.v("mask"), &adv = c.v("adv");
    std::vector<tagflow::train::TrainSeq> batch(static_cast<size_t>(rows));
    std::vector<double> ratio_max, rejected;
    for (int64_t r = 0; r < rows; ++r) {
        tagflow::train::TrainSeq& s = batch[static_cast<size_t>(r)];
        s.prompt_len = 1;
        s.tokens.assign(static_cast<size_t>(cols + 1), 1);
        for (int64_t j = 0; j < cols; ++j) {
            const auto k = static_cast<size_t>(r * cols + j);
            s.old_logprobs.push_back(static_cast<float>(old[k]));
            s.rollout_logprobs.push_back(static_cast<float>(beh[k]));
            s.loss_mask.push_back(mask[k] != 0 ? 1 : 0);
            s.advantages.push_back(static_cast<float>(adv[k]));
        }
        const tagflow::train::SeqCorrection one =
            tagflow::train::correct_sequence(s.old_logprobs, s.rollout_logprobs, s.loss_mask, cfg);
        ratio_max.push_back(one.ratio_max);
        rejected.push_back(one.rejected ? 1 : 0);
    }
    const tagflow::train::CorrectionStats st = tagflow::train::apply_rollout_correction(batch, cfg);
    if (c.d("batch_norm") != 0 && cfg.is != tagflow::train::IsLevel::kOff)  // as RlTrainer: other ranks' sums added
        tagflow::train::scale_is_weights(batch,
                                         tagflow::train::batch_norm_factor(st.norm_sum + c.d("extra_norm_sum"),
                                                                           st.norm_count + c.d("extra_norm_count")));
    BatchCounts global = tagflow::train::count_batch(batch);
    global.tokens += c.d("extra_tokens");
    global.seqs += c.d("extra_seqs");
    const tagflow::train::MicroBatch mb =
        tagflow::train::pack_micro_batch(batch, 0, batch.size(), torch::Device(torch::kCPU));
    torch::Tensor lp = tensor(c.v("lp"), rows, cols).requires_grad_(true);
    const tagflow::train::PolicyLossTerms t = tagflow::train::ppo_policy_loss(
        lp, mb.old_logp, mb.adv, c.d("clip_low"), c.d("clip_high"), c.d("dual_clip"), mb.is_w);
    double loss_v = 0;
    if (global.tokens > 0) {
        const torch::Tensor loss = tagflow::train::agg_loss(t.loss, mb.mask, tagflow::train::parse_loss_agg(c.w("agg")),
                                                            global, c.d("norm_tokens"));
        loss.backward();
        loss_v = loss.item<double>();
    }
    put(out, "weights", mb.is_w.defined() ? to_d(mb.is_w.expand({rows, cols})) : std::vector<double>());
    put(out, "rejected", rejected);
    put(out, "ratio_max", ratio_max);
    put(out, "weight_mean", {st.weight_mean()});
    put(out, "stat_ratio_max", {st.ratio_max});
    put(out, "stat_rejected", {static_cast<double>(st.rejected)});
    put(out, "stat_rejected_tokens", {static_cast<double>(st.rejected_tokens)});
    put(out, "loss", {loss_v});
    put(out, "grad",
        lp.grad().defined() ? to_d(lp.grad()) : std::vector<double>(static_cast<size_t>(rows * cols), 0.0));
}

void run_agg(const Case& c, std::ostream& out) {
    const auto rows = static_cast<int64_t>(c.d("rows")), cols = static_cast<int64_t>(c.d("cols"));
    const torch::Tensor v = tagflow::train::agg_loss(tensor(c.v("x"), rows, cols), tensor(c.v("mask"), rows, cols),
                                                     tagflow::train::parse_loss_agg(c.w("agg")),
                                                     BatchCounts{c.d("tokens"), c.d("seqs")}, c.d("norm_tokens"));
    put(out, "value", {v.item<double>()});
}

}  // namespace

int main() {
    try {
        std::string line;
        Case c;
        bool open = false;
        int64_t line_no = 0;
        while (std::getline(std::cin, line)) {
            ++line_no;
            std::istringstream in(line);
            std::string key;
            if (!(in >> key)) continue;
            if (key == "begin") {
                c = Case{};
                in >> c.kind;
                open = true;
                continue;
            }
            if (!open) throw tagflow::Error("line " + std::to_string(line_no) + ": outside a case");
            if (key == "end") {
                std::cout << "begin " << c.kind << '\n';
                if (c.kind == "adv") run_adv(c, std::cout);
                else if (c.kind == "kl") run_kl(c, std::cout);
                else if (c.kind == "ppo") run_ppo(c, std::cout);
                else if (c.kind == "agg") run_agg(c, std::cout);
                else if (c.kind == "tis") run_tis(c, std::cout);
                else throw tagflow::Error("line " + std::to_string(line_no) + ": unknown case kind " + c.kind);
                std::cout << "end\n";
                open = false;
                continue;
            }
            std::vector<std::string> tok;
            for (std::string t; in >> t;) tok.push_back(t);
            if (tok.size() == 1 && !tok[0].empty() && (std::isalpha(static_cast<unsigned char>(tok[0][0])) != 0) &&
                tok[0] != "nan" && tok[0] != "inf") {
                c.word[key] = tok[0];
                continue;
            }
            std::vector<double> x;
            for (const std::string& t : tok) x.push_back(std::stod(t));
            c.num[key] = x;
        }
        std::cout.flush();
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "objectives_driver: %s\n", e.what());
        return 1;
    }
}
