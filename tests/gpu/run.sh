#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# tests/gpu/run.sh: the GPU check in one script, for a machine with an NVIDIA GPU, the CUDA
# toolkit and a CUDA PyTorch, and possibly no MPI, HDF5 or package registry.
#   1. configures tagflow with the LibTorch of the Python torch install (torch.utils.cmake_prefix_path),
#      NCCL from the CUDA toolkit or pip's nvidia-nccl, MPI/HDF5 only if present;
#   2. builds the NCCL backend, its tests and benchmarks (plus tests/bench's generate and
#      weight-sync benchmarks when this build has them);
#   3. runs the GPU tests (ctest -R '\.gpu\.') and the benchmarks, and prints a short table.
# Without a visible GPU it says so after the build and exits 0 (the build part still counts).
# Exit status: 0 when the build and every test that ran passed, 1 otherwise, 2 bad usage.
#
#   tests/gpu/run.sh [--build-dir DIR] [--deps DIR] [--jobs N] [--no-mpi] [--quick]
#   tests/gpu/run.sh --pack-deps DIR   # on a Debian machine: copy GoogleTest sources and
#                                      # nlohmann_json into DIR for a machine without packages
# Env: TAGFLOW_PYTHON (python with torch; default python3), CMAKE_ARGS (extra -D... flags).
# Doc: share/doc/gpu.md.
set -u -o pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
build="$repo/build-gpu"
deps="$repo/build-gpu-deps"
jobs=$(nproc 2>/dev/null || echo 2)
mpi=AUTO
quick=0

die() { echo "run.sh: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) [ $# -ge 2 ] || die "--build-dir needs a directory"; build=$2; shift 2 ;;
    --deps) [ $# -ge 2 ] || die "--deps needs a directory"; deps=$2; shift 2 ;;
    --jobs) [ $# -ge 2 ] || die "--jobs needs a number"; jobs=$2; shift 2 ;;
    --no-mpi) mpi=OFF; shift ;;
    --quick) quick=1; shift ;;
    --pack-deps)
      [ $# -ge 2 ] || die "--pack-deps needs a directory"
      out=$2
      [ -f /usr/src/googletest/CMakeLists.txt ] || die "no /usr/src/googletest (Debian: apt-get install googletest)"
      [ -d /usr/include/nlohmann ] || die "no /usr/include/nlohmann (Debian: apt-get install nlohmann-json3-dev)"
      mkdir -p "$out/prefix/include" "$out/prefix/share/cmake"
      rm -rf "$out/googletest" "$out/prefix/include/nlohmann" "$out/prefix/share/cmake/nlohmann_json"
      cp -r /usr/src/googletest "$out/googletest"
      cp -r /usr/include/nlohmann "$out/prefix/include/"
      cp -r /usr/share/cmake/nlohmann_json "$out/prefix/share/cmake/"
      echo "run.sh: packed GoogleTest and nlohmann_json into $out ($(du -sh "$out" | cut -f1))"
      exit 0 ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done

t_start=$(date +%s)
py=${TAGFLOW_PYTHON:-python3}
log="$build/run-gpu.log"
mkdir -p "$build"
: > "$log"

# ---- what this machine has ----
torch_info=$("$py" -c 'import torch, os
p = torch.utils.cmake_prefix_path
print(torch.__version__, torch.version.cuda or "cpu", p if os.path.isfile(os.path.join(p, "Torch", "TorchConfig.cmake")) else "-")' 2>/dev/null) || torch_info=""
nccl_home=$("$py" -c 'import nvidia.nccl, os; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null) || nccl_home=""
[ -n "$nccl_home" ] && [ ! -f "$nccl_home/include/nccl.h" ] && nccl_home=""
nvcc=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null || true)
gpu_names=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | paste -sd, - || true)

args=(-G Ninja -DCMAKE_BUILD_TYPE=Release "-DTAGFLOW_USE_MPI=$mpi" -DTAGFLOW_USE_CUDA=ON -DTAGFLOW_USE_NCCL=ON)
prefix=()
if [ -n "$torch_info" ]; then
  read -r torch_ver torch_cuda torch_prefix <<< "$torch_info"
  [ "$torch_prefix" != "-" ] && prefix+=("$torch_prefix")
else
  torch_ver="system LibTorch ($py has no torch)"; torch_cuda="-"; torch_prefix="-"
fi
[ -d "$deps/prefix" ] && prefix+=("$deps/prefix")
[ ${#prefix[@]} -gt 0 ] && args+=("-DCMAKE_PREFIX_PATH=$(IFS=';'; echo "${prefix[*]}")")
[ -f "$deps/googletest/CMakeLists.txt" ] && args+=("-DTAGFLOW_GTEST_SOURCE_DIR=$deps/googletest")
[ -n "$nccl_home" ] && args+=("-DTAGFLOW_NCCL_HOME=$nccl_home")
if [ -n "$nvcc" ]; then
  args+=("-DCUDAToolkit_ROOT=$(dirname "$(dirname "$nvcc")")" "-DCMAKE_CUDA_COMPILER=$nvcc")
  # A CUDA LibTorch may enable CMake's CUDA language; name Hopper when nothing else is said.
  case " ${CMAKE_ARGS:-} " in *CMAKE_CUDA_ARCHITECTURES*) ;; *) args+=(-DCMAKE_CUDA_ARCHITECTURES=90) ;; esac
fi
# shellcheck disable=SC2206
[ -n "${CMAKE_ARGS:-}" ] && args+=(${CMAKE_ARGS})

echo "== tagflow GPU check: torch $torch_ver (CUDA ${torch_cuda}), GPUs: ${gpu_names:-none visible}, jobs $jobs"
echo "== configure: cmake -S $repo -B $build ${args[*]}"
if ! cmake -S "$repo" -B "$build" "${args[@]}" >> "$log" 2>&1; then
  tail -40 "$log"; echo "run.sh: configure FAILED (full log: $log)"; exit 1
fi
grep -E "^-- tagflow:" "$log" | sed 's/^-- /   /'

# ---- build ----
have_target() { ninja -C "$build" -t targets all 2>/dev/null | grep -q "^$1:"; }
targets=()
for t in test_gpu nccl_bench test_mpi_gpu generate_bench weight_sync_bench; do
  have_target "$t" && targets+=("$t")
done
if [ ${#targets[@]} -eq 0 ]; then
  echo "run.sh: nothing to build: NCCL or CUDA not found (see $log)"; exit 1
fi
echo "== build: ${targets[*]}"
t0=$(date +%s)
if ! cmake --build "$build" -j "$jobs" --target "${targets[@]}" >> "$log" 2>&1; then
  grep -E "error|FAILED" "$log" | head -30; echo "run.sh: build FAILED (full log: $log)"; exit 1
fi
build_s=$(( $(date +%s) - t0 ))
echo "   built in ${build_s}s"

# ---- tests ----
ctest_out="$build/run-gpu-ctest.log"
ctest --test-dir "$build" -R '\.gpu\.' --timeout 120 --output-on-failure > "$ctest_out" 2>&1
ctest_rc=$?
passed=$(grep -cE "Test +#[0-9]+: .* Passed" "$ctest_out")
skipped=$(grep -cE "\*\*\*Skipped" "$ctest_out")
failed=$(grep -cE "\*\*\*(Failed|Exception|Timeout)|\*\*\*Not Run" "$ctest_out")
grep -E "Test +#[0-9]+:" "$ctest_out" | sed 's/^ *[0-9]*\/[0-9]* /   /'

ndev=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
bench_rows=()
note=""
if [ "${ndev:-0}" -eq 0 ]; then
  note="no GPU visible: built and ran the no-GPU tests only; GPU tests were skipped"
else
  # ---- benchmarks ----
  maxmb=1024; [ $quick -eq 1 ] && maxmb=64
  echo "== nccl_bench --max-mb $maxmb"
  timeout 120 "$build/tests/gpu/nccl_bench" --max-mb $maxmb --iters 5 | tee "$build/run-gpu-nccl.txt"
  while IFS= read -r l; do bench_rows+=("$l"); done < <(grep -E "^(allreduce|broadcast|memcpy)" "$build/run-gpu-nccl.txt")
  mpiexec_=$(command -v mpiexec || true)
  for b in generate weight_sync; do
    exe="$build/tests/bench/${b}_bench"
    if [ ! -x "$exe" ]; then
      bench_rows+=("${b}_bench: not in this build (needs MPI or not written yet): skipped")
      continue
    fi
    echo "== ${b}_bench"
    if [ -n "$mpiexec_" ]; then
      OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 \
        timeout 120 "$mpiexec_" -n 1 "$exe" | tee "$build/run-gpu-$b.txt"
    else
      timeout 120 "$exe" | tee "$build/run-gpu-$b.txt"
    fi
    bench_rows+=("${b}_bench: rc=$? (output: $build/run-gpu-$b.txt)")
  done
fi

# ---- summary ----
echo
echo "== summary ($(( $(date +%s) - t_start ))s)"
printf '%-14s %s\n' "torch" "$torch_ver (CUDA $torch_cuda)"
printf '%-14s %s\n' "GPUs" "${gpu_names:-none visible}"
printf '%-14s %s\n' "build" "ok (${targets[*]}, ${build_s}s)"
printf '%-14s %s\n' "gpu tests" "$passed passed, $failed failed, $skipped skipped (ctest rc $ctest_rc)"
for r in "${bench_rows[@]}"; do printf '%-14s %s\n' "bench" "$r"; done
[ -n "$note" ] && printf '%-14s %s\n' "note" "$note"
[ "$ctest_rc" -eq 0 ] && [ "$failed" -eq 0 ] || exit 1
exit 0
