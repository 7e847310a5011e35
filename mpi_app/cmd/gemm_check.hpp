// SPDX-License-Identifier: Apache-2.0
// gemm_check: measures this process's fp32 GEMM rate (torch::mm, 512x512) so a run on a
// reference BLAS or generic OpenBLAS kernels is caught at start, not after hours.
#pragma once

namespace tagflow::cmd {

/// Best fp32 GFLOP/s of repeated 512x512 matmuls over about `seconds` seconds.
double measure_gemm_gflops(double seconds = 0.3);

/// Sets the threads this process computes with: LibTorch's intra-op pool (at::set_num_threads)
/// and, when the BLAS LibTorch calls is OpenBLAS, OPENBLAS_NUM_THREADS is unset and OpenBLAS's own
/// pool is larger, that pool, cut to `threads`. at::set_num_threads does not touch it, and it
/// otherwise spans every core the process may run on (one for a rank bound to a core). Uncut,
/// every unbound rank of a job ran a BLAS worker per extra core that spins (sched_yield) after
/// each GEMM, taking the other ranks' cores: 3 ranks on 2 cores ran half as fast
/// (share/doc/bench.md, BLAS). Returns OpenBLAS's thread count afterwards, or 0 when libblas.so.3
/// is not OpenBLAS.
int set_compute_threads(int threads);

/// Re-executes the program once with OPENBLAS_CORETYPE (and OPENBLAS_NUM_THREADS=1) set when
/// they are unset and the CPU has AVX-512: OpenBLAS 0.3.21 misdetects recent Xeons and picks
/// generic kernels (~65 instead of ~150 GFLOP/s per core). Must run before MPI_Init. Returns
/// only if no re-exec happened.
void maybe_reexec_for_openblas(char** argv);

}  // namespace tagflow::cmd
