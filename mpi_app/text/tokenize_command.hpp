// SPDX-License-Identifier: Apache-2.0
// tokenize_command: `tagflow tokenize --tokenizer PATH [--decode] ...` — JSON Lines on stdin to
// JSON Lines on stdout through HfTokenizer: strings -> id arrays (default), id arrays -> strings
// (--decode). Bad input (not JSON, wrong type, invalid UTF-8, id out of range) throws
// tagflow::ConfigError naming the line (exit 2); the lines before it are already written, nothing
// of the bad line is. Does not render chat templates (a --chat mode is planned beside these).
#pragma once

namespace tagflow::text {

/// argv[0] is "tokenize". Only the `root` process reads stdin (the others return 0 at once).
/// Returns the exit code (0; --help also 0).
int tokenize_command(int argc, char** argv, bool root = true);

}  // namespace tagflow::text
