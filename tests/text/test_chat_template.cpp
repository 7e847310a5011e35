// SPDX-License-Identifier: Apache-2.0
// Unit tests of ChatTemplate (text/chat_template.hpp): loading tokenizer_config.json in its
// forms (string, named list, AddedToken special tokens), template choice with tools, extra
// variables, key order of tool arguments, and the one-line errors naming the file.
#include <gtest/gtest.h>

#include <cstdio>
#include <functional>
#include <fstream>
#include <string>
#include <unistd.h>

#include "text/chat_template.hpp"

using tagflow::text::ChatTemplate;
using tagflow::text::TemplateError;
using json = nlohmann::ordered_json;

namespace {

struct TempFile {
    std::string path;
    explicit TempFile(const std::string& text) {
        char name[] = "/tmp/tagflow_chat_XXXXXX";
        int fd = ::mkstemp(name);
        path = name;
        ::close(fd);
        std::ofstream(path, std::ios::binary) << text;
    }
    ~TempFile() { std::remove(path.c_str()); }
};

const char* kChatml =
    "{% for m in messages %}{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

std::string error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const TemplateError& e) {
        return e.what();
    }
    return "no error";
}

}  // namespace

TEST(ChatTemplate, StringFormAndSpecialTokens) {
    json cfg = {{"chat_template", "{{ bos_token }}|{{ eos_token }}|{{ pad_token is defined }}|{{ messages | length }}"},
                {"bos_token", {{"content", "<s>"}, {"lstrip", false}}},
                {"eos_token", "</s>"},
                {"pad_token", nullptr}};
    TempFile f(cfg.dump());
    ChatTemplate t = ChatTemplate::from_tokenizer_config(f.path);
    EXPECT_EQ(t.render(json::array({{{"role", "user"}, {"content", "x"}}}), false), "<s>|</s>|False|1");
}

TEST(ChatTemplate, NamedListPicksToolUseWhenToolsAreGiven) {
    json cfg = {{"chat_template", json::array({{{"name", "default"}, {"template", "plain"}},
                                               {{"name", "tool_use"}, {"template", "tools={{ tools | length }}"}}})}};
    TempFile f(cfg.dump());
    ChatTemplate t = ChatTemplate::from_tokenizer_config(f.path);
    json msgs = json::array({{{"role", "user"}, {"content", "x"}}});
    EXPECT_EQ(t.render(msgs, true), "plain");
    EXPECT_EQ(t.render(msgs, true, json::array({{{"type", "function"}}})), "tools=1");
}

TEST(ChatTemplate, RendersChatmlWithExtraVariablesAndOrderedArguments) {
    ChatTemplate t = ChatTemplate::from_string(std::string(kChatml) + "{{ enable_thinking }}");
    json msgs = json::array({{{"role", "system"}, {"content", "s"}}, {{"role", "user"}, {"content", "héllo"}}});
    EXPECT_EQ(t.render(msgs, true, nullptr, {{"enable_thinking", false}}),
              "<|im_start|>system\ns<|im_end|>\n<|im_start|>user\nhéllo<|im_end|>\n<|im_start|>assistant\nFalse");
    ChatTemplate j = ChatTemplate::from_string("{{ messages[0].tool_calls[0].function.arguments | tojson }}");
    json call = json::parse(R"([{"role":"assistant","content":"","tool_calls":[{"function":{"name":"f",
        "arguments":{"zeta":1,"alpha":[0.5,true,null]}}}]}])");
    EXPECT_EQ(j.render(call, false), "{\"zeta\": 1, \"alpha\": [0.5, true, null]}");
}

TEST(ChatTemplate, ErrorsNameTheFileInOneLine) {
    TempFile bad("{\"chat_template\": \"{{ x | xmlattr }}\"}");
    EXPECT_EQ(error_of([&] { ChatTemplate::from_tokenizer_config(bad.path); }),
              bad.path + ": chat template: line 1:8: unsupported filter 'xmlattr'");
    TempFile none("{\"bos_token\": \"<s>\"}");
    EXPECT_EQ(error_of([&] { ChatTemplate::from_tokenizer_config(none.path); }),
              none.path + ": no chat_template (give one with --chat-template FILE)");
    TempFile notjson("{\"chat_template\": ");
    EXPECT_NE(error_of([&] { ChatTemplate::from_tokenizer_config(notjson.path); }).find(": not valid JSON"),
              std::string::npos);
    ChatTemplate t = ChatTemplate::from_string(kChatml);
    EXPECT_EQ(error_of([&] { t.render(json("hello"), true); }), "chat template: messages must be a list, got string");
    EXPECT_EQ(error_of([&] { t.render(json::array({1}), true); }),
              "chat template: messages[0] must be an object, got number");
    ChatTemplate r = ChatTemplate::from_string("{{ raise_exception('Only user and assistant roles are supported!') }}",
                                               {}, "mistral.jinja");
    EXPECT_EQ(error_of([&] { r.render(json::array(), false); }),
              "mistral.jinja: chat template: line 1:19: raise_exception: Only user and assistant roles are supported!");
}
