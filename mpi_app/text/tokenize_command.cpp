// SPDX-License-Identifier: Apache-2.0
// tokenize_command: option parsing (Boost.Program_options) and the JSON Lines loop of
// `tagflow tokenize`. See tokenize_command.hpp. Output is buffered and written in blocks; it is
// flushed before an error is raised, so every good line before a bad one reaches stdout.
#include "text/tokenize_command.hpp"

#include <nlohmann/json.hpp>

#include <boost/program_options.hpp>
#include <cstdio>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "common/log.hpp"
#include "text/chat_template.hpp"
#include "text/hf_tokenizer.hpp"
#include "text/utf8.hpp"

namespace po = boost::program_options;
using nlohmann::json;

namespace tagflow::text {
namespace {

enum class Mode { kEncode, kDecode, kChat };

class Output {
public:
    ~Output() { flush(); }
    void line(const std::string& s) {
        buf_ += s;
        buf_ += '\n';
        if (buf_.size() >= (1u << 16)) flush();
    }
    void flush() {
        if (!buf_.empty()) std::fwrite(buf_.data(), 1, buf_.size(), stdout);
        std::fflush(stdout);
        buf_.clear();
    }

private:
    std::string buf_;
};

const char* json_type(const nlohmann::ordered_json& j) {
    switch (j.type()) {
        case nlohmann::ordered_json::value_t::null: return "null";
        case nlohmann::ordered_json::value_t::boolean: return "a boolean";
        case nlohmann::ordered_json::value_t::string: return "a string";
        case nlohmann::ordered_json::value_t::array: return "an array";
        case nlohmann::ordered_json::value_t::object: return "an object";
        default: return "a number";
    }
}

std::string ids_to_json(const std::vector<int32_t>& ids) {
    std::string s = "[";
    for (std::size_t i = 0; i < ids.size(); ++i) {
        if (i) s += ',';
        s += std::to_string(ids[i]);
    }
    s += ']';
    return s;
}

}  // namespace

int tokenize_command(int argc, char** argv, bool root) {
    std::string path, chat_template;
    bool decode = false, chat = false, add_special = false, keep_special = false;
    po::options_description desc("tagflow tokenize options");
    // clang-format off
    desc.add_options()
        ("help,h", "print this help and exit")
        ("tokenizer", po::value<std::string>(&path), "tokenizer.json file, or a model directory holding one; required")
        ("decode", po::bool_switch(&decode), "input lines are JSON arrays of ids; output lines are JSON strings")
        ("chat", po::bool_switch(&chat),
         "input lines are {\"messages\": [...], \"add_generation_prompt\": bool, \"tools\"?: [...], ...} "
         "(other members are template variables, e.g. enable_thinking); output lines are the rendered prompts "
         "as JSON strings (the chat_template of tokenizer_config.json beside the tokenizer)")
        ("chat-template", po::value<std::string>(&chat_template),
         "--chat: render with this Jinja template file instead of tokenizer_config.json's")
        ("add-special-tokens", po::bool_switch(&add_special),
         "encode: apply the tokenizer's post-processor template (e.g. a leading BOS)")
        ("keep-special", po::bool_switch(&keep_special), "decode: keep special tokens (default: skip them)");
    // clang-format on
    po::variables_map vm;
    try {
        po::parsed_options parsed = po::command_line_parser(argc, argv).options(desc).run();
        for (const auto& o : parsed.options)
            if (o.position_key >= 0)
                throw ConfigError("tokenize: unexpected argument '" + o.value.at(0) + "' (options start with --)");
        po::store(parsed, vm);
        po::notify(vm);
    } catch (const po::error& e) {
        throw ConfigError(std::string("tokenize: ") + e.what());
    }
    if (vm.count("help")) {
        std::ostringstream h;
        h << "usage: tagflow tokenize --tokenizer PATH [--decode | --chat] [options] < in.jsonl > out.jsonl\n"
          << "JSON Lines in, JSON Lines out. Default: each line a JSON string -> the JSON array of its\n"
          << "token ids (no special tokens added). --decode: each line a JSON array of ids -> the text.\n"
          << "--chat: each line {\"messages\": [...], \"add_generation_prompt\": true} -> the rendered prompt.\n"
          << "Bad input names the line and exits 2; the lines before it are written.\n\n"
          << desc;
        print0("%s", h.str().c_str());
        return 0;
    }
    if (path.empty())
        throw ConfigError("tokenize: --tokenizer PATH is required (a tokenizer.json or a model directory)");
    if (decode && chat) throw ConfigError("tokenize: --decode and --chat exclude each other");
    if ((decode || chat) && add_special)
        throw ConfigError("tokenize: --add-special-tokens applies to encoding, not to --decode or --chat");
    if (!decode && keep_special) throw ConfigError("tokenize: --keep-special applies to --decode only");
    if (!chat && vm.count("chat-template")) throw ConfigError("tokenize: --chat-template applies to --chat only");
    const Mode mode = chat ? Mode::kChat : decode ? Mode::kDecode : Mode::kEncode;
    // Errors name the file (ConfigError). --chat needs only the template, not the vocabulary.
    std::optional<HfTokenizer> tok;
    std::optional<ChatTemplate> tmpl;
    if (mode == Mode::kChat)
        tmpl = chat_template.empty() ? ChatTemplate::from_tokenizer_config(path)
                                     : ChatTemplate::from_file(chat_template, path);
    else tok = HfTokenizer::load(path);
    if (!root) return 0;

    Output out;
    std::string line;
    std::size_t n = 0;
    const auto bad = [&](const std::string& what) {
        out.flush();
        return ConfigError("tokenize: stdin line " + std::to_string(n) + ": " + what);
    };
    std::ios::sync_with_stdio(false);
    while (std::getline(std::cin, line)) {
        ++n;
        std::size_t off = 0;
        if (!utf8_valid(line, &off)) throw bad("not valid UTF-8 (byte offset " + std::to_string(off) + ")");
        nlohmann::ordered_json j;
        try {
            j = nlohmann::ordered_json::parse(line);
        } catch (const json::parse_error& e) {
            std::string msg = e.what();
            const auto p = msg.find("] ");
            throw bad("not JSON (" + (p == std::string::npos ? msg : msg.substr(p + 2)) + ")");
        }
        if (mode == Mode::kChat) {
            std::string text;
            try {
                const ChatRequest r = parse_chat_request(j);
                text = tmpl->render(r.messages, r.add_generation_prompt, r.tools, r.extra);
            } catch (const Error& e) {  // a bad conversation, or the template's raise_exception
                throw bad(e.what());
            }
            out.line(json(text).dump(-1, ' ', false, json::error_handler_t::replace));
        } else if (mode == Mode::kEncode) {
            if (!j.is_string()) throw bad(std::string("expected a JSON string, got ") + json_type(j));
            out.line(ids_to_json(tok->encode(j.get_ref<const std::string&>(), add_special)));
        } else {
            if (!j.is_array()) throw bad(std::string("expected a JSON array of token ids, got ") + json_type(j));
            std::vector<int32_t> ids;
            ids.reserve(j.size());
            for (std::size_t i = 0; i < j.size(); ++i) {
                const auto& v = j[i];
                if (!v.is_number_integer())
                    throw bad("element " + std::to_string(i) + " is " + json_type(v) + ", not a token id");
                const int64_t id = v.get<int64_t>();
                if (id < 0 || id >= tok->vocab_size())
                    throw bad("token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                              std::to_string(tok->vocab_size()) + ")");
                ids.push_back(static_cast<int32_t>(id));
            }
            std::string text;
            try {
                text = tok->decode(ids, !keep_special);
            } catch (const Error& e) {  // an id inside the range that no token has
                throw bad(e.what());
            }
            out.line(json(text).dump());
        }
    }
    return 0;
}

}  // namespace tagflow::text
