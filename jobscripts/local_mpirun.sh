#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# local_mpirun.sh — the main job without SLURM: `tagflow train` under mpirun on this machine.
#   NP=2 (ranks; one per core)   OUT=runs/main-<time> (run directory)
#   TAGFLOW_BUILD_DIR=<repo>/build   any further arguments go to `tagflow train`
# Tags: every rank is rollout,train (colocated) unless --tags/--rank-tags are given; under SLURM
# use the sbatch scripts beside this one, where the SPANK plugin sets TAGFLOW_TAGS.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${TAGFLOW_BUILD_DIR:-$root/build}
np=${NP:-2}
out=${OUT:-$root/runs/main-$(date +%Y%m%d-%H%M%S)}
mpiflags=()
if [ "$(id -u)" = 0 ]; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
if [ "$np" -gt "$(nproc)" ]; then
    mpiflags+=(--oversubscribe)
fi
exec mpirun -n "$np" "${mpiflags[@]}" "$build/mpi_app/tagflow" train --out "$out" "$@"
