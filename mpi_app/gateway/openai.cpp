// SPDX-License-Identifier: Apache-2.0
// openai: request validation and response formatting for the OpenAI-compatible endpoints
// (see openai.hpp). Every rejection is an ApiError naming the parameter, never an exception.
#include "gateway/openai.hpp"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "common/error.hpp"
#include "model/tokenizer.hpp"

namespace tagflow::gateway {

using nlohmann::json;

namespace {

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

ApiError bad(std::string msg, std::string param = "", std::string code = "", int status = 400) {
    ApiError e;
    e.status = status;
    e.message = std::move(msg);
    e.param = std::move(param);
    e.code = std::move(code);
    return e;
}

/// Nesting depth of a JSON text, counted outside strings; stops early above `limit`.
bool depth_ok(std::string_view s, int limit) {
    int depth = 0;
    bool in_str = false, esc = false;
    for (char c : s) {
        if (in_str) {
            if (esc) esc = false;
            else if (c == '\\') esc = true;
            else if (c == '"') in_str = false;
            continue;
        }
        if (c == '"') in_str = true;
        else if (c == '[' || c == '{') {
            if (++depth > limit) return false;
        } else if (c == ']' || c == '}') --depth;
    }
    return true;
}

bool absent(const json& j, const char* key) { return !j.contains(key) || j.at(key).is_null(); }

/// Optional number in [lo, hi] (open ends where the flags say so).
bool get_number(const json& j, const char* key, double* v, double lo, double hi, bool lo_open, ApiError* err) {
    if (absent(j, key)) return true;
    const json& x = j.at(key);
    if (!x.is_number()) return *err = bad(std::string("'") + key + "' must be a number", key), false;
    const double d = x.get<double>();
    if (!std::isfinite(d) || d > hi || d < lo || (lo_open && d == lo))
        return *err = bad(std::string("'") + key + "' must be in " + (lo_open ? "(" : "[") +
                              std::to_string(lo).substr(0, 3) + ", " + std::to_string(hi).substr(0, 3) + "], got " +
                              x.dump(),
                          key),
               false;
    *v = d;
    return true;
}

bool get_int(const json& j, const char* key, int64_t* v, int64_t lo, int64_t hi, ApiError* err) {
    if (absent(j, key)) return true;
    const json& x = j.at(key);
    if (!x.is_number_integer()) return *err = bad(std::string("'") + key + "' must be an integer", key), false;
    const int64_t d =
        x.is_number_unsigned() && x.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX) ? INT64_MAX : x.get<int64_t>();
    if (d < lo || d > hi)
        return *err = bad(std::string("'") + key + "' must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                              "], got " + std::to_string(d),
                          key),
               false;
    *v = d;
    return true;
}

bool get_ids(const json& a, int64_t vocab, const char* param, std::vector<int32_t>* out, ApiError* err) {
    for (const json& x : a) {
        if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() >= vocab)
            return *err = bad(std::string("'") + param + "' token ids must be integers in [0, " +
                                  std::to_string(vocab) + "), got " + x.dump(),
                              param),
                   false;
        out->push_back(static_cast<int32_t>(x.get<int64_t>()));
    }
    return true;
}

bool all_ints(const json& a) {
    return std::all_of(a.begin(), a.end(), [](const json& x) { return x.is_number_integer(); });
}

bool parse_prompt(const json& p, const text::Tokenizer& tok, int64_t vocab, std::vector<int32_t>* ids, ApiError* err) {
    if (p.is_string()) {
        try {
            *ids = tok.encode(p.get<std::string>());
        } catch (const Error& e) {  // not valid UTF-8
            return *err = bad(std::string("'prompt': ") + e.what(), "prompt"), false;
        }
        return true;
    }
    if (p.is_array() && !p.empty() && all_ints(p)) return get_ids(p, vocab, "prompt", ids, err);
    if (p.is_array() && p.size() == 1) return parse_prompt(p[0], tok, vocab, ids, err);
    if (p.is_array() && p.size() > 1 && (p[0].is_string() || p[0].is_array()))
        return *err = bad("batched prompts (a list of several prompts) are not supported; send one request per prompt",
                          "prompt"),
               false;
    return *err = bad("'prompt' must be a string, a list of token ids, or a list with one of those", "prompt"), false;
}

bool message_text(const json& c, std::string* out, ApiError* err) {
    if (c.is_null()) return true;
    if (c.is_string()) {
        *out = c.get<std::string>();
        return true;
    }
    if (c.is_array()) {
        for (const json& part : c) {
            if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") ||
                !part.at("text").is_string())
                return *err = bad("only text content parts ({\"type\": \"text\", \"text\": ...}) are supported",
                                  "messages"),
                       false;
            *out += part.at("text").get<std::string>();
        }
        return true;
    }
    return *err = bad("message 'content' must be a string, null or a list of text parts", "messages"), false;
}

bool parse_messages(const json& m, const text::Tokenizer& tok, std::vector<int32_t>* ids, ApiError* err) {
    if (!m.is_array() || m.empty()) return *err = bad("'messages' must be a non-empty list", "messages"), false;
    nlohmann::ordered_json msgs = nlohmann::ordered_json::array();
    static const char* kRoles[] = {"system", "developer", "user", "assistant", "tool"};
    for (const json& x : m) {
        if (!x.is_object() || !x.contains("role") || !x.at("role").is_string())
            return *err = bad("each message must be an object with a string 'role'", "messages"), false;
        const std::string role = x.at("role").get<std::string>();
        if (std::none_of(std::begin(kRoles), std::end(kRoles), [&](const char* r) { return role == r; }))
            return *err = bad("unknown message role '" + role + "'", "messages"), false;
        std::string text;
        if (x.contains("content") && !message_text(x.at("content"), &text, err)) return false;
        msgs.push_back({{"role", role}, {"content", std::move(text)}});
    }
    try {
        *ids = tok.chat_prompt(msgs, /*add_generation_prompt=*/true);
    } catch (const Error& e) {  // the template refused the conversation, or text that is not UTF-8
        return *err = bad(std::string("'messages': ") + e.what(), "messages"), false;
    }
    return true;
}

}  // namespace

std::string error_body(const ApiError& e) {
    json j = {{"error",
               {{"message", e.message},
                {"type", e.type},
                {"param", e.param.empty() ? json(nullptr) : json(e.param)},
                {"code", e.code.empty() ? json(nullptr) : json(e.code)}}}};
    return dump(j);
}

bool parse_completion_request(Endpoint ep, std::string_view body, const BackendInfo& info, const text::Tokenizer& tok,
                              const std::string& session_header, uint64_t default_seed, ParsedRequest* out,
                              ApiError* err) {
    *out = ParsedRequest{};
    out->endpoint = ep;
    CompletionRequest& r = out->req;
    if (!depth_ok(body, kMaxJsonDepth)) {
        *err = bad("JSON body nested deeper than " + std::to_string(kMaxJsonDepth) + " levels");
        return false;
    }
    const json j = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) {
        *err =
            bad("We could not parse the JSON body of your request. (HINT: This likely means you aren't using your "
                "HTTP library correctly. The OpenAI API expects a JSON payload.)");
        return false;
    }
    // ---- model ----
    if (!j.contains("model") || !j.at("model").is_string()) {
        *err = bad("you must provide a model parameter", "model");
        return false;
    }
    r.model = j.at("model").get<std::string>();
    const auto m =
        std::find_if(info.models.begin(), info.models.end(), [&](const ModelInfo& x) { return x.id == r.model; });
    if (m == info.models.end()) {
        *err = bad("The model `" + r.model + "` does not exist or you do not have access to it.", "model",
                   "model_not_found", 404);
        return false;
    }
    // ---- prompt ----
    if (ep == Endpoint::kCompletions) {
        if (!j.contains("prompt")) return *err = bad("you must provide a prompt", "prompt"), false;
        if (!parse_prompt(j.at("prompt"), tok, m->vocab_size, &r.prompt_ids, err)) return false;
        if (r.prompt_ids.empty()) {  // "" -> start of text, where the tokenizer has a BOS
            if (!tok.bos_id())
                return *err = bad("'prompt' is empty (this model's tokenizer has no BOS token)", "prompt"), false;
            r.prompt_ids.push_back(*tok.bos_id());
        }
    } else {
        if (!j.contains("messages")) return *err = bad("you must provide 'messages'", "messages"), false;
        if (!parse_messages(j.at("messages"), tok, &r.prompt_ids, err)) return false;
        if (j.contains("tools") && !j.at("tools").is_null() && !j.at("tools").empty())
            return *err = bad("tools / function calling are not supported by the tagflow gateway", "tools"), false;
        if (j.contains("functions") && !j.at("functions").is_null())
            return *err = bad("functions are not supported by the tagflow gateway", "functions"), false;
        if (j.contains("response_format") && j.at("response_format").is_object() &&
            j.at("response_format").value("type", "text") != "text")
            return *err = bad("only response_format {\"type\": \"text\"} is supported", "response_format"), false;
    }
    for (int32_t id : r.prompt_ids)
        if (id >= m->vocab_size)
            return *err = bad("prompt token " + std::to_string(id) + " is outside the model's vocabulary of " +
                                  std::to_string(m->vocab_size),
                              "prompt"),
                   false;
    // ---- sampling parameters ----
    if (!get_number(j, "temperature", &r.temperature, 0, 2, false, err)) return false;
    if (!get_number(j, "top_p", &r.top_p, 0, 1, true, err)) return false;
    int64_t v = 0;
    if (!get_int(j, "top_k", &v, 0, INT32_MAX, err)) return false;
    r.top_k = static_cast<int32_t>(v);
    v = 1;
    if (!get_int(j, "n", &v, 1, 1, err)) return false;
    if (ep == Endpoint::kCompletions) {
        v = 1;
        if (!get_int(j, "best_of", &v, 1, 1, err)) return false;
        if (j.contains("echo") && j.at("echo").is_boolean() && j.at("echo").get<bool>())
            return *err = bad("'echo' is not supported", "echo"), false;
    }
    for (const char* pen : {"presence_penalty", "frequency_penalty", "repetition_penalty"}) {
        double d = 0;
        if (!get_number(j, pen, &d, -2, 2, false, err)) return false;
        if (d != 0 && std::string(pen) != "repetition_penalty")
            return *err = bad(std::string("'") + pen +
                                  "' must be 0: penalties would change the sampling "
                                  "distribution away from the policy's",
                              pen),
                   false;
    }
    if (j.contains("logit_bias") && j.at("logit_bias").is_object() && !j.at("logit_bias").empty())
        return *err = bad("'logit_bias' is not supported (it would change the policy's distribution)", "logit_bias"),
               false;
    if (!absent(j, "seed")) {
        if (!j.at("seed").is_number_integer()) return *err = bad("'seed' must be an integer", "seed"), false;
        r.seed = j.at("seed").is_number_unsigned() ? j.at("seed").get<uint64_t>()
                                                   : static_cast<uint64_t>(j.at("seed").get<int64_t>());
    } else {
        r.seed = default_seed;
    }
    if (!absent(j, "stream")) {
        if (!j.at("stream").is_boolean()) return *err = bad("'stream' must be a boolean", "stream"), false;
        r.stream = j.at("stream").get<bool>();
    }
    if (!absent(j, "stream_options")) {
        const json& so = j.at("stream_options");
        if (!so.is_object()) return *err = bad("'stream_options' must be an object", "stream_options"), false;
        if (!r.stream)
            return *err = bad("'stream_options' is only allowed when 'stream' is true", "stream_options"), false;
        out->include_usage = so.value("include_usage", false);
    }
    // ---- logprobs ----
    if (ep == Endpoint::kCompletions) {
        if (!absent(j, "logprobs")) {
            if (!get_int(j, "logprobs", &v, 0, 5, err)) return false;
            out->logprobs = true;
            out->top_logprobs = static_cast<int>(v);
        }
    } else {
        if (!absent(j, "logprobs")) {
            if (!j.at("logprobs").is_boolean()) return *err = bad("'logprobs' must be a boolean", "logprobs"), false;
            out->logprobs = j.at("logprobs").get<bool>();
        }
        v = 0;
        if (!get_int(j, "top_logprobs", &v, 0, 20, err)) return false;
        if (v > 0 && !out->logprobs)
            return *err = bad("'top_logprobs' requires 'logprobs' to be true", "top_logprobs"), false;
        out->top_logprobs = static_cast<int>(v);
    }
    // ---- stop ----
    r.stop_ids = ep == Endpoint::kChat ? tok.chat_stop_ids() : tok.stop_ids();
    if (!absent(j, "stop")) {
        json stops = j.at("stop");
        if (stops.is_string()) stops = json::array({stops});
        if (!stops.is_array() || stops.size() > 4)
            return *err = bad("'stop' must be a string or a list of at most 4 strings", "stop"), false;
        for (const json& s : stops) {
            if (!s.is_string()) return *err = bad("'stop' entries must be strings", "stop"), false;
            std::vector<int32_t> ids;
            try {
                ids = tok.encode(s.get<std::string>());
            } catch (const Error& e) {
                return *err = bad(std::string("'stop': ") + e.what(), "stop"), false;
            }
            if (ids.size() != 1)
                return *err = bad("stop sequence " + s.dump() + " is " + std::to_string(ids.size()) +
                                      " tokens; this gateway supports single-token stop sequences only "
                                      "(use 'stop_token_ids' for token ids)",
                                  "stop"),
                       false;
            r.stop_ids.push_back(ids[0]);
        }
    }
    if (!absent(j, "stop_token_ids")) {
        if (!j.at("stop_token_ids").is_array())
            return *err = bad("'stop_token_ids' must be a list of token ids", "stop_token_ids"), false;
        if (!get_ids(j.at("stop_token_ids"), m->vocab_size, "stop_token_ids", &r.stop_ids, err)) return false;
    }
    // ---- session ----
    if (!absent(j, "session")) {
        if (!j.at("session").is_string() || j.at("session").get<std::string>().empty() ||
            j.at("session").get<std::string>().size() > 256)
            return *err = bad("'session' must be a non-empty string of at most 256 bytes", "session"), false;
        r.session = j.at("session").get<std::string>();
        out->session_given = true;
    } else if (!session_header.empty()) {
        if (session_header.size() > 256)
            return *err = bad("X-Tagflow-Session must be at most 256 bytes", "session"), false;
        r.session = session_header;
        out->session_given = true;
    }
    // ---- lengths ----
    const int64_t ctx = m->context_length, plen = static_cast<int64_t>(r.prompt_ids.size());
    int64_t max_tokens = -1;
    const char* mt_key = "max_tokens";
    if (ep == Endpoint::kChat && !absent(j, "max_completion_tokens")) mt_key = "max_completion_tokens";
    if (!get_int(j, mt_key, &max_tokens, 1, INT32_MAX, err)) return false;
    const bool given = max_tokens > 0;
    if (!given) max_tokens = ep == Endpoint::kCompletions ? std::min<int64_t>(16, ctx - plen) : ctx - plen;
    if (plen >= ctx || plen + max_tokens > ctx) {
        *err = bad("This model's maximum context length is " + std::to_string(ctx) + " tokens, however you requested " +
                       std::to_string(plen + (given ? max_tokens : 1)) + " tokens (" + std::to_string(plen) +
                       " in your prompt; " + std::to_string(given ? max_tokens : 1) +
                       " for the completion). Please reduce your prompt; or completion length.",
                   ep == Endpoint::kChat ? "messages" : "prompt", "context_length_exceeded");
        return false;
    }
    r.max_tokens = static_cast<int32_t>(max_tokens);
    return true;
}

// ---------------------------------------------------------------------------------------------

ResponseBuilder::ResponseBuilder(const ParsedRequest& p, std::string id, int64_t created, const text::Tokenizer& tok)
    : p_(p), id_(std::move(id)), created_(created), tok_(tok) {}

std::string ResponseBuilder::visible_text(size_t from, size_t to) const {
    std::string s;
    for (size_t i = from; i < to; ++i)
        if (!tok_.is_special(tokens_[i].id) && tokens_[i].id >= 0 && tokens_[i].id < tok_.vocab_size())
            s += tok_.token_bytes(tokens_[i].id);
    return s;
}

namespace {

json usage_json(size_t prompt, size_t completion) {
    return {{"prompt_tokens", prompt}, {"completion_tokens", completion}, {"total_tokens", prompt + completion}};
}

}  // namespace

/// The tagflow extension for tokens [from, to) (+ session and prompt ids when `first`).
static json extension(const ParsedRequest& p, const std::vector<GeneratedToken>& t, size_t from, size_t to,
                      bool first) {
    json ids = json::array(), lps = json::array(), vers = json::array();
    for (size_t i = from; i < to; ++i) {
        ids.push_back(t[i].id);
        lps.push_back(t[i].logprob);
        vers.push_back(t[i].version);
    }
    json e = {{"token_ids", ids}, {"logprobs", lps}, {"versions", vers}};
    if (first) {
        e["session"] = p.req.session;
        e["prompt_token_ids"] = p.req.prompt_ids;
    }
    return e;
}

/// Standard logprobs object for the visible tokens in [from, to); `offset0` = text bytes before `from`.
static json std_logprobs(const ParsedRequest& p, const text::Tokenizer& tok, const std::vector<GeneratedToken>& t,
                         size_t from, size_t to, size_t offset0) {
    if (p.endpoint == Endpoint::kCompletions) {
        json toks = json::array(), lps = json::array(), offs = json::array(), tops = json::array();
        size_t off = offset0;
        for (size_t i = from; i < to; ++i) {
            if (tok.is_special(t[i].id) || t[i].id < 0 || t[i].id >= tok.vocab_size()) continue;
            const std::string s = tok.token_bytes(t[i].id);
            toks.push_back(s);
            lps.push_back(t[i].logprob);
            offs.push_back(off);
            tops.push_back(json{{s, t[i].logprob}});
            off += s.size();
        }
        return {{"tokens", toks},
                {"token_logprobs", lps},
                {"top_logprobs", p.top_logprobs > 0 ? tops : json(nullptr)},
                {"text_offset", offs}};
    }
    json content = json::array();
    for (size_t i = from; i < to; ++i) {
        if (tok.is_special(t[i].id) || t[i].id < 0 || t[i].id >= tok.vocab_size()) continue;
        const std::string s = tok.token_bytes(t[i].id);
        json bytes = json::array();
        for (unsigned char c : s) bytes.push_back(static_cast<int>(c));
        json entry = {{"token", s}, {"logprob", t[i].logprob}, {"bytes", bytes}};
        json top = json::array();
        if (p.top_logprobs > 0) top.push_back(entry);
        entry["top_logprobs"] = top;
        content.push_back(entry);
    }
    return {{"content", content}, {"refusal", nullptr}};
}

std::string ResponseBuilder::chunk(const std::string& text, size_t from, size_t to, const char* finish,
                                   bool first) const {
    const bool chat = p_.endpoint == Endpoint::kChat;
    json choice = {{"index", 0}, {"finish_reason", finish ? json(finish) : json(nullptr)}};
    if (chat) {
        json delta = json::object();
        if (first) delta["role"] = "assistant";
        if (!finish || !text.empty()) delta["content"] = text;
        choice["delta"] = delta;
    } else {
        choice["text"] = text;
    }
    size_t off = 0;  // text bytes before token `from` (for completions' text_offset)
    for (size_t i = 0; i < from; ++i)
        if (!tok_.is_special(tokens_[i].id) && tokens_[i].id >= 0 && tokens_[i].id < tok_.vocab_size())
            off += tok_.token_bytes(tokens_[i].id).size();
    choice["logprobs"] = p_.logprobs && to > from ? std_logprobs(p_, tok_, tokens_, from, to, off) : json(nullptr);
    json j = {{"id", id_},
              {"object", chat ? "chat.completion.chunk" : "text_completion"},
              {"created", created_},
              {"model", p_.req.model},
              {"system_fingerprint", nullptr},
              {"choices", json::array({choice})}};
    if (p_.include_usage) j["usage"] = nullptr;
    j["tagflow"] = extension(p_, tokens_, from, to, first);
    return "data: " + dump(j) + "\n\n";
}

std::string ResponseBuilder::add_tokens(const std::vector<GeneratedToken>& t) {
    const size_t from = tokens_.size();
    tokens_.insert(tokens_.end(), t.begin(), t.end());
    if (!p_.req.stream || t.empty()) return {};
    held_ += visible_text(from, tokens_.size());
    const size_t n = model::utf8_complete_prefix(held_);
    const std::string text = held_.substr(0, n);
    held_.erase(0, n);
    const bool first = !sent_first_;
    sent_first_ = true;
    streamed_ = tokens_.size();
    return chunk(text, from, tokens_.size(), nullptr, first);
}

std::string ResponseBuilder::stream_finish(const Finish& f) {
    if (f.reason == "error") {
        ApiError e;
        e.status = f.http_status;
        e.message = f.error;
        e.type = f.http_status < 500 ? "invalid_request_error" : "server_error";
        return "data: " + error_body(e) + "\n\ndata: [DONE]\n\n";
    }
    std::string out = chunk(held_, tokens_.size(), tokens_.size(), f.reason.c_str(), !sent_first_);
    held_.clear();
    sent_first_ = true;
    if (p_.include_usage) {
        json j = {{"id", id_},
                  {"object", p_.endpoint == Endpoint::kChat ? "chat.completion.chunk" : "text_completion"},
                  {"created", created_},
                  {"model", p_.req.model},
                  {"system_fingerprint", nullptr},
                  {"choices", json::array()},
                  {"usage", usage_json(p_.req.prompt_ids.size(), tokens_.size())}};
        out += "data: " + dump(j) + "\n\n";
    }
    return out + "data: [DONE]\n\n";
}

std::string ResponseBuilder::body(const Finish& f) const {
    const bool chat = p_.endpoint == Endpoint::kChat;
    const std::string text = visible_text(0, tokens_.size());
    json choice = {{"index", 0}, {"finish_reason", f.reason}};
    if (chat) choice["message"] = {{"role", "assistant"}, {"content", text}, {"refusal", nullptr}};
    else choice["text"] = text;
    choice["logprobs"] = p_.logprobs ? std_logprobs(p_, tok_, tokens_, 0, tokens_.size(), 0) : json(nullptr);
    json j = {{"id", id_},
              {"object", chat ? "chat.completion" : "text_completion"},
              {"created", created_},
              {"model", p_.req.model},
              {"system_fingerprint", nullptr},
              {"choices", json::array({choice})},
              {"usage", usage_json(p_.req.prompt_ids.size(), tokens_.size())},
              {"tagflow", extension(p_, tokens_, 0, tokens_.size(), true)}};
    return dump(j);
}

std::string models_body(const BackendInfo& info) {
    json data = json::array();
    for (const ModelInfo& m : info.models) data.push_back(json::parse(model_body(m)));
    return dump(json{{"object", "list"}, {"data", data}});
}

std::string model_body(const ModelInfo& m) {
    return dump(json{{"id", m.id},
                     {"object", "model"},
                     {"created", m.created},
                     {"owned_by", m.owned_by},
                     {"tagflow", {{"context_length", m.context_length}, {"vocab_size", m.vocab_size}}}});
}

}  // namespace tagflow::gateway
