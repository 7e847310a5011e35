#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# gateway_agent.sh: train a policy through the OpenAI-compatible gateway with an external agent.
# Starts `tagflow train --gateway` (disaggregated: rank 0 only rolls out and serves the gateway,
# rank 1 trains), waits for OUT/gateway.url and OUT/gateway.token, runs gateway_agent.py against
# it until the job has trained --steps steps (the agent stops when the gateway goes away), and
# waits for the job. Works as an sbatch script (srun) or on a workstation (mpirun).
#
#   sbatch share/examples/gateway_agent.sh            # OUT defaults to runs/gateway-$SLURM_JOB_ID
#   OUT=runs/gw STEPS=20 share/examples/gateway_agent.sh
#
#SBATCH --job-name=tagflow-gateway
#SBATCH --nodes=1
#SBATCH --ntasks=2
#SBATCH --cpus-per-task=1
#SBATCH --time=00:30:00
#SBATCH --rl-tags=auto
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TAGFLOW=${TAGFLOW:-tagflow}
PYTHON=${PYTHON:-python3}
OUT=${OUT:-runs/gateway-${SLURM_JOB_ID:-$$}}
STEPS=${STEPS:-20}
PORT=${PORT:-0}          # 0: any free port; the URL is written to OUT/gateway.url
GROUP=${GROUP:-4}
(umask 027 && mkdir -p "$OUT")   # 0750, as tagflow makes its run dirs
rm -f "$OUT/gateway.url" "$OUT/gateway.token"

args=(train --out "$OUT" --overwrite --mode disaggregated --rank-tags "0=rollout;1=rollout,train"
      --gateway "127.0.0.1:$PORT" --gateway-only --task reverse --digits 3 --max-new-tokens 16
      --group-size "$GROUP" --train-threshold $((2 * GROUP)) --train-timeout 30 --steps "$STEPS")
if [ -n "${SLURM_JOB_ID:-}" ]; then
    srun -K1 -n 2 "$TAGFLOW" "${args[@]}" &
else
    mpirun -n 2 "$TAGFLOW" "${args[@]}" &
fi
job=$!
trap 'kill $job 2>/dev/null || true' INT TERM

# The agent reads the URL and the token itself (it waits for them to appear).
"$PYTHON" "$HERE/gateway_agent.py" --out "$OUT" --sessions 100000 --group "$GROUP" --turns 2 --digits 3 \
          --concurrency 4 --stream-every 4
wait $job
echo "run file: $OUT/tagflow.h5 (gateway sessions: /samples rows with task \"gateway\", tokens in /tree)"
