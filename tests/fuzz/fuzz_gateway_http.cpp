// SPDX-License-Identifier: Apache-2.0
// fuzz_gateway_http: libFuzzer target for the gateway's request parsing (mpi_app/gateway/):
// the HTTP/1.1 parser parse_http_request and the OpenAI JSON body parser
// parse_completion_request. The first input byte picks what the rest is: an HTTP request
// (byte % 4 == 0 default limits, 1 small limits) or a JSON body of /v1/completions (2) or
// /v1/chat/completions (3).
// Checks, beyond "no crash, no UB, no leak, no exception":
//   - HTTP complete: consumed within the input, path + query = target, at most max_headers
//     lower-case headers, body = Content-Length bytes; the request written back as HTTP parses
//     to the same request; one byte less than `consumed` is incomplete;
//   - HTTP error: a known 4xx/5xx status and a one-line message;
//   - JSON accepted: a known model, 1.. prompt ids below the vocabulary, prompt + max_tokens
//     within the context, temperature/top_p/top_k in range; rejected: a 4xx ApiError with a
//     message, whose error_body() is valid JSON.
// fuzz-sources lists what tests/fuzz/CMakeLists.txt and tests/bench/fuzz_all.sh compile with it.
// fuzz-sources: mpi_app/gateway/http_parser.cpp mpi_app/gateway/openai.cpp mpi_app/model/tokenizer.cpp mpi_app/text/byte_tokenizer.cpp mpi_app/text/utf8.cpp
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "fuzz_check.h"
#include "gateway/http_parser.hpp"
#include "gateway/openai.hpp"
#include "text/tokenizer.hpp"

namespace gw = tagflow::gateway;

namespace {

bool one_line(const std::string& s) { return s.find_first_of("\r\n") == std::string::npos; }

std::string write_back(const gw::HttpRequest& q) {
    std::string s = q.method + " " + q.target + " HTTP/1." + std::to_string(q.version_minor) + "\r\n";
    for (const auto& [k, v] : q.headers) s += k + ": " + v + "\r\n";
    return s + "\r\n" + q.body;
}

void check_same(const gw::HttpRequest& a, const gw::HttpRequest& b) {
    FUZZ_CHECK(a.method == b.method && a.target == b.target && a.path == b.path && a.query == b.query &&
                   a.version_minor == b.version_minor && a.headers == b.headers && a.body == b.body &&
                   a.keep_alive == b.keep_alive && a.expect_continue == b.expect_continue,
               "written-back request parses differently");
}

void check_http(std::string_view in, const gw::HttpLimits& lim) {
    const gw::ParseResult r = gw::parse_http_request(in, lim);
    switch (r.status) {
        case gw::ParseStatus::kError: {
            const int s = r.error_status;
            FUZZ_CHECK(s == 400 || s == 413 || s == 414 || s == 417 || s == 431 || s == 501 || s == 505,
                       "error status %d", s);
            FUZZ_CHECK(!r.error.empty() && one_line(r.error), "error message '%s'", r.error.c_str());
            FUZZ_CHECK(std::string(gw::http_reason(s)) != "Unknown", "no reason for %d", s);
            return;
        }
        case gw::ParseStatus::kIncomplete: return;
        case gw::ParseStatus::kComplete: break;
    }
    const gw::HttpRequest& q = r.request;
    FUZZ_CHECK(r.headers_complete && r.consumed > 0 && r.consumed <= in.size(), "consumed %zu of %zu", r.consumed,
               in.size());
    FUZZ_CHECK(!q.method.empty() && !q.target.empty(), "empty method or target");
    FUZZ_CHECK(q.path + (q.target.find('?') != std::string::npos ? "?" + q.query : "") == q.target,
               "path '%s' + query '%s' != target '%s'", q.path.c_str(), q.query.c_str(), q.target.c_str());
    FUZZ_CHECK(q.version_minor == 0 || q.version_minor == 1, "version 1.%d", q.version_minor);
    FUZZ_CHECK(q.headers.size() <= lim.max_headers, "%zu headers", q.headers.size());
    FUZZ_CHECK(q.body.size() <= lim.max_body_bytes, "body of %zu bytes", q.body.size());
    for (const auto& [k, v] : q.headers) {
        for (char c : k) FUZZ_CHECK(!(c >= 'A' && c <= 'Z'), "header name '%s' not lower-case", k.c_str());
        FUZZ_CHECK(one_line(v), "header value with CR/LF");
    }
    if (const std::string* cl = q.header("content-length")) {
        uint64_t n = 0;
        for (char c : *cl) n = n * 10 + static_cast<uint64_t>(c - '0');  // digits only, checked by the parser
        FUZZ_CHECK(n == q.body.size(), "body of %zu bytes with Content-Length %s", q.body.size(), cl->c_str());
    } else {
        FUZZ_CHECK(q.body.empty(), "body without Content-Length");
    }
    // the request alone, written back, parses to the same request
    const std::string back = write_back(q);
    if (back.size() - q.body.size() <= lim.max_header_bytes) {
        const gw::ParseResult r2 = gw::parse_http_request(back, lim);
        FUZZ_CHECK(r2.status == gw::ParseStatus::kComplete && r2.consumed == back.size(),
                   "written-back request: status %d, %s", static_cast<int>(r2.status), r2.error.c_str());
        check_same(q, r2.request);
    }
    // it did not depend on the bytes after it, and one byte less is not a request yet
    const gw::ParseResult r3 = gw::parse_http_request(in.substr(0, r.consumed), lim);
    FUZZ_CHECK(r3.status == gw::ParseStatus::kComplete && r3.consumed == r.consumed, "prefix");
    check_same(q, r3.request);
    std::unique_ptr<char[]> shorter(new char[r.consumed - 1]);  // exact size: ASan sees over-reads
    std::memcpy(shorter.get(), in.data(), r.consumed - 1);
    const gw::ParseResult r4 = gw::parse_http_request(std::string_view(shorter.get(), r.consumed - 1), lim);
    FUZZ_CHECK(r4.status == gw::ParseStatus::kIncomplete, "one byte less: status %d (%s)", static_cast<int>(r4.status),
               r4.error.c_str());
}

void check_json(gw::Endpoint ep, std::string_view body) {
    static const tagflow::text::Tokenizer& tok = *tagflow::text::byte_level_tokenizer();
    gw::BackendInfo info;
    gw::ModelInfo m;
    m.id = "m";
    m.context_length = 64;
    m.vocab_size = tok.vocab_size();
    info.models.push_back(m);
    gw::ParsedRequest p;
    gw::ApiError err;
    if (gw::parse_completion_request(ep, body, info, tok, "", 7, &p, &err)) {
        const gw::CompletionRequest& r = p.req;
        FUZZ_CHECK(r.model == "m", "model '%s'", r.model.c_str());
        FUZZ_CHECK(!r.prompt_ids.empty(), "empty prompt accepted");
        for (int32_t id : r.prompt_ids) FUZZ_CHECK(id >= 0 && id < m.vocab_size, "prompt id %d", id);
        FUZZ_CHECK(r.max_tokens >= 1 && static_cast<int64_t>(r.prompt_ids.size()) + r.max_tokens <= m.context_length,
                   "prompt %zu + max_tokens %d > context", r.prompt_ids.size(), r.max_tokens);
        FUZZ_CHECK(r.temperature >= 0 && r.temperature <= 2, "temperature %g", r.temperature);
        FUZZ_CHECK(r.top_p > 0 && r.top_p <= 1, "top_p %g", r.top_p);
        FUZZ_CHECK(r.top_k >= 0, "top_k %d", r.top_k);
        FUZZ_CHECK(p.endpoint == ep, "endpoint");
    } else {
        FUZZ_CHECK(err.status >= 400 && err.status < 500 && !err.message.empty(), "error %d '%s'", err.status,
                   err.message.c_str());
        const std::string eb = gw::error_body(err);
        FUZZ_CHECK(nlohmann::json::accept(eb), "error body is not JSON: %s", eb.c_str());
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size == 0) return 0;
    const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
    switch (data[0] % 4) {
        case 0: check_http(rest, gw::HttpLimits{}); break;
        case 1: {
            gw::HttpLimits small;
            small.max_header_bytes = 256;
            small.max_headers = 4;
            small.max_body_bytes = 64;
            check_http(rest, small);
            break;
        }
        case 2: check_json(gw::Endpoint::kCompletions, rest); break;
        default: check_json(gw::Endpoint::kChat, rest);
    }
    return 0;
}
