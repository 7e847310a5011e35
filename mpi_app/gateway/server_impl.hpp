// SPDX-License-Identifier: Apache-2.0
// server_impl: the gateway server's private state, shared by server.cpp (the poll() loop,
// connections, reading, writing, backend events) and server_routes.cpp (authentication and the
// endpoints). Internal: included by those two files only.
// Does NOT: declare anything a user of the gateway needs (server.hpp does).
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include "gateway/http_parser.hpp"
#include "gateway/openai.hpp"
#include "gateway/server.hpp"

namespace tagflow::gateway {

using Clock = std::chrono::steady_clock;

/// `bytes` random bytes (getrandom) as lowercase hex.
std::string random_hex(std::size_t bytes);

// ---- the event queue the backend's sinks write into --------------------------------------------

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

}  // namespace tagflow::gateway
