// SPDX-License-Identifier: Apache-2.0
// server_routes: what the gateway answers. Authentication (a bearer token on every request,
// compared in constant time; the connection is closed after a failure), the routes (/health,
// /v1/models, /v1/status, /v1/profile, /v1/completions, /v1/chat/completions, /v1/rewards) and the hand-off of
// a completion to the Backend. The I/O loop that calls handle() is server.cpp's.
// Does NOT: touch sockets other than through respond()/flush() (server.cpp).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>

#include "common/error.hpp"
#include "gateway/openai.hpp"
#include "gateway/server_impl.hpp"

namespace tagflow::gateway {

void Server::Impl::handle(Conn& c, const HttpRequest& r) {
    // ---- authentication: "Authorization: Bearer <token>" on every request ----
    const std::string* auth = r.header("authorization");
    std::string_view given;
    if (auth && auth->size() > 7 && (auth->compare(0, 7, "Bearer ") == 0 || auth->compare(0, 7, "bearer ") == 0))
        given = std::string_view(*auth).substr(7);
    if (!constant_time_equal(given, cfg.token)) {
        count(&ServerStats::unauthorized);
        ApiError e;
        e.status = 401;
        if (!auth) {
            e.message =
                "You didn't provide an API key. You need to provide your API key in an Authorization header "
                "using Bearer auth (i.e. Authorization: Bearer YOUR_KEY). The tagflow gateway's key is in "
                "<out>/gateway.token.";
        } else {
            e.message = "Incorrect API key provided. The tagflow gateway's key is in <out>/gateway.token.";
            e.code = "invalid_api_key";
        }
        respond_error(c, e, "WWW-Authenticate: Bearer\r\n");
        return;
    }
    // ---- routing ----
    const std::string& p = r.path;
    auto need = [&](const char* method) {
        if (r.method == method) return true;
        ApiError e;
        e.status = 405;
        e.message = "Method " + r.method + " not allowed for " + p + " (use " + method + ")";
        respond_error(c, e, std::string("Allow: ") + method + "\r\n");
        return false;
    };
    if (p == "/health" || p == "/v1/health") {
        if (!need("GET")) return;
        const BackendInfo info = backend->info();
        nlohmann::json h{{"status", "ok"},
                         {"pending", info.pending},
                         {"policy_version", info.policy_version},
                         {"cancelled", info.cancelled}};
        if (info.sessions >= 0) h["sessions"] = info.sessions;
        respond(c, 200, h.dump());
    } else if (p == "/v1/models") {
        if (!need("GET")) return;
        respond(c, 200, models_body(backend->info()));
    } else if (p.rfind("/v1/models/", 0) == 0) {
        if (!need("GET")) return;
        const std::string id = p.substr(11);
        for (const ModelInfo& m : backend->info().models)
            if (m.id == id) return respond(c, 200, model_body(m));
        ApiError e;
        e.status = 404;
        e.message = "The model '" + id + "' does not exist";
        e.param = "model";
        e.code = "model_not_found";
        respond_error(c, e);
    } else if (p == "/v1/status" && !cfg.status_file.empty()) {
        // The job's live status record (health/status.hpp), as `tagflow status --json` reads it.
        if (!need("GET")) return;
        std::string body;
        int fd = ::open(cfg.status_file.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        struct stat sb {};
        if (fd >= 0 && ::fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size > 0 && sb.st_size <= (1 << 22)) {
            body.resize(static_cast<size_t>(sb.st_size));
            if (::pread(fd, &body[0], body.size(), 0) != static_cast<ssize_t>(body.size())) body.clear();
        }
        if (fd >= 0) ::close(fd);
        if (body.empty()) {
            ApiError e;
            e.status = 503;
            e.message = "No live status record yet (" + cfg.status_file + ")";
            respond_error(c, e);
        } else {
            respond(c, 200, body);
        }
    } else if ((p == "/v1/profile" || p.rfind("/v1/profile/", 0) == 0) && cfg.profile) {
        // On-demand profiling of the job's ranks (share/doc/commands.md, `tagflow profile`).
        const bool submit = p == "/v1/profile";
        if (!need(submit ? "POST" : "GET")) return;
        const ProfileAnswer a = cfg.profile(submit ? std::string() : p.substr(12), submit ? r.body : std::string());
        if (a.status >= 400) {
            ApiError e;
            e.status = a.status;
            e.message = a.error;
            respond_error(c, e);
        } else {
            respond(c, a.status, a.body);
        }
    } else if (p == "/v1/completions") {
        if (need("POST")) handle_completion(c, r, Endpoint::kCompletions);
    } else if (p == "/v1/chat/completions") {
        if (need("POST")) handle_completion(c, r, Endpoint::kChat);
    } else if (p == "/v1/rewards" || p == "/v1/tagflow/reward") {
        if (need("POST")) handle_reward(c, r);
    } else {
        ApiError e;
        e.status = 404;
        e.message = "Invalid URL (" + r.method + " " + p + ")";
        respond_error(c, e);
    }
}

void Server::Impl::handle_completion(Conn& c, const HttpRequest& r, Endpoint ep) {
    const std::string* sh = r.header("x-tagflow-session");
    ParsedRequest pr;
    ApiError err;
    const uint64_t serial = next_serial++;
    if (!parse_completion_request(ep, r.body, backend->info(), *tok, sh ? *sh : "", seed_base + serial, &pr, &err)) {
        respond_error(c, err);
        return;
    }
    pr.req.request_id = serial;
    pr.req.completion_id = (ep == Endpoint::kChat ? "chatcmpl-" : "cmpl-") + id_base + std::to_string(serial);
    if (pr.req.session.empty()) pr.req.session = pr.req.completion_id;
    c.rb = std::make_unique<ResponseBuilder>(pr, pr.req.completion_id, static_cast<int64_t>(std::time(nullptr)), *tok);
    c.busy = true;
    c.serial = serial;
    c.request_id = serial;
    c.stream = pr.req.stream;
    c.chunked = c.stream && r.version_minor == 1;
    if (c.stream) {
        if (!c.chunked) c.close_after = true;  // HTTP/1.0: the end of the body is the end of the connection
        c.out += std::string("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n") +
                 (c.chunked ? "Transfer-Encoding: chunked\r\n" : "") +
                 "Connection: " + (c.keep_alive && c.chunked ? "keep-alive" : "close") + "\r\n\r\n";
    }
    count(&ServerStats::completions);
    backend->submit(std::move(pr.req), std::make_shared<ConnSink>(shared, c.id, serial));
}

void Server::Impl::handle_reward(Conn& c, const HttpRequest& r) {
    using nlohmann::json;
    const json j = json::parse(r.body, nullptr, false);
    ApiError e;
    if (r.body.size() > 65536 || j.is_discarded() || !j.is_object()) {
        e.message = "We could not parse the JSON body of your request (expected {\"session\": ..., \"reward\": ...}).";
        return respond_error(c, e);
    }
    RewardReport rep;
    if (j.contains("session") && j.at("session").is_string()) rep.session = j.at("session").get<std::string>();
    for (const char* k : {"id", "completion_id"})
        if (j.contains(k) && j.at(k).is_string()) rep.completion_id = j.at(k).get<std::string>();
    if (rep.session.empty() && rep.completion_id.empty()) {
        e.message = "a reward needs 'session' (the session's id) or 'id' (a completion id)";
        e.param = "session";
        return respond_error(c, e);
    }
    if (!j.contains("reward") || !j.at("reward").is_number() || !std::isfinite(j.at("reward").get<double>())) {
        e.message = "'reward' must be a finite number";
        e.param = "reward";
        return respond_error(c, e);
    }
    // Rewards train in float32: 1e39 is finite as a double but inf there, and one inf makes every
    // parameter NaN at the next step (and in the checkpoint written after it).
    if (const double v = j.at("reward").get<double>(); std::fabs(v) > std::numeric_limits<float>::max()) {
        e.message = "'reward' " + j.at("reward").dump() +
                    " is out of range: rewards must be finite in float32 "
                    "(|reward| <= 3.4028235e38)";
        e.param = "reward";
        return respond_error(c, e);
    }
    rep.reward = j.at("reward").get<double>();
    if (j.contains("group") && !j.at("group").is_null()) {
        const json& g = j.at("group");
        if (g.is_string()) rep.group = g.get<std::string>();
        else if (g.is_number_integer()) rep.group = std::to_string(g.get<int64_t>());
        if (rep.group.empty() || rep.group.size() > 256) {
            e.message = "'group' must be a non-empty string (at most 256 bytes) or an integer";
            e.param = "group";
            return respond_error(c, e);
        }
    }
    if (backend->report_reward(rep) == RewardStatus::kUnknown) {
        e.status = 404;
        e.message = "no completion was served for " +
                    (rep.session.empty() ? "id '" + rep.completion_id + "'" : "session '" + rep.session + "'");
        e.code = "session_not_found";
        return respond_error(c, e);
    }
    respond(c, 200,
            json{{"object", "reward"},
                 {"session", rep.session},
                 {"id", rep.completion_id},
                 {"reward", rep.reward},
                 {"group", rep.group},
                 {"accepted", true}}
                .dump(-1, ' ', false, json::error_handler_t::replace));
}

}  // namespace tagflow::gateway
