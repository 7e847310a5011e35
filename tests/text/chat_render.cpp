// SPDX-License-Identifier: Apache-2.0
// chat_render: renders conversations with a chat template, for the parity and hostile tests
// without MPI or the tagflow program (`tagflow tokenize --chat` reads the same lines).
//   chat_render --config tokenizer_config.json|MODEL_DIR [--template FILE] < in.jsonl > out.jsonl
//   chat_render --template FILE < in.jsonl
// Each input line: {"messages": [...], "add_generation_prompt": bool, "tools"?: [...], ...};
// other members are extra template variables (e.g. enable_thinking). Each output line: the
// rendered prompt as a JSON string. Bad input: "chat_render: line N: why" on stderr, exit 2,
// and nothing on stdout (output is written only once every line rendered).
#include <iostream>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "text/chat_template.hpp"

int main(int argc, char** argv) {
    std::string config, tmpl;
    for (int k = 1; k < argc; ++k) {
        std::string a = argv[k];
        if ((a == "--config" || a == "--template") && k + 1 < argc) {
            (a == "--config" ? config : tmpl) = argv[++k];
        } else {
            std::cerr << "usage: chat_render [--config tokenizer_config.json|DIR] [--template FILE] < in.jsonl\n";
            return 2;
        }
    }
    if (config.empty() && tmpl.empty()) {
        std::cerr << "chat_render: give --config or --template\n";
        return 2;
    }
    std::optional<tagflow::text::ChatTemplate> chat;
    try {
        chat = tmpl.empty() ? tagflow::text::ChatTemplate::from_tokenizer_config(config)
                            : tagflow::text::ChatTemplate::from_file(tmpl, config);
    } catch (const tagflow::Error& e) {
        std::cerr << "chat_render: " << e.what() << "\n";
        return 2;
    }
    std::string line, out;
    long n = 0;
    while (std::getline(std::cin, line)) {
        ++n;
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        try {
            nlohmann::ordered_json in;
            try {
                in = nlohmann::ordered_json::parse(line);
            } catch (const nlohmann::json::exception& e) {
                throw tagflow::ConfigError(std::string("not valid JSON: ") + e.what());
            }
            const tagflow::text::ChatRequest r = tagflow::text::parse_chat_request(in);
            std::string text = chat->render(r.messages, r.add_generation_prompt, r.tools, r.extra);
            out += nlohmann::ordered_json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
            out += '\n';
        } catch (const tagflow::Error& e) {
            std::cerr << "chat_render: line " << n << ": " << e.what() << "\n";
            return 2;
        } catch (const nlohmann::json::exception& e) {
            std::cerr << "chat_render: line " << n << ": " << e.what() << "\n";
            return 2;
        }
    }
    std::cout << out;
    return std::cout.good() ? 0 : 1;
}
