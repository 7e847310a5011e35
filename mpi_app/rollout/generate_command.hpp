// SPDX-License-Identifier: Apache-2.0
// generate_command: `tagflow generate --model DIR (--prompt-ids 1,2,3 | --prompt TEXT | --chat
// TEXT) ...` — loads a Hugging Face checkpoint directory, generates one completion with the
// rollout engine and prints the token ids on one line (--prompt-ids) or the text (--prompt,
// --chat: the directory's tokenizer.json and chat template through text::Tokenizer, the byte-level
// tokenizer for a model without one), rank 0 only. Bad usage throws tagflow::ConfigError (exit 2).
#pragma once

namespace tagflow::rollout {

/// argv[0] is "generate". Returns the exit code (0; --help also 0).
int generate_command(int argc, char** argv);

}  // namespace tagflow::rollout
