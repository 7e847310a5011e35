// SPDX-License-Identifier: Apache-2.0
// decode_kernels: the fp32 CPU kernels of LlamaSlotDecoder's row-based forward (see
// llama_decode.cpp): every row is one token with its own cache slot and position. Raw float
// pointers, no LibTorch types. Does not allocate, own weights or pick a device.
#pragma once
#include <cstdint>

namespace tagflow::model::decode {

/// Geometry shared by the kernels: q|k|v rows of `ld` = NH*D floats, the layer's cache
/// [2, slots, KV, cap, D].
struct Geo {
    int64_t H, KV, G, D, NH, slots, cap;
};

/// y[r] = x[r] * rsqrt(sum(x[r]^2) + deps), rows of `dm` floats.
void rms_rows(const float* x, float* y, int64_t R, int64_t dm, float deps);

/// Qwen3's per-head RMSNorm in place on the q heads (weight qw) and k heads (weight kw) of
/// each row: x * rsqrt(mean(x^2) + eps) * w over each head's D floats.
void head_norm_rows(float* qkv, int64_t R, const Geo& g, const float* qw, const float* kw, float eps);

/// RoPE in place on the q and k heads (the first H + KV heads) of each row, at the row's
/// position; `sin_tab` has its first half negated (rotate_half folded in).
void rope_rows(float* qkv, const int64_t* pos, int64_t R, const Geo& g, const float* cos_tab, const float* sin_tab);

/// Copies the k and v heads of each row into its cache slot at its position.
void store_rows(const float* qkv, float* cache, const int64_t* slot, const int64_t* pos, int64_t R, const Geo& g);

/// act[r, j] = silu(gu[r, j]) * gu[r, F + j] (SwiGLU), rows of 2F and F floats.
void silu_mul_rows(const float* gu, float* act, int64_t R, int64_t F);

// The Fortran BLAS sgemm_ that LibTorch itself calls (libblas.so.3, OpenBLAS here), looked up
// at run time: at::mm_out on a narrowed workspace costs ~4 dispatched ops per GEMM (~20 per
// decode step), the direct call none. Null: use at::mm_out/addmm_.
using SgemmFn = void(const char*, const char*, const int*, const int*, const int*, const float*, const float*,
                     const int*, const float*, const int*, const float*, float*, const int*);

SgemmFn* blas_sgemm();

/// Row-major c[M, N] = x[M, K] w[K, N] + beta * c, all contiguous (column-major c^T = w^T x^T).
void gemm_rows(SgemmFn* sgemm, const float* x, const float* w, float* c, int64_t M, int64_t K, int64_t N, float beta);

/// Causal attention of R rows: row r's q heads (pre-scaled, rotated) against keys/values
/// 0..pos[r] of cache slot slot[r] (its own k/v already stored there); out [R, H*D].
void attend_rows(const float* qkv, const float* cache, float* out, const int64_t* slot, const int64_t* pos, int64_t R,
                 const Geo& g);

}  // namespace tagflow::model::decode
