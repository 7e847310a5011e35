// SPDX-License-Identifier: Apache-2.0
// row_check: the checks of parse_row (dataset.cpp) as one SAX pass over the line, without building
// a JSON value: the index pass's fast path when no prompt has to be rendered. It must say exactly
// what parse_row says for the same line (Serial.data.Dataset.CheckRowSaysWhatParseRowSays):
// nlohmann's parse errors first, then the row's problems in parse_row's order, a repeated key
// counting with its last value as nlohmann's parser keeps it.
#include <cstdint>
#include <string>
#include <string_view>

#include "common/error.hpp"
#include "data/dataset.hpp"

namespace tagflow::data {
namespace {

using ojson = nlohmann::ordered_json;

enum class Kind { kNone, kNull, kBool, kNumber, kString, kEmptyString, kList, kObject };

const char* kind_name(Kind k) {
    switch (k) {
        case Kind::kNull: return "null";
        case Kind::kBool: return "a boolean";
        case Kind::kString:
        case Kind::kEmptyString: return "a string";
        case Kind::kList: return "a list";
        case Kind::kObject: return "an object";
        default: return "a number";
    }
}

struct RowSax {
    using number_integer_t = ojson::number_integer_t;
    using number_unsigned_t = ojson::number_unsigned_t;
    using number_float_t = ojson::number_float_t;
    using string_t = ojson::string_t;
    using binary_t = ojson::binary_t;

    int depth = 0;  // containers open
    Kind root = Kind::kNone;
    std::string key1, key3;  // the current key in the row / in a message object
    // prompt (its last occurrence)
    Kind prompt = Kind::kNone;
    bool prompt_list_empty = true;
    uint64_t msg_count = 0;
    std::string msg_error;  // the first bad message, as parse_row words it
    Kind role = Kind::kNone, content = Kind::kNone;
    // the other keys
    Kind data_source = Kind::kNone, reward_model = Kind::kNone, response = Kind::kNone;
    std::string data_source_value;
    bool extra_is_object = false, extra_answer = false;
    std::string perr;  // nlohmann's parse error, as parse_row reports it

    void value(Kind k, const std::string* s = nullptr) {
        if (depth == 0) {
            root = k;
            return;
        }
        if (depth == 1) {  // a value of the row
            if (key1 == "prompt") {
                prompt = k;
                prompt_list_empty = true;
                msg_count = 0;
                msg_error.clear();
            } else if (key1 == "data_source") {
                data_source = k;
                if (s) data_source_value = *s;
            } else if (key1 == "reward_model") {
                reward_model = k;
            } else if (key1 == "response") {
                response = k;
            } else if (key1 == "extra_info") {
                extra_is_object = k == Kind::kObject;
                extra_answer = false;
            }
            return;
        }
        if (depth == 2 && key1 == "prompt" && prompt == Kind::kList) {  // one message
            prompt_list_empty = false;
            uint64_t idx = msg_count++;
            if (k == Kind::kObject) {
                role = content = Kind::kNone;
            } else if (msg_error.empty()) {
                msg_error =
                    "\"prompt\"[" + std::to_string(idx) + "] must be a {role, content} object, not " + kind_name(k);
            }
            return;
        }
        if (depth == 2 && key1 == "extra_info" && extra_is_object && key3 == "answer") {
            extra_answer = k == Kind::kString || k == Kind::kEmptyString;
            return;
        }
        if (depth == 3 && key1 == "prompt" && prompt == Kind::kList) {  // a member of a message
            if (key3 == "role") role = k;
            else if (key3 == "content") content = k;
        }
    }
    void end_message() {
        if (!msg_error.empty()) return;
        const std::string at = "\"prompt\"[" + std::to_string(msg_count - 1) + "] ";
        if (role != Kind::kString && role != Kind::kEmptyString) {
            msg_error = at + "needs a string \"role\"";
        } else if (content != Kind::kString && content != Kind::kEmptyString) {
            msg_error = at + "needs a string \"content\"" +
                        (content == Kind::kNone ? std::string() : std::string(", not ") + kind_name(content));
        }
    }

    bool null() { return value(Kind::kNull), true; }
    bool boolean(bool) { return value(Kind::kBool), true; }
    bool number_integer(number_integer_t) { return value(Kind::kNumber), true; }
    bool number_unsigned(number_unsigned_t) { return value(Kind::kNumber), true; }
    bool number_float(number_float_t, const string_t&) { return value(Kind::kNumber), true; }
    bool string(string_t& v) { return value(v.empty() ? Kind::kEmptyString : Kind::kString, &v), true; }
    bool binary(binary_t&) { return value(Kind::kNumber), true; }
    bool start_object(std::size_t) {
        value(Kind::kObject);
        ++depth;
        return true;
    }
    bool key(string_t& k) {
        if (depth == 1) key1 = k;
        else if (depth == 3 || (depth == 2 && key1 == "extra_info")) key3 = k;
        return true;
    }
    bool end_object() {
        --depth;
        if (depth == 2 && key1 == "prompt" && prompt == Kind::kList) end_message();
        if (depth == 1 || depth == 2) key3.clear();
        return true;
    }
    bool start_array(std::size_t) {
        value(Kind::kList);
        ++depth;
        return true;
    }
    bool end_array() {
        --depth;
        return true;
    }
    bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) {
        perr = detail::parse_message(e);
        return false;
    }
};

}  // namespace

std::string check_row(std::string_view text, const std::string& file, uint64_t line, bool sft) {
    struct Where {  // built only for an error: most rows have none
        const std::string& file;
        uint64_t line;
        operator std::string() const { return file + ":" + std::to_string(line) + ": "; }
        std::string operator+(const std::string& s) const { return std::string(*this) + s; }
        std::string operator+(const char* s) const { return std::string(*this) + s; }
    } where{file, line};
    if (detail::json_depth(text.data(), text.size()) > kMaxJsonDepth)
        throw ConfigError(where + "JSON nested more than " + std::to_string(kMaxJsonDepth) + " levels");
    RowSax s;
    if (!ojson::sax_parse(text.begin(), text.end(), &s) || !s.perr.empty())
        throw ConfigError(where + "not JSON: " + s.perr);
    if (s.root != Kind::kObject) throw ConfigError(where + "a row must be a JSON object, not " + kind_name(s.root));
    switch (s.prompt) {
        case Kind::kNone: throw ConfigError(where + "no \"prompt\" (a string, or a list of {role, content} messages)");
        case Kind::kString: break;
        case Kind::kEmptyString: throw ConfigError(where + "\"prompt\" is an empty string");
        case Kind::kList:
            if (s.prompt_list_empty) throw ConfigError(where + "\"prompt\" is an empty list of messages");
            if (!s.msg_error.empty()) throw ConfigError(where + s.msg_error);
            break;
        default:
            throw ConfigError(where + "\"prompt\" must be a string or a list of {role, content} messages, not " +
                              kind_name(s.prompt));
    }
    auto is_string = [](Kind k) { return k == Kind::kString || k == Kind::kEmptyString; };
    if (s.data_source != Kind::kNone && s.data_source != Kind::kNull && !is_string(s.data_source))
        throw ConfigError(where + "\"data_source\" must be a string, not " + kind_name(s.data_source));
    if (s.reward_model != Kind::kNone && s.reward_model != Kind::kNull && s.reward_model != Kind::kObject)
        throw ConfigError(where + "\"reward_model\" must be an object, not " + kind_name(s.reward_model));
    bool has_response = false;
    if (s.response != Kind::kNone && s.response != Kind::kNull) {
        if (!is_string(s.response))
            throw ConfigError(where + "\"response\" must be a string, not " + kind_name(s.response));
        has_response = true;
    } else {
        has_response = s.extra_is_object && s.extra_answer;
    }
    if (sft && !has_response)
        throw ConfigError(where +
                          "sft needs the answer to train on: a string \"response\" or \"extra_info\".\"answer\"");
    return is_string(s.data_source) ? s.data_source_value : std::string();
}

}  // namespace tagflow::data
