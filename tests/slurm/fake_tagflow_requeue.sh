#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# fake_tagflow_requeue.sh: stands in for `tagflow train` in the Slurm.requeue_fake_* tests, so
# the jobscripts' signal forwarding and requeue are tested without a training run. Per task
# (SLURM_PROCID r), with --out DIR: if DIR/checkpoint.r exists it "resumes" (writes
# finished.r, exits 0); else it writes started.r and waits for SIGUSR1 or SIGTERM, then writes
# checkpoint.r (aside, then renamed) and exits 75 like tagflow after a forced checkpoint.
set -u
out=""
while [[ $# -gt 0 ]]; do
    [[ $1 == --out ]] && { out=$2; shift; }
    shift
done
[[ -n $out ]] || { echo "fake tagflow: --out missing" >&2; exit 2; }
r=${SLURM_PROCID:-0}
if [[ -f $out/checkpoint.$r ]]; then
    echo "fake rank $r: resumed from $(cat "$out/checkpoint.$r") (restart ${SLURM_RESTART_COUNT:-0})"
    echo "restart ${SLURM_RESTART_COUNT:-0}" > "$out/finished.$r"
    exit 0
fi
got=""
trap 'got=USR1' USR1
trap 'got=TERM' TERM
echo "$$" > "$out/started.$r"
for ((i = 0; i < 3000; i++)); do
    [[ -n $got ]] && break
    sleep 0.1
done
[[ -n $got ]] || { echo "fake rank $r: no signal in 300 s" >&2; exit 1; }
echo "SIG$got after $i ticks" > "$out/checkpoint.$r.tmp"
mv "$out/checkpoint.$r.tmp" "$out/checkpoint.$r"
echo "fake rank $r: SIG$got -> checkpoint, exit 75"
exit 75
