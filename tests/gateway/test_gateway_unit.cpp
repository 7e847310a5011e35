// SPDX-License-Identifier: Apache-2.0
// test_gateway_unit: the pure parts of the gateway without a server or a model: the HTTP
// parser (complete, incomplete, pipelined, every limit and malformed form), the byte
// tokenizer and chat template, UTF-8 hold-back, request validation and response/SSE
// formatting of openai.hpp, the token file's mode, constant-time compare and HOST:PORT parsing.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/error.hpp"
#include "gateway/http_parser.hpp"
#include "gateway/openai.hpp"
#include "gateway/server.hpp"
#include "model/tokenizer.hpp"
#include "text/tokenizer.hpp"

using namespace tagflow;
using namespace tagflow::gateway;
using nlohmann::json;

namespace {

HttpLimits small_limits() {
    HttpLimits l;
    l.max_header_bytes = 256;
    l.max_headers = 4;
    l.max_body_bytes = 64;
    return l;
}

BackendInfo test_info() {
    BackendInfo b;
    ModelInfo m;
    m.id = "m";
    m.context_length = 32;
    m.vocab_size = 272;
    b.models.push_back(m);
    return b;
}

bool parse(Endpoint ep, const std::string& body, ParsedRequest* p, ApiError* e, const std::string& sess = "") {
    static const text::Tokenizer& tok = *text::byte_level_tokenizer();
    return parse_completion_request(ep, body, test_info(), tok, sess, 99, p, e);
}

}  // namespace

TEST(HttpParser, CompleteRequestWithBodyAndPipelinedRest) {
    const std::string a = "POST /v1/completions?x=1 HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nX-A:  v \r\n\r\nhello";
    const std::string b = "GET /health HTTP/1.1\r\n\r\n";
    ParseResult r = parse_http_request(a + b, HttpLimits{});
    ASSERT_EQ(r.status, ParseStatus::kComplete) << r.error;
    EXPECT_EQ(r.consumed, a.size());
    EXPECT_EQ(r.request.method, "POST");
    EXPECT_EQ(r.request.path, "/v1/completions");
    EXPECT_EQ(r.request.query, "x=1");
    EXPECT_EQ(r.request.body, "hello");
    ASSERT_NE(r.request.header("x-a"), nullptr);
    EXPECT_EQ(*r.request.header("x-a"), "v");
    EXPECT_TRUE(r.request.keep_alive);
    ParseResult r2 = parse_http_request(std::string_view(a + b).substr(r.consumed), HttpLimits{});
    ASSERT_EQ(r2.status, ParseStatus::kComplete);
    EXPECT_EQ(r2.request.path, "/health");
}

TEST(HttpParser, IncompleteAtEveryPrefix) {
    const std::string a = "POST /p HTTP/1.1\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\nabc";
    for (std::size_t n = 0; n < a.size(); ++n) {
        ParseResult r = parse_http_request(std::string_view(a).substr(0, n), HttpLimits{});
        EXPECT_EQ(r.status, ParseStatus::kIncomplete) << "prefix " << n << ": " << r.error;
        if (n >= a.size() - 3) {
            EXPECT_TRUE(r.headers_complete);
            EXPECT_TRUE(r.request.expect_continue);
        }
    }
    EXPECT_EQ(parse_http_request(a, HttpLimits{}).status, ParseStatus::kComplete);
}

TEST(HttpParser, LimitsAndMalformed) {
    const HttpLimits l = small_limits();
    auto status = [&](const std::string& s) {
        ParseResult r = parse_http_request(s, l);
        return r.status == ParseStatus::kError ? r.error_status : 0;
    };
    EXPECT_EQ(status("POST / HTTP/1.1\r\nContent-Length: 65\r\n\r\n"), 413);
    EXPECT_EQ(status("POST / HTTP/1.1\r\nContent-Length: 64\r\n\r\n"), 0);  // incomplete, fine
    EXPECT_EQ(status("GET / HTTP/1.1\r\nA: " + std::string(300, 'x') + "\r\n\r\n"), 431);
    EXPECT_EQ(status("GET / HTTP/1.1\r\nA: " + std::string(300, 'x')), 431);  // even before the end
    EXPECT_EQ(status("GET / HTTP/1.1\r\nA: 1\r\nB: 1\r\nC: 1\r\nD: 1\r\nE: 1\r\n\r\n"), 431);
    EXPECT_EQ(status("GET / HTTP/2.0\r\n\r\n"), 505);
    EXPECT_EQ(status("GET / FOO\r\n\r\n"), 400);
    EXPECT_EQ(status("GET /\r\n\r\n"), 400);
    EXPECT_EQ(status("G(T / HTTP/1.1\r\n\r\n"), 400);
    EXPECT_EQ(status("GET x HTTP/1.1\r\n\r\n"), 400);
    EXPECT_EQ(status("GET / HTTP/1.1\r\nBad Name: v\r\n\r\n"), 400);
    EXPECT_EQ(status("GET / HTTP/1.1\r\n folded\r\n\r\n"), 400);
    EXPECT_EQ(status("GET / HTTP/1.1\r\nNoColon\r\n\r\n"), 400);
    EXPECT_EQ(status("POST / HTTP/1.1\r\nContent-Length: 1x\r\n\r\n"), 400);
    EXPECT_EQ(status("POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n"), 400);
    EXPECT_EQ(status("POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n"), 400);
    EXPECT_EQ(status("POST / HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n"), 400);
    EXPECT_EQ(status("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"), 501);
    EXPECT_EQ(status("GET / HTTP/1.1\nHost: x\n\n"), 400);
    EXPECT_EQ(status("GET / HTTP/1.1\r\nA: x\x01y\r\n\r\n"), 400);
    EXPECT_EQ(status("GET / HTTP/1.1\r\nExpect: magic\r\n\r\n"), 417);
}

TEST(HttpParser, KeepAliveRules) {
    auto ka = [](const std::string& s) { return parse_http_request(s, HttpLimits{}).request.keep_alive; };
    EXPECT_TRUE(ka("GET / HTTP/1.1\r\n\r\n"));
    EXPECT_FALSE(ka("GET / HTTP/1.1\r\nConnection: close\r\n\r\n"));
    EXPECT_FALSE(ka("GET / HTTP/1.0\r\n\r\n"));
    EXPECT_TRUE(ka("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n"));
}

TEST(Tokenizer, BytesSpecialsAndChatTemplate) {
    model::Tokenizer t;
    const std::string s = "h\xc3\xa9<|im_end|>";
    const auto ids = t.encode(s);
    ASSERT_EQ(ids.size(), s.size());  // the special name in text stays bytes
    EXPECT_EQ(ids[1], 0xc3);
    EXPECT_EQ(t.decode(ids), s);
    EXPECT_EQ(t.decode({104, model::Tokenizer::kEos}), "h");
    EXPECT_EQ(t.decode({104, model::Tokenizer::kEos}, false), "h<|eos|>");
    EXPECT_EQ(t.special_id("<|im_start|>"), model::Tokenizer::kImStart);
    EXPECT_EQ(t.special_id("nope"), -1);
    EXPECT_THROW(t.decode({261}), Error);
    const auto chat = t.apply_chat_template({{"user", "hi"}});
    EXPECT_EQ(t.decode(chat, false), "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
    EXPECT_EQ(chat.front(), model::Tokenizer::kImStart);
}

TEST(Tokenizer, Utf8HoldBack) {
    EXPECT_EQ(model::utf8_complete_prefix("ab"), 2u);
    EXPECT_EQ(model::utf8_complete_prefix("a\xc3"), 1u);
    EXPECT_EQ(model::utf8_complete_prefix("a\xc3\xa9"), 3u);
    EXPECT_EQ(model::utf8_complete_prefix("\xe2\x82"), 0u);
    EXPECT_EQ(model::utf8_complete_prefix("\xe2\x82\xac"), 3u);
    EXPECT_EQ(model::utf8_complete_prefix("\xf0\x9f\x98"), 0u);
    EXPECT_EQ(model::utf8_complete_prefix("\x80\x80"), 2u);  // invalid: nothing to wait for
}

TEST(OpenAI, CompletionRequestFields) {
    ParsedRequest p;
    ApiError e;
    ASSERT_TRUE(parse(Endpoint::kCompletions,
                      R"({"model":"m","prompt":"ab","max_tokens":4,"temperature":0,"top_p":0.5,"top_k":3,)"
                      R"("seed":7,"stop":["\n"],"stop_token_ids":[5],"logprobs":2,"session":"s1"})",
                      &p, &e))
        << e.message;
    EXPECT_EQ(p.req.prompt_ids, (std::vector<int32_t>{'a', 'b'}));
    EXPECT_EQ(p.req.max_tokens, 4);
    EXPECT_EQ(p.req.temperature, 0.0);
    EXPECT_EQ(p.req.top_k, 3);
    EXPECT_EQ(p.req.seed, 7u);
    EXPECT_EQ(p.req.stop_ids, (std::vector<int32_t>{model::Tokenizer::kEos, '\n', 5}));
    EXPECT_EQ(p.req.session, "s1");
    EXPECT_TRUE(p.logprobs);
    EXPECT_EQ(p.top_logprobs, 2);
    // Token-id prompts, nested single prompts, the header session, default seed and max_tokens.
    ASSERT_TRUE(parse(Endpoint::kCompletions, R"({"model":"m","prompt":[[1,2,3]]})", &p, &e, "hs")) << e.message;
    EXPECT_EQ(p.req.prompt_ids, (std::vector<int32_t>{1, 2, 3}));
    EXPECT_EQ(p.req.session, "hs");
    EXPECT_EQ(p.req.seed, 99u);
    EXPECT_EQ(p.req.max_tokens, 16);
    ASSERT_TRUE(parse(Endpoint::kCompletions, R"({"model":"m","prompt":""})", &p, &e));
    EXPECT_EQ(p.req.prompt_ids, (std::vector<int32_t>{model::Tokenizer::kBos}));
}

TEST(OpenAI, ChatRequestUsesTemplateAndFillsContext) {
    ParsedRequest p;
    ApiError e;
    ASSERT_TRUE(parse(
        Endpoint::kChat,
        R"({"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"logprobs":true,"top_logprobs":1})",
        &p, &e))
        << e.message;
    model::Tokenizer t;
    EXPECT_EQ(p.req.prompt_ids, t.apply_chat_template({{"user", "hi"}}));
    EXPECT_EQ(p.req.max_tokens, 32 - static_cast<int32_t>(p.req.prompt_ids.size()));
    EXPECT_EQ(p.req.stop_ids, t.chat_stop_ids());
}

TEST(OpenAI, RejectionsAreOpenAIErrors) {
    struct Case {
        Endpoint ep;
        const char* body;
        int status;
        const char* needle;
    };
    const Case cases[] = {
        {Endpoint::kCompletions, "{not json", 400, "parse the JSON"},
        {Endpoint::kCompletions, "[1]", 400, "parse the JSON"},
        {Endpoint::kCompletions, R"({"prompt":"a"})", 400, "model"},
        {Endpoint::kCompletions, R"({"model":"x","prompt":"a"})", 404, "does not exist"},
        {Endpoint::kCompletions, R"({"model":"m"})", 400, "prompt"},
        {Endpoint::kCompletions, R"({"model":"m","prompt":["a","b"]})", 400, "batched"},
        {Endpoint::kCompletions, R"({"model":"m","prompt":[1,999]})", 400, "[0, 272)"},
        {Endpoint::kCompletions, R"({"model":"m","prompt":"a","max_tokens":0})", 400, "max_tokens"},
        {Endpoint::kCompletions, R"({"model":"m","prompt":"a","max_tokens":40})", 400, "maximum context length"},
        {Endpoint::kCompletions, R"({"model":"m","prompt":"0123456789012345678901234567890123"})", 400,
         "maximum context length"},
        {Endpoint::kCompletions, R"({"model":"m","prompt":"a","temperature":3})", 400, "temperature"},
        {Endpoint::kCompletions, R"({"model":"m","prompt":"a","top_p":0})", 400, "top_p"},
        {Endpoint::kCompletions, R"({"model":"m","prompt":"a","n":2})", 400, "'n'"},
        {Endpoint::kCompletions, R"({"model":"m","prompt":"a","stop":"ab"})", 400, "single-token"},
        {Endpoint::kCompletions, R"({"model":"m","prompt":"a","presence_penalty":0.5})", 400, "presence_penalty"},
        {Endpoint::kCompletions, R"({"model":"m","prompt":"a","stream_options":{}})", 400, "stream_options"},
        {Endpoint::kCompletions, R"({"model":"m","prompt":"a","session":""})", 400, "session"},
        {Endpoint::kChat, R"({"model":"m","messages":[]})", 400, "messages"},
        {Endpoint::kChat, R"({"model":"m","messages":[{"role":"wizard","content":"x"}]})", 400, "role"},
        {Endpoint::kChat, R"({"model":"m","messages":[{"role":"user","content":"x"}],"tools":[{}]})", 400, "tools"},
        {Endpoint::kChat, R"({"model":"m","messages":[{"role":"user","content":"x"}],"top_logprobs":2})", 400,
         "logprobs"},
    };
    for (const Case& c : cases) {
        ParsedRequest p;
        ApiError e;
        EXPECT_FALSE(parse(c.ep, c.body, &p, &e)) << c.body;
        EXPECT_EQ(e.status, c.status) << c.body;
        EXPECT_NE(e.message.find(c.needle), std::string::npos) << c.body << " -> " << e.message;
        const json j = json::parse(error_body(e));
        EXPECT_TRUE(j["error"].contains("message") && j["error"].contains("type") && j["error"].contains("param") &&
                    j["error"].contains("code"));
    }
    // Deep nesting is refused before the recursive parser sees it.
    ParsedRequest p;
    ApiError e;
    EXPECT_FALSE(parse(Endpoint::kCompletions, std::string(100000, '[') + std::string(100000, ']'), &p, &e));
    EXPECT_NE(e.message.find("nested"), std::string::npos);
}

TEST(OpenAI, NonStreamingBodyAndStreamChunks) {
    ParsedRequest p;
    ApiError e;
    ASSERT_TRUE(parse(Endpoint::kChat,
                      R"({"model":"m","messages":[{"role":"user","content":"x"}],"stream":true,)"
                      R"("stream_options":{"include_usage":true},"logprobs":true})",
                      &p, &e));
    ResponseBuilder rb(p, "chatcmpl-1", 123, *text::byte_level_tokenizer());
    // "é" arrives split over two chunks: the first chunk holds the lead byte back.
    const std::string c1 = rb.add_tokens({{'o', -0.5f, 3}, {0xc3, -0.25f, 3}});
    const std::string c2 = rb.add_tokens({{0xa9, -0.125f, 3}, {model::Tokenizer::kImEnd, -1.0f, 3}});
    const std::string end = rb.stream_finish(Finish{"stop", "", 0});
    auto data = [](const std::string& ev) {
        EXPECT_EQ(ev.rfind("data: ", 0), 0u);
        EXPECT_EQ(ev.substr(ev.size() - 2), "\n\n");
        return json::parse(ev.substr(6, ev.find("\n\n") - 6));
    };
    const json j1 = data(c1), j2 = data(c2);
    EXPECT_EQ(j1["object"], "chat.completion.chunk");
    EXPECT_EQ(j1["choices"][0]["delta"]["role"], "assistant");
    EXPECT_EQ(j1["choices"][0]["delta"]["content"], "o");
    EXPECT_EQ(j1["tagflow"]["token_ids"], json({'o', 0xc3}));
    EXPECT_TRUE(j1["tagflow"].contains("session") && j1["tagflow"].contains("prompt_token_ids"));
    EXPECT_FALSE(j2["tagflow"].contains("prompt_token_ids"));  // only in the first chunk
    EXPECT_EQ(j2["choices"][0]["delta"]["content"], "\xc3\xa9");
    EXPECT_FALSE(j2["choices"][0]["delta"].contains("role"));
    EXPECT_EQ(j2["tagflow"]["versions"], json({3, 3}));
    EXPECT_EQ(j2["choices"][0]["logprobs"]["content"].size(), 1u);  // the stop token is not text
    EXPECT_NE(end.find("\"finish_reason\":\"stop\""), std::string::npos);
    EXPECT_NE(end.find("\"completion_tokens\":4"), std::string::npos);
    EXPECT_EQ(end.substr(end.size() - 14), "data: [DONE]\n\n");

    ASSERT_TRUE(parse(Endpoint::kCompletions, R"({"model":"m","prompt":[7,8],"logprobs":1})", &p, &e));
    ResponseBuilder nb(p, "cmpl-2", 5, *text::byte_level_tokenizer());
    EXPECT_EQ(nb.add_tokens({{'h', -1.5f, 0}, {'i', -2.5f, 1}}), "");  // not streaming: nothing yet
    const json b = json::parse(nb.body(Finish{"length", "", 0}));
    EXPECT_EQ(b["object"], "text_completion");
    EXPECT_EQ(b["choices"][0]["text"], "hi");
    EXPECT_EQ(b["choices"][0]["finish_reason"], "length");
    EXPECT_EQ(b["choices"][0]["logprobs"]["token_logprobs"], json({-1.5, -2.5}));
    EXPECT_EQ(b["choices"][0]["logprobs"]["text_offset"], json({0, 1}));
    EXPECT_EQ(b["usage"]["total_tokens"], 4);
    EXPECT_EQ(b["tagflow"]["prompt_token_ids"], json({7, 8}));
    EXPECT_EQ(b["tagflow"]["logprobs"], json({-1.5, -2.5}));
    EXPECT_EQ(b["tagflow"]["versions"], json({0, 1}));
}

TEST(Server, TokenFileIsPrivateAndTokensDiffer) {
    const std::string a = generate_token(), b = generate_token();
    EXPECT_NE(a, b);
    EXPECT_EQ(a.size(), 67u);
    const std::string path = ::testing::TempDir() + "/gw_token_test";
    {
        std::ofstream f(path);
        f << "old";
    }
    ::chmod(path.c_str(), 0644);
    write_token_file(path, a);
    struct stat st {};
    ASSERT_EQ(::stat(path.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u);
    std::ifstream f(path);
    std::string got;
    f >> got;
    EXPECT_EQ(got, a);
    std::remove(path.c_str());
    EXPECT_THROW(write_token_file("/nonexistent-dir/x", a), Error);
}

TEST(Server, CompareAndAddress) {
    EXPECT_TRUE(constant_time_equal("abc", "abc"));
    EXPECT_FALSE(constant_time_equal("abc", "abd"));
    EXPECT_FALSE(constant_time_equal("abc", "ab"));
    EXPECT_FALSE(constant_time_equal("", "a"));
    EXPECT_EQ(parse_host_port("0.0.0.0:8000"), std::make_pair(std::string("0.0.0.0"), 8000));
    EXPECT_EQ(parse_host_port(":9"), std::make_pair(std::string("127.0.0.1"), 9));
    EXPECT_EQ(parse_host_port("8080"), std::make_pair(std::string("127.0.0.1"), 8080));
    EXPECT_EQ(parse_host_port("[::1]:7"), std::make_pair(std::string("::1"), 7));
    EXPECT_THROW(parse_host_port("h:99999"), ConfigError);
    EXPECT_THROW(parse_host_port("h:x"), ConfigError);
    EXPECT_THROW(parse_host_port("::1:7"), ConfigError);
}
