// SPDX-License-Identifier: Apache-2.0
// sampling: batched inverse-CDF sampling with per-row temperature/top-k/top-p and per-row
// uniform draws from counter-based streams. See sampling.hpp.
#include "rollout/sampling.hpp"

#include <algorithm>
#include <cmath>

#include <torch/torch.h>

namespace tagflow::rollout {

uint64_t mix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

uint64_t derive_seed(uint64_t base, uint64_t index) {
    return mix64(mix64(base) ^ mix64(index ^ 0x632BE59BD9B4E019ull));
}

double stream_uniform(uint64_t seed, uint64_t t) {
    // Output t of a splitmix64 sequence started at mix64(seed).
    const uint64_t r = mix64(mix64(seed) + t * 0x9E3779B97F4A7C15ull);
    return static_cast<double>(r >> 11) * 0x1.0p-53;
}

namespace {

// Index of the first entry of each row of the non-decreasing `cdf` [n, V] that exceeds
// u * total, clamped to the entry where the row reaches its total (the last token with
// positive mass), so rounding can never select a token of zero mass.
torch::Tensor pick(const torch::Tensor& cdf, const torch::Tensor& u) {
    const int64_t V = cdf.size(-1);
    const torch::Tensor total = cdf.narrow(-1, V - 1, 1);
    const torch::Tensor below = (cdf <= total * u).sum(-1);
    const torch::Tensor last = (cdf < total).sum(-1);
    return torch::minimum(below, last);
}

torch::Tensor column(const std::vector<float>& v) {
    return torch::from_blob(const_cast<float*>(v.data()), {static_cast<int64_t>(v.size()), 1}, torch::kFloat).clone();
}

}  // namespace

torch::Tensor sample_rows(const torch::Tensor& logits, const std::vector<RowSampling>& rows, torch::Tensor& logprobs) {
    TORCH_CHECK(logits.dim() == 2 && logits.size(0) == static_cast<int64_t>(rows.size()),
                "sample_rows: logits must be [rows, V]");
    const torch::Tensor lf = logits.to(torch::kFloat);
    const int64_t n = lf.size(0), V = lf.size(1);
    bool any_greedy = false, all_greedy = true, any_topk = false, any_topp = false, any_plain = false, same_t = true;
    double t0 = -1;
    std::vector<uint8_t> plain(rows.size(), 0);  // sampled rows without a filter
    for (std::size_t i = 0; i < rows.size(); ++i) {
        const RowSampling& r = rows[i];
        const bool g = r.temperature <= 0.0;
        any_greedy |= g;
        all_greedy &= g;
        if (g) continue;
        const bool k = r.top_k > 0 && r.top_k < V, p = r.top_p < 1.0;
        any_topk |= k;
        any_topp |= p;
        plain[i] = !k && !p;
        any_plain |= plain[i] != 0;
        if (t0 < 0) t0 = r.temperature;
        same_t &= r.temperature == t0;
    }
    torch::Tensor tok;
    if (all_greedy) {
        logprobs = torch::log_softmax(lf, -1);
        tok = lf.argmax(-1);
    } else {
        std::vector<float> temp(static_cast<std::size_t>(n)), u(static_cast<std::size_t>(n));
        for (int64_t i = 0; i < n; ++i) {
            const RowSampling& r = rows[static_cast<std::size_t>(i)];
            temp[static_cast<std::size_t>(i)] = r.temperature <= 0.0 ? 1.0f : static_cast<float>(r.temperature);
            // A float strictly below 1, so that u * total < total.
            u[static_cast<std::size_t>(i)] = std::min(static_cast<float>(r.u), std::nextafter(1.0f, 0.0f));
        }
        torch::Tensor scaled = lf;
        if (same_t && !any_greedy) {
            if (t0 != 1.0) scaled = lf / t0;
        } else {
            scaled = lf / column(temp);
        }
        logprobs = torch::log_softmax(scaled, -1);
        const torch::Tensor probs = logprobs.exp();
        const torch::Tensor ucol = column(u);
        if (!any_topk && !any_topp) {
            tok = pick(probs.cumsum(-1), ucol);
        } else {
            // Order by the raw logits (the same order for every temperature; stable, so ties
            // keep index order like argmax).
            const torch::Tensor idx = std::get<1>(torch::sort(lf, /*stable=*/true, /*dim=*/-1, /*descending=*/true));
            torch::Tensor vals = probs.gather(-1, idx);
            torch::Tensor drop;
            if (any_topk) {
                std::vector<float> k(static_cast<std::size_t>(n));
                for (int64_t i = 0; i < n; ++i) {
                    const int32_t kk = rows[static_cast<std::size_t>(i)].top_k;
                    k[static_cast<std::size_t>(i)] = static_cast<float>(kk > 0 && kk < V ? kk : V);
                }
                drop = torch::arange(V, torch::kFloat).unsqueeze(0) >= column(k);
            }
            if (any_topp) {
                std::vector<float> p(static_cast<std::size_t>(n));
                for (int64_t i = 0; i < n; ++i) {
                    const double pp = rows[static_cast<std::size_t>(i)].top_p;
                    p[static_cast<std::size_t>(i)] = pp < 1.0 ? static_cast<float>(pp) : 2.0f;  // 2: keep all
                }
                // Drop a token when the mass strictly before it already reaches top_p.
                torch::Tensor d = (vals.cumsum(-1) - vals) >= column(p);
                d.select(-1, 0).fill_(false);
                drop = drop.defined() ? drop.logical_or(d) : d;
            }
            vals = vals.masked_fill(drop, 0.0);
            tok = idx.gather(-1, pick(vals.cumsum(-1), ucol).unsqueeze(-1)).squeeze(-1);
            // Unfiltered rows always walk the CDF in index order, so that a row's token does
            // not depend on whether other rows of the batch filter.
            if (any_plain) {
                const torch::Tensor pm = torch::from_blob(plain.data(), {n}, torch::kBool).clone();
                tok = torch::where(pm, pick(probs.cumsum(-1), ucol), tok);
            }
        }
        if (any_greedy) {
            std::vector<uint8_t> g(static_cast<std::size_t>(n));
            for (int64_t i = 0; i < n; ++i)
                g[static_cast<std::size_t>(i)] = rows[static_cast<std::size_t>(i)].temperature <= 0.0;
            const torch::Tensor gm = torch::from_blob(g.data(), {n}, torch::kBool).clone();
            tok = torch::where(gm, lf.argmax(-1), tok);
        }
    }
    logprobs = logprobs.gather(-1, tok.unsqueeze(-1)).squeeze(-1);
    return tok;
}

}  // namespace tagflow::rollout
