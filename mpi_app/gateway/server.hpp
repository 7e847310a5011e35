// SPDX-License-Identifier: Apache-2.0
// server: the gateway's HTTP server. One I/O thread runs a poll() loop over the listening
// socket, the connections and a wake-up pipe: it reads bytes, parses requests
// (http_parser.hpp), checks the bearer token (constant-time), validates the OpenAI JSON
// (openai.hpp) and hands each generation to the Backend, which runs elsewhere. The backend's
// TokenSink pushes tokens into a queue and wakes the loop, which writes the response (JSON, or
// SSE chunks with chunked transfer encoding) — so handlers only enqueue, and a slow backend
// never blocks other connections. Keep-alive and pipelining are supported; every error is an
// OpenAI-style JSON body and the server keeps serving. Binds 127.0.0.1 unless told otherwise.
// Abuse (share/doc/hostile-input.md): input and unread output per connection are bounded (a client
// that does not read its answers is not read either), requests are parsed in linear time and at
// most a few per connection per round (fair service), headers and bodies have deadlines that
// trickled bytes do not extend, an authentication failure closes the connection, and the
// connection limit is enforced at accept within a descriptor budget (EMFILE backs off).
// Does not do TLS, HTTP/2, routing between ranks (the Backend's job) or MPI.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

#include "gateway/backend.hpp"
#include "gateway/http_parser.hpp"
#include "text/tokenizer.hpp"

namespace tagflow::gateway {

/// What the job answers to POST /v1/profile and GET /v1/profile/ID (ServerConfig::profile).
struct ProfileAnswer {
    int status = 200;   ///< HTTP status; >= 400: an error with `error` as its message
    std::string body;   ///< JSON body when status < 400
    std::string error;  ///< one line when status >= 400
};

struct ServerConfig {
    std::string host = "127.0.0.1";  ///< numeric IPv4/IPv6 address or "localhost"; never all interfaces by default
    int port = 0;                    ///< 0 = any free port (see Server::port())
    std::string token;               ///< required bearer token (generate_token())
    HttpLimits limits;
    int max_connections = 512;               ///< at the limit, a new connection evicts one that is still sending
                                             ///< its request headers (or an idle one), else gets 503 and is closed
    int fd_reserve = 256;                    ///< descriptors never used for connections: the limit is lowered to
                                             ///< RLIMIT_NOFILE - fd_reserve (heartbeats, checkpoints, HDF5, MPI)
    double idle_timeout_s = 120;             ///< close a connection idle (no request in flight) this long
    double header_timeout_s = 10;            ///< a request's headers must arrive within this many s of its first byte
    double request_timeout_s = 60;           ///< ... and its body within this many s (trickling bytes do not extend it)
    std::size_t max_unread_bytes = 1 << 20;  ///< answers not yet read by the client: above this the
                                             ///< connection is neither read nor served (backpressure)
    std::string status_file;  ///< GET /v1/status answers with this file (the job's live status.json); "" = 404
    /// POST /v1/profile (id "", the request body) and GET /v1/profile/ID (id, body "") are answered by
    /// this (on-demand profiling, profile/profile_request.hpp), on the I/O thread; unset = 404.
    std::function<ProfileAnswer(const std::string& id, const std::string& body)> profile;
};

struct ServerStats {
    uint64_t connections = 0;   ///< accepted
    uint64_t requests = 0;      ///< complete requests parsed
    uint64_t completions = 0;   ///< handed to the backend
    uint64_t errors = 0;        ///< 4xx/5xx answers
    uint64_t unauthorized = 0;  ///< 401 answers
};

class Server {
public:
    /// Does not bind yet (start() does). Throws ConfigError on an empty token.
    Server(ServerConfig cfg, std::shared_ptr<Backend> backend, std::shared_ptr<const text::Tokenizer> tokenizer);
    ~Server();  ///< stop()
    Server(const Server&) = delete;
    Server& operator=(const Server&) = delete;

    /// Binds, listens and starts the I/O thread. Throws tagflow::Error naming host:port on failure.
    void start();
    /// Stops the I/O thread and closes every connection (pending generations are cancelled).
    void stop();
    int port() const { return port_; }
    const std::string& host() const { return cfg_.host; }
    ServerStats stats() const;

private:
    struct Impl;
    ServerConfig cfg_;
    int port_ = 0;
    std::unique_ptr<Impl> impl_;
};

/// A fresh bearer token: "tf-" + 64 hex digits from getrandom() (256 bits).
std::string generate_token();
/// Writes `token` + "\n" to `path` with mode 0600 through safe_file's write_file_replace (a random
/// temporary renamed into place: a symbolic link there is replaced, never written through).
/// Throws tagflow::Error naming the path.
void write_token_file(const std::string& path, const std::string& token);
/// Compares in time independent of where the strings differ (length is not secret).
bool constant_time_equal(std::string_view a, std::string_view b);
/// "HOST:PORT", "[v6]:PORT" or ":PORT"/"PORT" (host 127.0.0.1) -> host, port. Throws ConfigError.
std::pair<std::string, int> parse_host_port(const std::string& s);

}  // namespace tagflow::gateway
