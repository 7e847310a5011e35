// SPDX-License-Identifier: Apache-2.0
// server: the poll() loop, connection state, reading and writing, and the Backend's results (see
// server.hpp); authentication and the endpoints are server_routes.cpp's. Backend results come back
// through a mutex-guarded queue plus a wake-up pipe; only the I/O thread touches sockets and
// connection state.
#include "gateway/server.hpp"
#include "gateway/server_impl.hpp"

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

// ---- helpers ----------------------------------------------------------------------------------

bool constant_time_equal(std::string_view a, std::string_view b) {
    unsigned char diff = a.size() == b.size() ? 0 : 1;
    const std::size_t n = a.size();
    for (std::size_t i = 0; i < n; ++i) diff |= static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
    return diff == 0;
}

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
