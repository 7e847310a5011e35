// SPDX-License-Identifier: Apache-2.0
// server: the poll() loop, connection state, authentication, routing of the endpoints and the
// hand-off to the Backend (see server.hpp). Backend results come back through a mutex-guarded
// queue plus a wake-up pipe; only the I/O thread touches sockets and connection state.
#include "gateway/server.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <deque>
#include <limits>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>

#include "common/error.hpp"
#include "common/safe_file.hpp"
#include "gateway/openai.hpp"

namespace tagflow::gateway {

using Clock = std::chrono::steady_clock;

// ---- helpers ----------------------------------------------------------------------------------

bool constant_time_equal(std::string_view a, std::string_view b) {
    unsigned char diff = a.size() == b.size() ? 0 : 1;
    const std::size_t n = a.size();
    for (std::size_t i = 0; i < n; ++i) diff |= static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
    return diff == 0;
}

namespace {
std::string random_hex(std::size_t bytes) {
    std::string raw(bytes, '\0');
    std::size_t got = 0;
    while (got < bytes) {
        const ssize_t n = getrandom(raw.data() + got, bytes - got, 0);
        if (n < 0) {
            if (errno == EINTR) continue;
            throw Error(std::string("gateway: getrandom failed: ") + std::strerror(errno));
        }
        got += static_cast<std::size_t>(n);
    }
    static const char* kHex = "0123456789abcdef";
    std::string out;
    for (unsigned char c : raw) {
        out += kHex[c >> 4];
        out += kHex[c & 15];
    }
    return out;
}
}  // namespace

std::string generate_token() { return "tf-" + random_hex(32); }

void write_token_file(const std::string& path, const std::string& token) {
    // A random temporary (mode 0600 from its creation) renamed into place: a link planted at
    // `path` is replaced, its target never opened; a full disk is one line naming the path.
    try {
        write_file_replace(path, token + "\n", 0600);
    } catch (const Error& e) {
        throw Error(std::string("gateway: cannot write token file ") + e.what());
    }
}

std::pair<std::string, int> parse_host_port(const std::string& s) {
    std::string host = "127.0.0.1", port;
    if (!s.empty() && s.front() == '[') {
        const std::size_t rb = s.find(']');
        if (rb == std::string::npos || rb + 1 >= s.size() || s[rb + 1] != ':')
            throw ConfigError("gateway address '" + s + "': expected [IPv6]:PORT");
        host = s.substr(1, rb - 1);
        port = s.substr(rb + 2);
    } else if (const std::size_t c = s.rfind(':'); c != std::string::npos) {
        if (s.find(':') != c) throw ConfigError("gateway address '" + s + "': write IPv6 addresses as [ADDR]:PORT");
        if (c > 0) host = s.substr(0, c);
        port = s.substr(c + 1);
    } else {
        port = s;
    }
    char* end = nullptr;
    const long p = std::strtol(port.c_str(), &end, 10);
    if (port.empty() || *end != '\0' || p < 0 || p > 65535)
        throw ConfigError("gateway address '" + s + "': port must be a number in [0, 65535]");
    return {host, static_cast<int>(p)};
}

// ---- the event queue the backend's sinks write into --------------------------------------------

namespace {

struct Event {
    uint64_t conn = 0, serial = 0;
    std::vector<GeneratedToken> tokens;
    bool finished = false;
    Finish finish;
};

struct Shared {
    std::mutex mu;
    std::deque<Event> q;
    int wake_w = -1;
    bool closed = false;
    void push(Event e) {
        std::lock_guard<std::mutex> lk(mu);
        if (closed) return;
        const bool was_empty = q.empty();
        q.push_back(std::move(e));
        if (was_empty) {
            const char x = 1;
            [[maybe_unused]] ssize_t n = ::write(wake_w, &x, 1);  // EAGAIN: a wake-up is already pending
        }
    }
};

class ConnSink final : public TokenSink {
public:
    ConnSink(std::shared_ptr<Shared> s, uint64_t conn, uint64_t serial)
        : s_(std::move(s)), conn_(conn), serial_(serial) {}
    void tokens(const std::vector<GeneratedToken>& t) override {
        if (t.empty()) return;
        Event e;
        e.conn = conn_;
        e.serial = serial_;
        e.tokens = t;
        s_->push(std::move(e));
    }
    void finish(const Finish& f) override {
        Event e;
        e.conn = conn_;
        e.serial = serial_;
        e.finished = true;
        e.finish = f;
        s_->push(std::move(e));
    }

private:
    std::shared_ptr<Shared> s_;
    uint64_t conn_, serial_;
};

struct Conn {
    int fd = -1;
    uint64_t id = 0;
    std::string in, out;
    std::size_t in_off = 0;       // bytes of `in` already parsed (erased in bulk, so parsing stays linear)
    bool more = false;            // complete requests may wait in `in` (the per-round cap or backpressure)
    bool headers_done = false;    // the current partial request has all its headers
    Clock::time_point req_start;  // first byte of the current partial request
    bool busy = false;            // a generation is in flight
    bool close_after = false;     // close once `out` is written
    bool draining = false;        // write side shut down; discarding input until EOF or deadline
    bool dead = false;
    bool keep_alive = true;
    bool sent_continue = false;
    bool stream = false, chunked = false;
    uint64_t serial = 0, request_id = 0;
    std::unique_ptr<ResponseBuilder> rb;
    Clock::time_point last = Clock::now();
};

}  // namespace

struct Server::Impl {
    ServerConfig cfg;
    std::shared_ptr<Backend> backend;
    std::shared_ptr<const text::Tokenizer> tok;
    std::shared_ptr<Shared> shared = std::make_shared<Shared>();
    int listen_fd = -1, wake_r = -1;
    std::atomic<bool> running{false};
    std::thread thread;
    std::map<uint64_t, Conn> conns;
    uint64_t next_conn = 1, next_serial = 1;
    int conn_limit = 0;                 // min(max_connections, RLIMIT_NOFILE - fd_reserve), set by start()
    Clock::time_point accept_paused{};  // EMFILE/ENFILE: do not accept before this
    std::string id_base = random_hex(6);
    uint64_t seed_base = 0;
    mutable std::mutex stats_mu;
    ServerStats st;

    void loop();
    void accept_all();
    void read_conn(Conn& c);
    void flush(Conn& c);
    void process_input(Conn& c);
    void handle(Conn& c, const HttpRequest& r);
    void handle_completion(Conn& c, const HttpRequest& r, Endpoint ep);
    void handle_reward(Conn& c, const HttpRequest& r);
    void on_event(Event& e);
    void respond(Conn& c, int status, const std::string& body, const std::string& extra_headers = "");
    void respond_error(Conn& c, const ApiError& e, const std::string& extra_headers = "");
    void close_conn(Conn& c);
    std::size_t pending(const Conn& c) const { return c.in.size() - c.in_off; }
    bool can_serve(const Conn& c) const { return c.out.size() < cfg.max_unread_bytes; }
    bool evict_one();
    void count(uint64_t ServerStats::*field) {
        std::lock_guard<std::mutex> lk(stats_mu);
        ++(st.*field);
    }
};

// ---- Server ------------------------------------------------------------------------------------

Server::Server(ServerConfig cfg, std::shared_ptr<Backend> backend, std::shared_ptr<const text::Tokenizer> tokenizer)
    : cfg_(std::move(cfg)), impl_(std::make_unique<Impl>()) {
    if (cfg_.token.empty()) throw ConfigError("gateway: an empty bearer token is not allowed");
    if (!backend) throw ConfigError("gateway: no backend");
    impl_->cfg = cfg_;
    impl_->backend = std::move(backend);
    impl_->tok = tokenizer ? std::move(tokenizer) : text::byte_level_tokenizer();
    const std::string h = random_hex(8);
    impl_->seed_base = std::stoull(h, nullptr, 16);
}

Server::~Server() { stop(); }

void Server::start() {
    Impl& m = *impl_;
    if (m.running) return;
    const std::string where = cfg_.host + ":" + std::to_string(cfg_.port);
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    addrinfo* res = nullptr;
    const std::string port = std::to_string(cfg_.port);
    if (int rc = ::getaddrinfo(cfg_.host.c_str(), port.c_str(), &hints, &res); rc != 0)
        throw Error("gateway: cannot resolve " + where + ": " + gai_strerror(rc));
    int fd = -1, err = 0;
    for (addrinfo* a = res; a && fd < 0; a = a->ai_next) {
        fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
        if (fd < 0) {
            err = errno;
            continue;
        }
        const int one = 1;
        ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, SOMAXCONN) != 0) {
            err = errno;
            ::close(fd);
            fd = -1;
        }
    }
    ::freeaddrinfo(res);
    if (fd < 0) throw Error("gateway: cannot listen on " + where + ": " + std::strerror(err));
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
    port_ = ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                           : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
    int p[2];
    if (::pipe2(p, O_NONBLOCK | O_CLOEXEC) != 0) {
        ::close(fd);
        throw Error(std::string("gateway: pipe2 failed: ") + std::strerror(errno));
    }
    rlimit rl{};
    const long nofile = ::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY
                            ? static_cast<long>(rl.rlim_cur)
                            : 1L << 20;
    m.conn_limit = static_cast<int>(std::max(8L, std::min<long>(cfg_.max_connections, nofile - cfg_.fd_reserve)));
    m.listen_fd = fd;
    m.wake_r = p[0];
    m.shared->wake_w = p[1];
    m.running = true;
    m.thread = std::thread([&m] { m.loop(); });
}

void Server::stop() {
    Impl& m = *impl_;
    if (!m.running) return;
    m.running = false;
    {
        std::lock_guard<std::mutex> lk(m.shared->mu);
        const char x = 0;
        [[maybe_unused]] ssize_t n = ::write(m.shared->wake_w, &x, 1);
    }
    m.thread.join();
    for (auto& [id, c] : m.conns) {
        if (c.busy) m.backend->cancel(c.request_id);
        ::close(c.fd);
    }
    m.conns.clear();
    {
        std::lock_guard<std::mutex> lk(m.shared->mu);
        m.shared->closed = true;
        ::close(m.shared->wake_w);
        m.shared->wake_w = -1;
        m.shared->q.clear();
    }
    ::close(m.wake_r);
    ::close(m.listen_fd);
}

ServerStats Server::stats() const {
    std::lock_guard<std::mutex> lk(impl_->stats_mu);
    return impl_->st;
}

// ---- the I/O loop ------------------------------------------------------------------------------

void Server::Impl::loop() {
    std::vector<pollfd> fds;
    std::vector<uint64_t> ids;
    const std::size_t read_cap = cfg.limits.max_header_bytes + cfg.limits.max_body_bytes + 4096;
    while (running) {
        fds.clear();
        ids.clear();
        const auto round = Clock::now();
        fds.push_back({wake_r, POLLIN, 0});
        fds.push_back({listen_fd, static_cast<short>(round >= accept_paused ? POLLIN : 0), 0});
        bool ready = false;  // a connection has requests waiting that it may now be served
        for (auto& [id, c] : conns) {
            short ev = 0;
            // Backpressure: a connection whose answers are not read, or whose parsed-but-unserved
            // requests wait, is not read either.
            if (c.draining || (pending(c) < read_cap && can_serve(c) && !c.more)) ev |= POLLIN;
            if (!c.out.empty() && !c.draining) ev |= POLLOUT;
            if (c.more && !c.busy && can_serve(c)) ready = true;
            fds.push_back({c.fd, ev, 0});
            ids.push_back(id);
        }
        const int n = ::poll(fds.data(), fds.size(), ready ? 0 : round < accept_paused ? 100 : 500);
        if (n < 0 && errno != EINTR) break;
        if (fds[0].revents & POLLIN) {
            char buf[256];
            while (::read(wake_r, buf, sizeof buf) > 0) {}
            std::deque<Event> evs;
            {
                std::lock_guard<std::mutex> lk(shared->mu);
                evs.swap(shared->q);
            }
            for (Event& e : evs) on_event(e);
        }
        if (fds[1].revents & POLLIN) accept_all();
        for (std::size_t i = 0; i < ids.size(); ++i) {
            auto it = conns.find(ids[i]);
            if (it == conns.end()) continue;
            Conn& c = it->second;
            const short re = fds[i + 2].revents;
            if (c.dead) continue;
            if (re & (POLLIN | POLLHUP | POLLERR)) read_conn(c);
            if (!c.dead && (re & POLLOUT)) flush(c);
            if (!c.dead && c.more && !c.busy && !c.draining && can_serve(c)) process_input(c);  // fair share
        }
        // Timeouts, closes.
        const auto now = Clock::now();
        for (auto it = conns.begin(); it != conns.end();) {
            Conn& c = it->second;
            const double idle = std::chrono::duration<double>(now - c.last).count();
            const double age = std::chrono::duration<double>(now - c.req_start).count();
            const bool partial = !c.draining && !c.busy && !c.more && pending(c) > 0;
            const double deadline = c.headers_done ? cfg.request_timeout_s : cfg.header_timeout_s;
            if (!c.dead && partial && age > deadline) {
                // Deadlines count from the request's first byte: trickling bytes do not extend them.
                ApiError e;
                e.status = 408;
                e.message = std::string(c.headers_done ? "request body" : "request headers") +
                            " not completed within " + std::to_string(static_cast<int>(deadline)) + " s";
                respond_error(c, e);
                flush(c);
                c.dead = true;
            } else if (!c.dead && !c.busy && idle > (c.draining ? 2.0 : cfg.idle_timeout_s)) {
                c.dead = true;
            }
            if (c.dead) {
                if (c.busy) backend->cancel(c.request_id);
                ::close(c.fd);
                it = conns.erase(it);
            } else {
                ++it;
            }
        }
    }
}

void Server::Impl::accept_all() {
    for (int k = 0; k < 64; ++k) {  // a bounded batch per round: the connections get their turn too
        const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
                accept_paused = Clock::now() + std::chrono::milliseconds(100);  // back off, do not spin
            return;  // EAGAIN, or a transient error: try again next round
        }
        count(&ServerStats::connections);
        if (static_cast<int>(conns.size()) >= conn_limit && !evict_one()) {
            // Every slot holds a client that is being served: answer 503 with one non-blocking
            // write and close now, so the descriptor is not held.
            ApiError e;
            e.status = 503;
            e.type = "server_error";
            e.message = "too many connections (limit " + std::to_string(conn_limit) + ")";
            Conn refused;  // never enters `conns`: the answer is built like every other one
            refused.fd = fd;
            respond_error(refused, e);  // counts the error; a 503 closes the connection
            [[maybe_unused]] ssize_t w =
                ::send(fd, refused.out.data(), refused.out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
            ::close(fd);
            continue;
        }
        const int one = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        Conn& c = conns[next_conn];
        c.fd = fd;
        c.id = next_conn++;
    }
}

bool Server::Impl::evict_one() {
    // First choice: the connection that has spent longest on an unfinished request's headers
    // (a slow or stalled client); then the longest-idle keep-alive connection. Never one whose
    // generation is in flight or whose answer is being written.
    Conn* victim = nullptr;
    bool victim_headers = false;
    for (auto& [id, c] : conns) {
        if (c.dead || c.busy || !c.out.empty() || c.more) continue;
        const bool in_headers = pending(c) > 0 && !c.headers_done && !c.draining;
        const bool idle = pending(c) == 0 || c.draining;
        if (!in_headers && !idle) continue;
        const auto t = in_headers ? c.req_start : c.last;
        if (!victim || (in_headers && !victim_headers) ||
            (in_headers == victim_headers && t < (victim_headers ? victim->req_start : victim->last))) {
            victim = &c;
            victim_headers = in_headers;
        }
    }
    if (!victim) return false;
    ::close(victim->fd);
    conns.erase(victim->id);
    return true;
}

void Server::Impl::read_conn(Conn& c) {
    char buf[65536];
    const std::size_t read_cap = cfg.limits.max_header_bytes + cfg.limits.max_body_bytes + 4096;
    for (;;) {
        if (!c.draining && pending(c) >= read_cap) break;  // bounded input; the rest waits in the kernel
        const ssize_t n = ::recv(c.fd, buf, sizeof buf, 0);
        if (n > 0) {
            if (c.draining) continue;  // discarded; does not extend the drain deadline
            c.last = Clock::now();
            if (pending(c) == 0) {
                c.req_start = c.last;
                c.headers_done = false;
            }
            c.in.append(buf, static_cast<std::size_t>(n));
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        if (n < 0 && errno == EINTR) continue;
        c.dead = true;  // EOF or error: the peer is gone (a pending generation is cancelled)
        return;
    }
    if (!c.draining) process_input(c);
}

void Server::Impl::flush(Conn& c) {
    while (!c.out.empty()) {
        const ssize_t n = ::send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL);
        if (n > 0) {
            c.out.erase(0, static_cast<std::size_t>(n));
            c.last = Clock::now();
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        if (n < 0 && errno == EINTR) continue;
        c.dead = true;
        return;
    }
    if (c.close_after && !c.busy && !c.draining) {
        // Half-close and discard what the client still sends, so the response is not lost to a
        // reset caused by unread input.
        ::shutdown(c.fd, SHUT_WR);
        c.draining = true;
        c.in.clear();
        c.in_off = 0;
        c.more = false;
        c.last = Clock::now();
    }
    // Requests that waited for their answers to be read (c.more) are served by the loop's next
    // round, not from here: process_input() calls flush(), and the recursion would be unbounded.
}

void Server::Impl::respond(Conn& c, int status, const std::string& body, const std::string& extra_headers) {
    if (status >= 400) count(&ServerStats::errors);
    if (!c.keep_alive || status >= 500 || status == 413 || status == 431 || status == 408 || status == 401)
        c.close_after = true;  // 401: a client without the token gets one answer per connection
    c.out += "HTTP/1.1 " + std::to_string(status) + " " + http_reason(status) +
             "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
             "\r\nConnection: " + (c.close_after ? "close" : "keep-alive") + "\r\n" + extra_headers + "\r\n" + body;
}

void Server::Impl::respond_error(Conn& c, const ApiError& e, const std::string& extra_headers) {
    respond(c, e.status, error_body(e), extra_headers);
}

void Server::Impl::process_input(Conn& c) {
    constexpr int kPerRound = 16;  // requests served per connection per round: fair to the others
    c.more = false;
    for (int served = 0; !c.busy && !c.close_after && !c.dead;) {
        if (pending(c) == 0) break;
        if (served == kPerRound || !can_serve(c)) {
            c.more = true;  // resumed next round, or when the client has read its answers
            break;
        }
        ParseResult r = parse_http_request(std::string_view(c.in).substr(c.in_off), cfg.limits);
        if (r.status == ParseStatus::kIncomplete) {
            c.headers_done = r.headers_complete;
            if (r.headers_complete && r.request.expect_continue && !c.sent_continue) {
                c.out += "HTTP/1.1 100 Continue\r\n\r\n";
                c.sent_continue = true;
            }
            break;
        }
        if (r.status == ParseStatus::kError) {
            c.keep_alive = false;
            ApiError e;
            e.status = r.error_status;
            e.message = r.error;
            e.type = r.error_status >= 500 ? "server_error" : "invalid_request_error";
            respond_error(c, e);
            break;
        }
        c.in_off += r.consumed;
        ++served;
        if (c.in_off == c.in.size()) {
            c.in.clear();
            c.in_off = 0;
        } else if (c.in_off > (64u << 10) && c.in_off * 2 > c.in.size()) {
            c.in.erase(0, c.in_off);  // amortised: each byte is moved O(1) times
            c.in_off = 0;
        }
        c.req_start = Clock::now();  // the next pipelined request's clock starts now
        c.headers_done = false;
        c.sent_continue = false;
        c.keep_alive = r.request.keep_alive;
        count(&ServerStats::requests);
        try {
            handle(c, r.request);
        } catch (const std::exception& ex) {  // handlers never throw by design; belt and braces
            ApiError e;
            e.status = 500;
            e.type = "server_error";
            e.message = std::string("internal error: ") + ex.what();
            c.busy = false;
            respond_error(c, e);
        }
    }
    flush(c);
}

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
        struct stat st {};
        if (fd >= 0 && ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0 && st.st_size <= (1 << 22)) {
            body.resize(static_cast<size_t>(st.st_size));
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

void Server::Impl::on_event(Event& e) {
    auto it = conns.find(e.conn);
    if (it == conns.end()) return;  // the client went away
    Conn& c = it->second;
    if (!c.busy || c.serial != e.serial || c.dead) return;
    auto frame = [&](const std::string& data) {
        if (data.empty()) return;
        if (!c.chunked) {
            c.out += data;
            return;
        }
        char hex[32];
        std::snprintf(hex, sizeof hex, "%zx\r\n", data.size());
        c.out += hex + data + "\r\n";
    };
    if (!e.tokens.empty()) frame(c.rb->add_tokens(e.tokens));
    if (e.finished) {
        c.busy = false;
        if (c.stream) {
            frame(c.rb->stream_finish(e.finish));
            if (c.chunked) c.out += "0\r\n\r\n";
            if (!c.keep_alive) c.close_after = true;
        } else if (e.finish.reason == "error") {
            ApiError err;
            err.status = e.finish.http_status;
            err.type = err.status < 500 ? "invalid_request_error" : "server_error";
            err.message = e.finish.error;
            respond_error(c, err);
        } else {
            respond(c, 200, c.rb->body(e.finish));
        }
        c.rb.reset();
        if (pending(c) > 0) c.req_start = Clock::now();  // a pipelined request's deadline starts now
        process_input(c);                                // a pipelined request may be waiting; also flushes
        return;
    }
    flush(c);
}

}  // namespace tagflow::gateway
