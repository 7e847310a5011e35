#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# sim_calibrate.sh: measures this machine with the existing microbenchmarks and writes a cost
# file for `tagflow sim --cost` (hardware type "cpu"; format in share/doc/sim.md). Not a ctest.
#   generate_bench   (1 rank)  engine time per iteration at batches 1..256 for new=NEW and new=1
#                              tokens: decode step(b) = (T(b,NEW) - T(b,1)) / (NEW - 1),
#                              prefill per prompt token = T(64,1) / (64 x PROMPT); and at batch
#                              256 for new=LONG (default 129): the attention cost per context
#                              token, c = (step(256,LONG) - step(256,NEW)) / (256 (LONG-NEW) / 2)
#                              (a step at new=N attends to PROMPT + N/2 positions per sequence on
#                              average); decode_s(b) is then step(b) less c b (PROMPT + NEW/2)
#   train_step_bench (1 rank)  seconds per real token of one actor step on BATCH sequences of 16,
#                              32, 64 and 128 tokens (TRAIN_SEQS), packed as tagflow train packs
#                              them (PACK=on, default; off: padded) -> the per-token cost by
#                              sequence length (short sequences pay the per-step overhead, long
#                              ones attention)
#   weight_sync_bench(2 ranks) flat weight sync at 1 KiB and 4 MiB -> latency and bandwidth
#   train_step_bench (1 rank)  a fresh process's first two steps against later ones of the same
#                              batch (FIRST_TOKENS tokens of FIRST_OPTS, default BATCH x 64 equal
#                              lengths) -> train_first_s = 2 (T(first two) - T(later))
#   step_write_bench (1 rank)  one step's run-file rows and flush: BATCH samples of PROMPT +
#                              RESPONSE_MEAN tokens (default 50: lognormal responses of median 32
#                              and p99 10x, capped at 320, average 50.6) -> step_io_s
# The model is tagflow train's default (d 64, 2 layers, 2 heads, d_ff 256) at the longtail task's
# vocabulary (14) and prompt (7 tokens); override with D_MODEL, LAYERS, HEADS, D_FF, VOCAB, PROMPT.
# Nothing here looks at a training run: the simulator is compared with runs it was not fitted to.
#   tests/bench/sim_calibrate.sh BUILD_DIR OUT.json
set -euo pipefail
BUILD=${1:?usage: sim_calibrate.sh BUILD_DIR OUT.json}
OUT=${2:?usage: sim_calibrate.sh BUILD_DIR OUT.json}
D_MODEL=${D_MODEL:-64} LAYERS=${LAYERS:-2} HEADS=${HEADS:-2} D_FF=${D_FF:-256} VOCAB=${VOCAB:-14}
PROMPT=${PROMPT:-7} NEW=${NEW:-33} LONG=${LONG:-129} MAX_POS=${MAX_POS:-128} ITERS=${ITERS:-3}
BATCH=${BATCH:-128} TRAIN_SEQS=${TRAIN_SEQS:-16 32 64 128}  # tagflow train's default step: 16 prompts x 8
ENTROPY=${ENTROPY:-0.01}  # tagflow train's --entropy-coef; its model has learned absolute positions too
TEMPERATURE=${TEMPERATURE:-1}
TRAIN_ITERS=${TRAIN_ITERS:-8}  # more than ITERS: one step is 30-300 ms and this VM's speed wanders
# The trainer as tagflow train runs it: packed rows by default (--pack on; each sample attends within
# its own run of slots, one attention call per sample and layer: 1.5x the padded batch's cost per
# token at equal lengths on the default model, 2026-12-02). PACK=off calibrates for --pack off runs.
PACK=${PACK:-on}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
B=$BUILD/tests/bench
FIRST_TOKENS=${FIRST_TOKENS:-$((BATCH * 64))} FIRST_OPTS=${FIRST_OPTS:--O seq=64} RESPONSE_MEAN=${RESPONSE_MEAN:-50}
for b in generate_bench train_step_bench weight_sync_bench step_write_bench; do
  [ -x "$B/$b" ] || { echo "sim_calibrate.sh: $B/$b missing (cmake --build $BUILD --target $b)" >&2; exit 2; }
done
TMP=$(mktemp -d)
LOADPID=
trap '[ -n "$LOADPID" ] && kill "$LOADPID" 2>/dev/null; rm -rf "$TMP"' EXIT
M=(-O d_model=$D_MODEL -O layers=$LAYERS -O heads=$HEADS -O kv_heads=$HEADS -O vocab=$VOCAB)
# The engine as tagflow train runs it: sampling at --temperature (TEMPERATURE, default 1), learned
# absolute positions (greedy decoding and no positions measured the step 10-15% cheaper).
GEN=(-O temperature=$TEMPERATURE -O abs_positions=1)
# The single-rank benchmarks run on core 0 (taskset), as mpirun would bind them. BUSY=1: each
# runs while the other workload keeps core 1 busy (generation during the train benchmark,
# training during the generation benchmark), as one rank generates while the other trains in the
# 2-rank runs. Default 0 (alone). Until 2026-11-30 the background load was bound to core 0 as
# well (mpirun binds every job's rank 0 there), so BUSY=1 measured two jobs time-sharing one core
# (2x), not the neighbour's effect: on core 1, training at 64 x 100 tokens does not slow a
# batch-256 generation measurably (92.3 vs 80.7-95.4 ms an iteration alone).
one() { local core=$1; shift; mpirun -n 1 --bind-to none taskset -c "$core" "$@"; }
busy() {  # busy gen|train: start the background load; unbusy stops it
  [ "${BUSY:-0}" = 1 ] || return 0
  [ "$(nproc)" -ge 2 ] || { echo "sim_calibrate.sh: BUSY=1 needs 2 cores" >&2; exit 2; }
  mkdir -p "$TMP/bg"
  if [ "$1" = gen ]; then
    one 1 "$B/generate_bench" -b 256 -e 256 -n 100000 -w 0 -c 0 -d "$TMP/bg" "${M[@]}" -O ffn=$D_FF \
      -O prompt=$PROMPT -O new=$NEW -O py=0 "${GEN[@]}" > /dev/null 2>&1 &
  else
    one 1 "$B/train_step_bench" -b $((BATCH * 64)) -e $((BATCH * 64)) -n 100000 -w 0 -c 0 "${M[@]}" \
      -O d_ff=$D_FF -O seq=64 > /dev/null 2>&1 &
  fi
  LOADPID=$!
  sleep 2
}
unbusy() { [ -z "$LOADPID" ] || { kill "$LOADPID" 2>/dev/null; wait "$LOADPID" 2>/dev/null || true; LOADPID=; }; }
echo "sim_calibrate: generate_bench (batch 1..256, new $NEW and 1; BUSY=${BUSY:-0})" >&2
busy train
one 0 "$B/generate_bench" -b 1 -e 256 -f 4 -n "$ITERS" -w 1 -c 0 -d "$TMP" "${M[@]}" -O ffn=$D_FF \
  -O prompt=$PROMPT -O new=$NEW -O py=0 "${GEN[@]}" -J "$TMP/gen_new.json" > "$TMP/gen_new.txt"
one 0 "$B/generate_bench" -b 1 -e 256 -f 4 -n "$ITERS" -w 1 -c 0 -d "$TMP" "${M[@]}" -O ffn=$D_FF \
  -O prompt=$PROMPT -O new=1 -O py=0 "${GEN[@]}" -J "$TMP/gen_1.json" > "$TMP/gen_1.txt"
one 0 "$B/generate_bench" -b 256 -e 256 -n "$ITERS" -w 1 -c 0 -d "$TMP" "${M[@]}" -O ffn=$D_FF \
  -O prompt=$PROMPT -O new=$LONG -O py=0 "${GEN[@]}" -J "$TMP/gen_long.json" > "$TMP/gen_long.txt"
unbusy
echo "sim_calibrate: train_step_bench ($BATCH sequences of $TRAIN_SEQS tokens, 1 rank)" >&2
busy gen
# train TOKENS NAME ARGS...: one train_step_bench run on TOKENS tokens (its sizes are bytes, 4 per
# token), the trainer as tagflow train runs it, results in $TMP/NAME.json.
train() {
  local bytes=$(($1 * 4)) name=$2
  shift 2
  one 0 "$B/train_step_bench" -b $bytes -e $bytes -c 0 "${M[@]}" -O d_ff=$D_FF -O entropy=$ENTROPY \
    -O abs_positions=1 -O pack=$PACK "$@" -J "$TMP/$name.json" > "$TMP/$name.txt"
}
for L in $TRAIN_SEQS; do
  train $((BATCH * L)) "train_$L" -n "$TRAIN_ITERS" -w 2 -O seq=$L  # BATCH sequences of L tokens
done
# A fresh process's first steps (LibTorch's first calls, the allocator's first touches): two steps
# timed with no warm-up, then the same batch warmed up.
read -r -a first_opts <<< "$FIRST_OPTS"
train "$FIRST_TOKENS" first -n 2 -w 0 "${first_opts[@]}"
train "$FIRST_TOKENS" later -n "$TRAIN_ITERS" -w 2 "${first_opts[@]}"
unbusy
echo "sim_calibrate: step_write_bench (1 rank, $BATCH samples of $PROMPT + $RESPONSE_MEAN tokens)" >&2
W=$((BATCH * (PROMPT + RESPONSE_MEAN) * 4))
one 0 "$B/step_write_bench" -b $W -e $W -n 20 -w 2 -c 1 -d "$TMP" -O prompt=$PROMPT -O len=$RESPONSE_MEAN \
  -J "$TMP/write.json" > "$TMP/write.txt"
echo "sim_calibrate: weight_sync_bench (2 ranks, 1 KiB and 4 MiB)" >&2
mpirun -n 2 "$B/weight_sync_bench" -b 1K -e 4M -f 4096 -n 10 -w 2 -c 0 -O layout=flat -J "$TMP/sync.json" \
  > "$TMP/sync.txt"
/usr/bin/python3 - "$TMP" "$OUT" <<PY
import json, sys
tmp, out = sys.argv[1], sys.argv[2]
ld = lambda n: json.load(open(f"{tmp}/{n}.json"))["results"]
new, p = $NEW, $PROMPT
gn = {r["size"]: r["time_us"] * 1e-6 for r in ld("gen_new")}
g1 = {r["size"]: r["time_us"] * 1e-6 for r in ld("gen_1")}
batches = sorted(set(gn) & set(g1))
step = {b: (gn[b] - g1[b]) / (new - 1) for b in batches}
gl = ld("gen_long")[0]
bl = gl["size"]
long_step = (gl["time_us"] * 1e-6 - g1[bl]) / ($LONG - 1)
ctx = max(0.0, (long_step - step[bl]) / (bl * ($LONG - new) / 2))
dec = [max(1e-7, step[b] - ctx * b * (p + new / 2)) for b in batches]
pre = g1[64] / (64 * p) if 64 in g1 else g1[batches[-1]] / (batches[-1] * p)
seqs = [int(x) for x in "$TRAIN_SEQS".split()]
train_at = [1.0 / ld(f"train_{L}")[0]["real/s" if "$PACK" == "on" else "tokens/s"] for L in seqs]
train_s = train_at[len(train_at) // 2]  # for readers of the scalar; the points take precedence
sy = sorted(ld("sync"), key=lambda r: r["size"])
lat = sy[0]["time_us"] * 1e-6
bw = (sy[-1]["size"] - sy[0]["size"]) / max(1e-9, (sy[-1]["time_us"] - sy[0]["time_us"]) * 1e-6)
d, L, V, F, P = $D_MODEL, $LAYERS, $VOCAB, $D_FF, $MAX_POS
params = 2 * V * d + P * d + L * (4 * d * d + 3 * d * F + 2 * d) + d
first = max(0.0, 2 * (ld("first")[0]["time_us"] - ld("later")[0]["time_us"]) * 1e-6)
io = ld("write")[0]["time_us"] * 1e-6
# --pack on (the default): the cost per real token of packed rows, at the batch's mean sample length;
# --pack off: each micro-batch padded to its longest sample (pack_micro_batch, train/engine.cpp).
cost = {"model_bytes": 4 * params, "train_padded": "$PACK" != "on", "step_io_s": io,
        "link": {"latency_s": lat, "bandwidth_Bps": bw},
        "hw": {"cpu": {"decode_batch": batches, "decode_s": dec, "decode_s_per_ctx_token": ctx,
                       "prefill_s_per_token": pre,
                       "train_s_per_token": train_s, "train_seq": seqs, "train_s_per_token_seq": train_at,
                       "train_first_s": first, "max_batch": 256,
                       "source": "sim_calibrate.sh: generate/train_step/weight_sync/step_write benches"}}}
json.dump(cost, open(out, "w"), indent=1)
print(f"sim_calibrate: decode step {', '.join(f'b{b} {s*1e3:.2f} ms' for b, s in zip(batches, dec))} "
      f"+ {ctx*1e9:.1f} ns per context token (b{bl}: {step[bl]*1e3:.2f} ms at new {new}, {long_step*1e3:.2f} at {$LONG}); "
      f"prefill {pre*1e6:.1f} us/token; train {', '.join(f'L{L} {t*1e6:.1f}' for L, t in zip(seqs, train_at))} us/token; link {lat*1e6:.0f} us + {bw/1e9:.2f} GB/s; "
      f"first steps +{first:.3f} s; step writes {io*1e3:.2f} ms; model {4*params} bytes -> {out}")
PY
