// SPDX-License-Identifier: Apache-2.0
// text_tool: the tagflow side of the parity tests (tests/text/parity.py). Reads JSON Lines of
// strings on stdin and writes, per line, {"ids": [...], "skip": "...", "keep": "..."}: the ids
// of HfTokenizer::encode and the two decodes (special tokens skipped / kept) of those ids.
//   text_tool TOKENIZER [--add-special-tokens]
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstring>
#include <exception>
#include <iostream>
#include <string>

#include "text/hf_tokenizer.hpp"

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: text_tool TOKENIZER [--add-special-tokens] < strings.jsonl\n");
        return 2;
    }
    const bool add_special = argc > 2 && std::strcmp(argv[2], "--add-special-tokens") == 0;
    try {
        const auto tok = tagflow::text::HfTokenizer::load(argv[1]);
        std::string line;
        std::ios::sync_with_stdio(false);
        while (std::getline(std::cin, line)) {
            const std::string text = nlohmann::json::parse(line).get<std::string>();
            const auto ids = tok.encode(text, add_special);
            nlohmann::json out;
            out["ids"] = ids;
            out["skip"] = tok.decode(ids, true);
            out["keep"] = tok.decode(ids, false);
            std::cout << out.dump() << '\n';
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "text_tool: %s\n", e.what());
        return 1;
    }
    return 0;
}
