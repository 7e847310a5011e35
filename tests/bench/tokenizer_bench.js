// SPDX-License-Identifier: Apache-2.0
// tokenizer_bench.js: the Hugging Face side of tests/bench/tokenizer_bench.sh — `tokenizers` (Rust,
// npm @anush008/tokenizers) encoding the same chunks as tokenizer_bench.cpp, one untimed pass then
// N timed ones, one call per chunk.
// Run with RAYON_NUM_THREADS=1. Prints: hf <MB> <seconds> <MB/s> <ids per pass>
//   node tokenizer_bench.js NPM_DIR TOKENIZER_JSON CHUNKS_JSONL [REPEAT]
//   node tokenizer_bench.js NPM_DIR TOKENIZER_JSON --word C BYTES     (one BYTES-long run of C)
'use strict';
const fs = require('fs');
const path = require('path');

const [npmDir, tokPath, chunksPath, repeatArg] = process.argv.slice(2);
const { Tokenizer } = require(path.resolve(npmDir, 'node_modules', '@anush008', 'tokenizers'));
const repeat = chunksPath === '--word' ? 1 : Number(repeatArg || 3);

(async () => {
  const tok = Tokenizer.fromFile(tokPath);
  if (chunksPath === '--word') {
    const bytes = Number(process.argv[6]);
    const s = repeatArg.repeat(bytes);
    const t0 = process.hrtime.bigint();
    const n = (await tok.encode(s, null, { addSpecialTokens: false })).getIds().length;
    const sec = Number(process.hrtime.bigint() - t0) / 1e9;
    process.stdout.write(`hf-word ${(bytes / 1e6).toFixed(3)} ${sec.toFixed(4)} ${(bytes / 1e6 / sec).toFixed(2)} ${n}\n`);
    return;
  }
  const chunks = fs.readFileSync(chunksPath, 'utf8').split('\n').filter((l) => l.length).map((l) => JSON.parse(l));
  const bytes = chunks.reduce((a, c) => a + Buffer.byteLength(c, 'utf8'), 0);
  let ids = 0;
  for (const c of chunks) ids += (await tok.encode(c, null, { addSpecialTokens: false })).getIds().length;
  const t0 = process.hrtime.bigint();
  let check = 0;
  for (let r = 0; r < repeat; r++) {
    for (const c of chunks) check += (await tok.encode(c, null, { addSpecialTokens: false })).getIds().length;
  }
  const s = Number(process.hrtime.bigint() - t0) / 1e9 / repeat;
  if (check !== ids * repeat) throw new Error(`passes disagree (${check} vs ${ids * repeat} ids)`);
  process.stdout.write(`hf ${(bytes / 1e6).toFixed(3)} ${s.toFixed(4)} ${(bytes / 1e6 / s).toFixed(2)} ${ids}\n`);
})().catch((e) => {
  process.stderr.write(`tokenizer_bench.js: ${e && e.stack ? e.stack : e}\n`);
  process.exit(1);
});
