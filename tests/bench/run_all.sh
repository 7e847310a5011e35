#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# run_all.sh — runs every tests/bench/*_bench of a build at realistic sizes under mpirun and
# prints their tables; JSON results go to $OUT. Not a test (ctest runs tiny smoke sizes).
# Usage: tests/bench/run_all.sh [BUILD_DIR]     (default: ./build)
#   NP=4         ranks per benchmark (default 2)
#   DIR=path     scratch directory for files the benchmarks write (default BUILD/bench-scratch)
#   OUT=path     JSON output directory (default BUILD/bench-results)
#   ONLY=name    run only <name>_bench
#   BENCH_ARGS_<name>="..."  override the arguments of one benchmark, e.g. BENCH_ARGS_h5_write
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
np=${NP:-2}
dir=${DIR:-$build/bench-scratch}
out=${OUT:-$build/bench-results}
mkdir -p "$dir" "$out"
# Open MPI as root and with more ranks than cores (harmless otherwise).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1

# Realistic arguments per benchmark; add one line when adding a benchmark.
args_for() {
    case "$1" in
        h5_write) echo "-b 1M -e 256M -f 4 -n 3 -w 1 -c 1" ;;
        train_step) echo "-b 8K -e 512K -f 4 -n 5 -w 2 -c 1" ;;
        weight_sync) echo "-b 1M -e 256M -f 4 -n 10 -w 2 -c 1" ;;
        generate) echo "-b 1 -e 256 -f 4 -n 3 -w 1 -c 1" ;;   # sizes are batch sizes
        traj) echo "-b 2K -e 32K -f 4 -n 5 -w 1 -c 1" ;;      # sizes are request bytes (4 B/token)
        timeline) echo "-b 1K -e 256K -f 4 -n 20 -w 2 -c 1" ;; # sizes are spans x 32 B
        step_write) echo "-b 4K -e 1M -f 4 -n 10 -w 2 -c 1" ;; # sizes are a step's tokens x 4 B
        *)        echo "-b 8 -e 64M -f 2 -n 20 -w 5 -c 1" ;;
    esac
}

shopt -s nullglob
benches=("$build"/tests/bench/*_bench)
if [ ${#benches[@]} -eq 0 ]; then
    echo "run_all.sh: no *_bench in $build/tests/bench (build them first)" >&2
    exit 2
fi
status=0
for exe in "${benches[@]}"; do
    name=$(basename "$exe" _bench)
    [ -n "${ONLY:-}" ] && [ "$ONLY" != "$name" ] && continue
    var="BENCH_ARGS_$name"
    read -r -a args <<< "${!var:-$(args_for "$name")}"
    n=$np
    [ "$name" = generate ] && n=1   # per-rank engine benchmark: one rank
    [ "$name" = traj ] && n=1       # the trajectory manager is single-threaded: one core
    variants=("")
    [ "$name" = train_step ] && variants=("-O dtype=fp32" "-O dtype=bf16")   # both precisions
    for v in "${variants[@]}"; do
        read -r -a vargs <<< "$v"
        tag=$name${v:+_${v##*=}}
        echo "## $name: mpirun -n $n $(basename "$exe") ${args[*]} $v"
        if ! mpirun -n "$n" "$exe" "${args[@]}" "${vargs[@]}" -d "$dir" -J "$out/$tag.json"; then
            echo "## $name $v FAILED" >&2
            status=1
        fi
        echo
    done
done
echo "## JSON results in $out"
exit $status
