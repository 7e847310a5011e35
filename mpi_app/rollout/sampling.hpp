// SPDX-License-Identifier: Apache-2.0
// sampling: the engine's batched next-token sampler (temperature, top-k, top-p and greedy,
// possibly different for every row) and the per-request random streams that make a
// request's completion independent of its batch, slot and neighbours.
// Does not run the model or schedule requests (see engine.hpp).
#pragma once
#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

namespace tagflow::rollout {

/// A 64-bit mix (splitmix64 finaliser); exposed for tests.
uint64_t mix64(uint64_t x);
/// The seed of request `index` derived from a base seed (e.g. run seed, prompt number).
uint64_t derive_seed(uint64_t base, uint64_t index);
/// The uniform draw in [0, 1) that request stream `seed` uses for its response token `t`.
/// Counter-based: no state, so the draw does not depend on what else was sampled.
double stream_uniform(uint64_t seed, uint64_t t);

/// How one row is sampled.
struct RowSampling {
    double temperature = 1.0;  ///< <= 0: greedy (argmax of the raw logits)
    double top_p = 1.0;        ///< keep the most likely tokens until their mass reaches top_p
    int32_t top_k = 0;         ///< keep the k most likely tokens; 0 = all
    double u = 0.5;            ///< this row's uniform draw in [0, 1) (stream_uniform)
};

/// Picks one token per row of `logits` [n, V] (any float dtype) by inverse-CDF sampling with
/// the row's `u` over the filtered distribution: softmax(logits / T) restricted to the tokens
/// that pass both filters (top-k on the rank, top-p on the mass of the *unfiltered*
/// distribution before the token; the most likely token always passes). A filtered-out or
/// zero-probability token is never returned. A row with a filter walks its CDF in descending-logit
/// order, a row without one in token-id order (so no sort is needed when no row filters), each
/// independently of the other rows of the batch. Greedy rows and top_k = 1 rows return the argmax
/// (first index among ties). Returns tokens int64 [n] and writes `logprobs` float [n]:
/// log_softmax(logits / T)[token] before filtering (plain log_softmax for greedy rows).
at::Tensor sample_rows(const at::Tensor& logits, const std::vector<RowSampling>& rows, at::Tensor& logprobs);

}  // namespace tagflow::rollout
