// SPDX-License-Identifier: Apache-2.0
// tokenize_command: `tagflow tokenize --tokenizer PATH [--decode | --chat] ...` — JSON Lines on
// stdin to JSON Lines on stdout: strings -> id arrays through HfTokenizer (default), id arrays ->
// strings (--decode), conversations -> rendered prompts through ChatTemplate (--chat,
// --chat-template FILE). Bad input (not JSON, wrong type, invalid UTF-8, id out of range, a bad
// conversation, the template's raise_exception) throws tagflow::ConfigError naming the line
// (exit 2); the lines before it are already written, nothing of the bad line is.
#pragma once

namespace tagflow::text {

/// argv[0] is "tokenize". Only the `root` process reads stdin (the others return 0 at once).
/// Returns the exit code (0; --help also 0).
int tokenize_command(int argc, char** argv, bool root = true);

}  // namespace tagflow::text
