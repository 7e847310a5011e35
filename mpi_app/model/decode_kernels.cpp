// SPDX-License-Identifier: Apache-2.0
// decode_kernels: the fp32 CPU kernels of LlamaSlotDecoder's row-based forward (llama_decode.cpp),
// over raw float rows: RMSNorm, Qwen3's per-head q/k norm, RoPE, k/v cache stores, SwiGLU, the
// direct BLAS sgemm_ and the fused causal attention (AVX2/FMA when the CPU has it). No LibTorch
// tensors (ATen's parallel_for only), so they compile in seconds and can be tested alone.
// Does not own weights or caches, and has no bf16 or device path (llama_decode.cpp does).
#include "model/decode_kernels.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <ATen/Parallel.h>

namespace tagflow::model::decode {

/// y[r] = x[r] * rsqrt(sum(x[r]^2) + deps), rows of `dm` floats.
void rms_rows(const float* x, float* y, int64_t R, int64_t dm, float deps) {
    at::parallel_for(0, R, 64, [&](int64_t lo, int64_t hi) {
        for (int64_t r = lo; r < hi; ++r) {
            const float* a = x + r * dm;
            float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            int64_t i = 0;
            for (; i + 8 <= dm; i += 8)
                for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * a[i + j];
            float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
            for (; i < dm; ++i) s += a[i] * a[i];
            const float k = 1.0f / std::sqrt(s + deps);
            float* o = y + r * dm;
            for (i = 0; i < dm; ++i) o[i] = a[i] * k;
        }
    });
}

/// Qwen3's per-head RMSNorm in place on the q heads (weight qw) and k heads (weight kw) of
/// each row: x * rsqrt(mean(x^2) + eps) * w over each head's D floats.
void head_norm_rows(float* qkv, int64_t R, const Geo& g, const float* qw, const float* kw, float eps) {
    const int64_t ld = g.NH * g.D, heads = g.H + g.KV;
    at::parallel_for(0, R, 64, [&](int64_t lo, int64_t hi) {
        for (int64_t r = lo; r < hi; ++r) {
            for (int64_t h = 0; h < heads; ++h) {
                float* x = qkv + r * ld + h * g.D;
                const float* w = h < g.H ? qw : kw;
                float s = 0;
                for (int64_t i = 0; i < g.D; ++i) s += x[i] * x[i];
                const float k = 1.0f / std::sqrt(s / static_cast<float>(g.D) + eps);
                for (int64_t i = 0; i < g.D; ++i) x[i] = x[i] * k * w[i];
            }
        }
    });
}

/// RoPE in place on the q and k heads (the first H + KV heads) of each row, at the row's
/// position; `sin_tab` has its first half negated (rotate_half folded in).
void rope_rows(float* qkv, const int64_t* pos, int64_t R, const Geo& g, const float* cos_tab, const float* sin_tab) {
    const int64_t half = g.D / 2, heads = g.H + g.KV, ld = g.NH * g.D;
    at::parallel_for(0, R, 64, [&](int64_t lo, int64_t hi) {
        for (int64_t r = lo; r < hi; ++r) {
            const float* c = cos_tab + pos[r] * g.D;
            const float* s = sin_tab + pos[r] * g.D;
            for (int64_t h = 0; h < heads; ++h) {
                float* x = qkv + r * ld + h * g.D;
                for (int64_t i = 0; i < half; ++i) {
                    const float x1 = x[i], x2 = x[i + half];
                    x[i] = x1 * c[i] + x2 * s[i];
                    x[i + half] = x2 * c[i + half] + x1 * s[i + half];
                }
            }
        }
    });
}

/// Copies the k and v heads of each row into its cache slot at its position.
void store_rows(const float* qkv, float* cache, const int64_t* slot, const int64_t* pos, int64_t R, const Geo& g) {
    const int64_t ld = g.NH * g.D;
    for (int64_t r = 0; r < R; ++r)
        for (int64_t t = 0; t < 2 * g.KV; ++t)  // t < KV: k head t; else v head t - KV
            std::memcpy(cache + ((((t / g.KV) * g.slots + slot[r]) * g.KV + t % g.KV) * g.cap + pos[r]) * g.D,
                        qkv + r * ld + (g.H + t) * g.D, static_cast<std::size_t>(g.D) * sizeof(float));
}

namespace {

/// One query head over keys/values 0..n-1 (rows of D floats): o = softmax(q K^T) V.
/// `buf` holds at least n rounded up to 8 floats.
void head_scalar(const float* q, const float* K, const float* V, int64_t n, int64_t D, float* buf, float* o) {
    float m = -std::numeric_limits<float>::infinity();
    for (int64_t t = 0; t < n; ++t) {
        const float* k = K + t * D;
        float s = 0;
        for (int64_t d = 0; d < D; ++d) s += q[d] * k[d];
        buf[t] = s;
        m = std::max(m, s);
    }
    float sum = 0;
    for (int64_t t = 0; t < n; ++t) sum += (buf[t] = std::exp(buf[t] - m));
    for (int64_t d = 0; d < D; ++d) o[d] = 0;
    for (int64_t t = 0; t < n; ++t) {
        const float p = buf[t];
        const float* v = V + t * D;
        for (int64_t d = 0; d < D; ++d) o[d] += p * v[d];
    }
    const float inv = 1.0f / sum;
    for (int64_t d = 0; d < D; ++d) o[d] *= inv;
}

#if defined(__x86_64__)
#define TAGFLOW_AVX2 __attribute__((target("avx2,fma")))

/// exp of 8 floats (Cephes' expf polynomial, ~1 ulp over the range that matters here;
/// inputs <= -88.4, -inf included, give 0).
TAGFLOW_AVX2 inline __m256 exp8(__m256 x) {
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-88.3762626647949f)), _mm256_set1_ps(88.3762626647949f));
    __m256 fx = _mm256_floor_ps(_mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), _mm256_set1_ps(0.5f)));
    x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
    x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), x);
    __m256 y = _mm256_set1_ps(1.9875691500E-4f);
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.3981999507E-3f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(8.3334519073E-3f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(4.1665795894E-2f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.6666665459E-1f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(5.0000001201E-1f));
    y = _mm256_fmadd_ps(y, _mm256_mul_ps(x, x), _mm256_add_ps(x, _mm256_set1_ps(1.0f)));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(fx), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}

TAGFLOW_AVX2 inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_hadd_ps(s, s);
    s = _mm_hadd_ps(s, s);
    return _mm_cvtss_f32(s);
}

TAGFLOW_AVX2 inline float hmax8(__m256 v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}

/// head_scalar with AVX2/FMA; D must be a multiple of 8.
TAGFLOW_AVX2 void head_avx2(const float* q, const float* K, const float* V, int64_t n, int64_t D, float* buf,
                            float* o) {
    // Scores, four keys at a time (four independent FMA chains, one transposing reduction).
    int64_t t = 0;
    for (; t + 4 <= n; t += 4) {
        const float* k = K + t * D;
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int64_t d = 0; d < D; d += 8) {
            const __m256 qv = _mm256_loadu_ps(q + d);
            a0 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k + d), a0);
            a1 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k + D + d), a1);
            a2 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k + 2 * D + d), a2);
            a3 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k + 3 * D + d), a3);
        }
        const __m256 s = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
        _mm_storeu_ps(buf + t, _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1)));
    }
    for (; t < n; ++t) {
        __m256 a = _mm256_setzero_ps();
        for (int64_t d = 0; d < D; d += 8)
            a = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), _mm256_loadu_ps(K + t * D + d), a);
        buf[t] = hsum8(a);
    }
    const int64_t n8 = (n + 7) / 8 * 8;
    for (t = n; t < n8; ++t) buf[t] = -std::numeric_limits<float>::infinity();  // exp -> 0
    __m256 mv = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
    for (t = 0; t < n8; t += 8) mv = _mm256_max_ps(mv, _mm256_loadu_ps(buf + t));
    const __m256 m = _mm256_set1_ps(hmax8(mv));
    __m256 sv = _mm256_setzero_ps();
    for (t = 0; t < n8; t += 8) {
        const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(buf + t), m));
        _mm256_storeu_ps(buf + t, e);
        sv = _mm256_add_ps(sv, e);
    }
    const __m256 inv = _mm256_set1_ps(1.0f / hsum8(sv));
    // o = (sum_t p_t v_t) / sum, 32 output floats (four FMA chains) at a time where possible.
    int64_t d = 0;
    for (; d + 32 <= D; d += 32) {
        __m256 o0 = _mm256_setzero_ps(), o1 = o0, o2 = o0, o3 = o0;
        for (t = 0; t < n; ++t) {
            const __m256 p = _mm256_broadcast_ss(buf + t);
            const float* v = V + t * D + d;
            o0 = _mm256_fmadd_ps(p, _mm256_loadu_ps(v), o0);
            o1 = _mm256_fmadd_ps(p, _mm256_loadu_ps(v + 8), o1);
            o2 = _mm256_fmadd_ps(p, _mm256_loadu_ps(v + 16), o2);
            o3 = _mm256_fmadd_ps(p, _mm256_loadu_ps(v + 24), o3);
        }
        _mm256_storeu_ps(o + d, _mm256_mul_ps(o0, inv));
        _mm256_storeu_ps(o + d + 8, _mm256_mul_ps(o1, inv));
        _mm256_storeu_ps(o + d + 16, _mm256_mul_ps(o2, inv));
        _mm256_storeu_ps(o + d + 24, _mm256_mul_ps(o3, inv));
    }
    for (; d < D; d += 8) {
        __m256 o0 = _mm256_setzero_ps();
        for (t = 0; t < n; ++t) o0 = _mm256_fmadd_ps(_mm256_broadcast_ss(buf + t), _mm256_loadu_ps(V + t * D + d), o0);
        _mm256_storeu_ps(o + d, _mm256_mul_ps(o0, inv));
    }
}

/// silu(g) * u over the first F & ~7 floats; returns how many it did.
TAGFLOW_AVX2 int64_t silu_mul_avx2(const float* g, const float* u, float* a, int64_t F) {
    const __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + 8 <= F; j += 8) {
        const __m256 gv = _mm256_loadu_ps(g + j);
        const __m256 sig = _mm256_div_ps(gv, _mm256_add_ps(one, exp8(_mm256_sub_ps(zero, gv))));
        _mm256_storeu_ps(a + j, _mm256_mul_ps(sig, _mm256_loadu_ps(u + j)));
    }
    return j;
}

bool cpu_has_avx2() {
    static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    return yes;
}
#endif

}  // namespace

/// act[r, j] = silu(gu[r, j]) * gu[r, F + j] (SwiGLU), rows of 2F and F floats.
void silu_mul_rows(const float* gu, float* act, int64_t R, int64_t F) {
    bool avx2 = false;
#if defined(__x86_64__)
    avx2 = cpu_has_avx2();
#endif
    at::parallel_for(0, R, 16, [&](int64_t lo, int64_t hi) {
        for (int64_t r = lo; r < hi; ++r) {
            const float* g = gu + r * 2 * F;
            const float* u = g + F;
            float* a = act + r * F;
            int64_t j = 0;
#if defined(__x86_64__)
            if (avx2) j = silu_mul_avx2(g, u, a, F);
#endif
            for (; j < F; ++j) a[j] = g[j] / (1.0f + std::exp(-g[j])) * u[j];
        }
    });
}

// The Fortran BLAS sgemm_ that LibTorch itself calls (libblas.so.3, OpenBLAS here), looked up
// at run time: at::mm_out on a narrowed workspace costs ~4 dispatched ops per GEMM (~20 per
// decode step), the direct call none. Null: use at::mm_out/addmm_.
using SgemmFn = void(const char*, const char*, const int*, const int*, const int*, const float*, const float*,
                     const int*, const float*, const int*, const float*, float*, const int*);
SgemmFn* blas_sgemm() {
    static SgemmFn* f = reinterpret_cast<SgemmFn*>(dlsym(RTLD_DEFAULT, "sgemm_"));
    return f;
}

/// Row-major c[M, N] = x[M, K] w[K, N] + beta * c, all contiguous (column-major c^T = w^T x^T).
void gemm_rows(SgemmFn* sgemm, const float* x, const float* w, float* c, int64_t M, int64_t K, int64_t N, float beta) {
    const int m = static_cast<int>(N), n = static_cast<int>(M), k = static_cast<int>(K);
    const float one = 1.0f;
    sgemm("N", "N", &m, &n, &k, &one, w, &m, x, &k, &beta, c, &m);
}

/// Causal attention of R rows: row r's q heads (pre-scaled, rotated) against keys/values
/// 0..pos[r] of cache slot slot[r] (its own k/v already stored there); out [R, H*D].
void attend_rows(const float* qkv, const float* cache, float* out, const int64_t* slot, const int64_t* pos, int64_t R,
                 const Geo& g) {
    const int64_t ld = g.NH * g.D;
    const float* vbase = cache + g.slots * g.KV * g.cap * g.D;
    bool avx2 = false;
#if defined(__x86_64__)
    avx2 = g.D % 8 == 0 && cpu_has_avx2();
#endif
    at::parallel_for(0, R * g.KV, 16, [&](int64_t lo, int64_t hi) {
        std::vector<float> buf(static_cast<std::size_t>((g.cap + 7) / 8 * 8));
        for (int64_t i = lo; i < hi; ++i) {
            const int64_t r = i / g.KV, h = i % g.KV, n = pos[r] + 1;
            const int64_t off = (slot[r] * g.KV + h) * g.cap * g.D;
            for (int64_t j = 0; j < g.G; ++j) {
                const int64_t hh = h * g.G + j;
                const float* q = qkv + r * ld + hh * g.D;
                float* o = out + (r * g.H + hh) * g.D;
#if defined(__x86_64__)
                if (avx2) {
                    head_avx2(q, cache + off, vbase + off, n, g.D, buf.data(), o);
                    continue;
                }
#endif
                head_scalar(q, cache + off, vbase + off, n, g.D, buf.data(), o);
            }
        }
    });
}

}  // namespace tagflow::model::decode
