// SPDX-License-Identifier: Apache-2.0
#include "cmd/gemm_check.hpp"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>

namespace tagflow::cmd {

double measure_gemm_gflops(double seconds) {
    const int64_t n = 512;
    auto a = at::randn({n, n});
    auto b = at::randn({n, n});
    auto c = at::empty({n, n});
    at::mm_out(c, a, b);  // warm-up
    double best = 0;
    auto start = std::chrono::steady_clock::now();
    for (;;) {
        auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < 4; ++i) at::mm_out(c, a, b);
        auto t1 = std::chrono::steady_clock::now();
        double dt = std::chrono::duration<double>(t1 - t0).count();
        best = std::max(best, 4.0 * 2.0 * n * n * n / dt / 1e9);
        if (std::chrono::duration<double>(t1 - start).count() > seconds) break;
    }
    return best;
}

int set_compute_threads(int threads) {
    at::set_num_threads(threads);
    // Looked up at run time: libblas.so.3 may be the reference BLAS, which has neither.
    using SetFn = void(int);
    using GetFn = int();
    auto* set = reinterpret_cast<SetFn*>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
    auto* get = reinterpret_cast<GetFn*>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
    if (set == nullptr || get == nullptr) return 0;
    // Only a larger pool is cut (a rank bound to one core already has OpenBLAS at 1). A smaller one
    // is left as it is: more BLAS threads than the rank's share would take other ranks' cores.
    if (std::getenv("OPENBLAS_NUM_THREADS") == nullptr && get() > threads) set(threads);
    return get();
}

void maybe_reexec_for_openblas(char** argv) {
    if (std::getenv("OPENBLAS_CORETYPE") != nullptr || std::getenv("TAGFLOW_REEXEC") != nullptr) return;
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512f")) return;
    setenv("OPENBLAS_CORETYPE", "SkylakeX", 1);
    if (std::getenv("OPENBLAS_NUM_THREADS") == nullptr) setenv("OPENBLAS_NUM_THREADS", "1", 1);
    setenv("TAGFLOW_REEXEC", "1", 1);  // never loop
    execv("/proc/self/exe", argv);
    // exec failed: go on with whatever kernels OpenBLAS picked; the GEMM check will warn.
}

}  // namespace tagflow::cmd
