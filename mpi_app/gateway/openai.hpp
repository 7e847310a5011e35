// SPDX-License-Identifier: Apache-2.0
// openai: the OpenAI wire format, as pure functions (no sockets, no threads). Turns the JSON
// body of POST /v1/completions or /v1/chat/completions into a validated CompletionRequest (or an
// OpenAI-style error), and turns the backend's tokens into the response body or the SSE chunks
// ("data: {...}\n\n" ... "data: [DONE]\n\n") that the official client libraries parse, with
// the tagflow extension field ("tagflow": token ids, log-probabilities, policy versions,
// session; see share/doc/gateway.md). Does not authenticate, route or talk to a backend.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "gateway/backend.hpp"
#include "text/tokenizer.hpp"

namespace tagflow::gateway {

/// {"error": {"message", "type", "param", "code"}}; empty param/code are written as null.
struct ApiError {
    int status = 400;
    std::string message;
    std::string type = "invalid_request_error";
    std::string param;
    std::string code;
};
std::string error_body(const ApiError& e);

enum class Endpoint { kCompletions, kChat };

/// A request after validation: what goes to the backend plus how to format the answer.
struct ParsedRequest {
    Endpoint endpoint = Endpoint::kCompletions;
    CompletionRequest req;       ///< request_id/completion_id are filled by the caller
    bool session_given = false;  ///< session came from the body or X-Tagflow-Session (else = completion id)
    bool include_usage = false;  ///< stream_options.include_usage
    bool logprobs = false;       ///< standard logprobs requested (completions: logprobs != null; chat: true)
    int top_logprobs = 0;        ///< completions: the logprobs integer; chat: top_logprobs
};

/// Largest JSON nesting accepted (deeper bodies are rejected before parsing).
constexpr int kMaxJsonDepth = 64;

/// Validates `body` for `ep` against the backend's models and the tokenizer. `session_header`
/// is X-Tagflow-Session ("" if absent); `default_seed` is used when the body has no seed.
/// Returns false and fills `err` on any problem (malformed JSON, unknown model, bad parameter,
/// prompt longer than the context, ...).
bool parse_completion_request(Endpoint ep, std::string_view body, const BackendInfo& info, const text::Tokenizer& tok,
                              const std::string& session_header, uint64_t default_seed, ParsedRequest* out,
                              ApiError* err);

/// Builds the answer to one request from the backend's tokens: the whole body, or SSE chunks.
class ResponseBuilder {
public:
    ResponseBuilder(const ParsedRequest& p, std::string id, int64_t created, const text::Tokenizer& tok);
    /// Appends tokens; when streaming, returns the SSE events for them ("" if nothing to send).
    std::string add_tokens(const std::vector<GeneratedToken>& t);
    /// Streaming: the final chunk(s) and "data: [DONE]\n\n". For reason "error" an error event.
    std::string stream_finish(const Finish& f);
    /// Non-streaming: the whole JSON body.
    std::string body(const Finish& f) const;
    const std::vector<GeneratedToken>& tokens() const { return tokens_; }

private:
    std::string chunk(const std::string& text, size_t from, size_t to, const char* finish, bool first) const;
    std::string visible_text(size_t from, size_t to) const;

    ParsedRequest p_;
    std::string id_;
    int64_t created_;
    const text::Tokenizer& tok_;
    std::vector<GeneratedToken> tokens_;
    std::string held_;     ///< streamed bytes waiting for a complete UTF-8 sequence
    size_t streamed_ = 0;  ///< tokens already sent in chunks
    bool sent_first_ = false;
};

/// GET /v1/models and /v1/models/{id}.
std::string models_body(const BackendInfo& info);
std::string model_body(const ModelInfo& m);

}  // namespace tagflow::gateway
