#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# run.sh — the whole test suite: install (Debian packages), build, then every test via ctest,
# including the multi-rank MPI tests and the SLURM tests on a loopback cluster that the suite
# starts and stops itself. CI runs exactly this (see .ci/run).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${TAGFLOW_BUILD_DIR:-$root/build}
bash "$root/share/setup.sh" --tests
cd "$build"
ctest --output-on-failure -j 2 --timeout 900 "$@"
