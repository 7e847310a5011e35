#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# fuzz_all.sh: builds the libFuzzer targets of tests/fuzz with clang
# (-fsanitize=fuzzer,address,undefined) and runs each for RUNS executions (default 1000000),
# one after the other, from its seed corpus (tests/fuzz/corpus/<target>) and regressions
# (tests/fuzz/regressions/<target>). Prints per target: executions/s, final coverage (cov:,
# ft:), corpus size, and whether it crashed. A crashing (or timing out, or leaking) input is
# copied to tests/fuzz/regressions/<target>/ so that ctest's Fuzz.<target>.replay replays it.
# Not a ctest (minutes per target); the replay tests are (tests/fuzz/CMakeLists.txt).
#
#   tests/bench/fuzz_all.sh [target...]        targets: tagmap tagmap_node safetensors gateway_http
# Environment: RUNS (1000000), FUZZ_BUILD_DIR (build-fuzz), CC (clang), CXX (clang++),
#   FUZZ_TIMEOUT (per-input seconds, 10), FUZZ_JOBS_FLAGS (extra libFuzzer flags).
# Does not keep the grown corpus in the source tree (it stays under FUZZ_BUILD_DIR/work).
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
runs=${RUNS:-1000000}
build=${FUZZ_BUILD_DIR:-$root/build-fuzz}
cc=${CC:-clang}
cxx=${CXX:-clang++}
timeout_s=${FUZZ_TIMEOUT:-10}
case "$build" in /*) ;; *) build=$root/$build ;; esac
mkdir -p "$build/work"

flags=(-g -O1 -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined
       -fno-sanitize-recover=all -I"$root/tests/fuzz")

build_target() {  # name -> $build/fuzz_<name>, 1 when it cannot be built here
    local t=$1 out=$build/fuzz_$1
    case $t in
    tagmap|tagmap_node)
        "$cc" -std=c11 "${flags[@]}" -I"$root/slurm_plugin" "$root/tests/fuzz/fuzz_$t.c" \
            "$root"/slurm_plugin/tagmap*.c -lm -o "$out" ;;
    safetensors)
        "$cxx" -std=c++17 "${flags[@]}" -I"$root/mpi_app" "$root/tests/fuzz/fuzz_safetensors.cpp" \
            "$root/mpi_app/model/safetensors.cpp" -o "$out" ;;
    gateway_http)
        [ -f "$root/tests/fuzz/fuzz_gateway_http.cpp" ] || return 1
        # shellcheck disable=SC2046
        "$cxx" -std=c++17 "${flags[@]}" -I"$root/mpi_app" "$root/tests/fuzz/fuzz_gateway_http.cpp" \
            $(sed -n 's|^// fuzz-sources: ||p' "$root/tests/fuzz/fuzz_gateway_http.cpp" |
              tr ' ' '\n' | sed "s|^|$root/|") -o "$out" ;;
    *) echo "unknown target $t" >&2; return 1 ;;
    esac
}

max_len_of() {
    case $1 in tagmap) echo 16384 ;; *) echo 4096 ;; esac
}

targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(tagmap tagmap_node safetensors gateway_http)
status=0
printf '%-13s %10s %9s %8s %8s %7s  %s\n' target execs exec/s cov ft corpus result
for t in "${targets[@]}"; do
    if ! build_target "$t" >"$build/build_$t.log" 2>&1; then
        printf '%-13s %s\n' "$t" "not built (see $build/build_$t.log)"
        continue
    fi
    work=$build/work/$t
    art=$build/artifacts/$t
    rm -rf "$art"; mkdir -p "$work" "$art"
    seeds=("$root/tests/fuzz/corpus/$t")
    [ -d "$root/tests/fuzz/regressions/$t" ] && seeds+=("$root/tests/fuzz/regressions/$t")
    log=$build/fuzz_$t.log
    set +e
    "$build/fuzz_$t" -runs="$runs" -max_len="$(max_len_of "$t")" -timeout="$timeout_s" \
        -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$art/" ${FUZZ_JOBS_FLAGS:-} \
        "$work" "${seeds[@]}" >"$log" 2>&1
    rc=$?
    set -e
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1 || true)
    speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1 || true)
    cov=$( (grep -a -o 'cov: [0-9]*' "$log" || true) | tail -1 | cut -d' ' -f2)
    ft=$( (grep -a -o 'ft: [0-9]*' "$log" || true) | tail -1 | cut -d' ' -f2)
    corpus=$(find "$work" -type f | wc -l)
    result=ok
    if [ "$rc" -ne 0 ] || ls "$art"/* >/dev/null 2>&1; then
        status=1
        result="CRASH rc=$rc (log $log)"
        mkdir -p "$root/tests/fuzz/regressions/$t"
        for f in "$art"/*; do
            [ -f "$f" ] || continue
            cp "$f" "$root/tests/fuzz/regressions/$t/"
            result="$result; saved tests/fuzz/regressions/$t/$(basename "$f")"
        done
        grep -a -m3 -E 'ERROR: |fuzz invariant failed|runtime error' "$log" | sed 's/^/    /' >&2 || true
    fi
    printf '%-13s %10s %9s %8s %8s %7s  %s\n' "$t" "${execs:-?}" "${speed:-?}" "${cov:-?}" "${ft:-?}" \
        "$corpus" "$result"
done
exit $status
