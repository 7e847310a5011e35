// SPDX-License-Identifier: Apache-2.0
// hf_reference.js: the Hugging Face side of the parity tests — `tokenizers` (Rust) through the
// npm package @anush008/tokenizers. Same input and output as text_tool.cpp:
//   node hf_reference.js NPM_DIR TOKENIZER_JSON [--add-special-tokens] < strings.jsonl
//   node hf_reference.js NPM_DIR TOKENIZER_JSON --decode < id-arrays.jsonl   ({skip, keep} per line)
// Run with RAYON_NUM_THREADS=1 (set by parity.py).
'use strict';
const path = require('path');
const readline = require('readline');

const [npmDir, tokenizerPath, flag] = process.argv.slice(2);
const { Tokenizer } = require(path.resolve(npmDir, 'node_modules', '@anush008', 'tokenizers'));
const addSpecialTokens = flag === '--add-special-tokens';
const decodeOnly = flag === '--decode';

(async () => {
  const tok = Tokenizer.fromFile(tokenizerPath);
  const rl = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
  const out = [];
  for await (const line of rl) {
    const value = JSON.parse(line);
    const ids = decodeOnly ? value : Array.from((await tok.encode(value, null, { addSpecialTokens })).getIds());
    const skip = await tok.decode(ids, true);
    const keep = await tok.decode(ids, false);
    out.push(JSON.stringify(decodeOnly ? { skip, keep } : { ids, skip, keep }));
    if (out.length >= 256) {
      process.stdout.write(out.join('\n') + '\n');
      out.length = 0;
    }
  }
  if (out.length) process.stdout.write(out.join('\n') + '\n');
})().catch((e) => {
  process.stderr.write(`hf_reference.js: ${e && e.stack ? e.stack : e}\n`);
  process.exit(1);
});
