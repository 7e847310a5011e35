# SPDX-License-Identifier: Apache-2.0
# common.sh — what the end-to-end benchmark scripts share; sourced, not run:
#   here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd); . "$here/common.sh"; bench_init NAME "${1:-build}"
# bench_init sets build (the build directory, absolute), bin (its tagflow; exit 2 naming it when it
# is not built), out ($OUT, else build/bench-scratch/NAME; emptied), and lets mpirun run as root
# and place more ranks than cores, as the tests do.
bench_init() {
  local name=$1
  build=$(cd "${2:-build}" && pwd) || { echo "$name: no build directory ${2:-build}" >&2; exit 2; }
  bin=$build/mpi_app/tagflow
  [ -x "$bin" ] || { echo "$name: no $bin (build tagflow first)" >&2; exit 2; }
  out=${OUT:-$build/bench-scratch/$name}
  rm -rf "$out" && mkdir -p "$out"
  export OMPI_MCA_rmaps_base_oversubscribe=1
  if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
}
