#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# abuse_soak.sh: the gateway abuse of Hostile.gateway_abuse_train, ROUNDS times in a row against
# one running 2-rank `tagflow train --gateway` job (a soak; not a ctest: several minutes). Each
# round: pipelined requests without the token, a FLOOD_MB flood that never reads, TRICKLE_S
# seconds of 600 slowloris connections under RLIMIT_NOFILE 512; /health probed every 0.2 s
# throughout. Passes when every probe was answered 200 within 1 s, the gateway's resident size
# grew by less than 200 MB, the job trained throughout (/steps) and obeyed SIGUSR1 at the end.
# Prints each round's duration and resident-size growth; share/doc/bench.md ("Gateway abuse
# soak") has the figures.
#
# Environment (defaults): TAGFLOW=build/mpi_app/tagflow  ROUNDS=6  FLOOD_MB=20  TRICKLE_S=25
#   WORK=/tmp/tagflow-abuse-soak (deleted first)
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
TAGFLOW=${TAGFLOW:-$ROOT/build/mpi_app/tagflow}
WORK=${WORK:-/tmp/tagflow-abuse-soak}
rm -rf "$WORK"
for v in $(compgen -e | grep '^TAGFLOW_' || true); do unset "$v"; done
start=$(date +%s)
/usr/bin/python3 "$HERE/gateway_abuse.py" --tagflow "$TAGFLOW" --work "$WORK" --rounds "${ROUNDS:-6}" \
    --flood-mb "${FLOOD_MB:-20}" --trickle-s "${TRICKLE_S:-25}"
echo "abuse soak: $(( $(date +%s) - start )) s in all"
