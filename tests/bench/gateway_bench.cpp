// SPDX-License-Identifier: Apache-2.0
// gateway_bench: what the HTTP gateway adds on top of calling a Backend directly. For 1, 8 and
// 64 concurrent clients (--clients), each sending its share of --requests one after another,
// measures requests/s and the median latency (a) calling Backend::submit directly and waiting
// on the sink (the baseline, same run) and (b) through the gateway: POST /v1/completions with
// keep-alive over loopback TCP, JSON in and out. Two backends: `engine` (a real rollout::InferenceEngine
// on a small random model, greedy) and `instant` (answers max_tokens fixed tokens at once from
// its own thread, so the columns show the gateway's own cost). #wrong counts HTTP answers that
// are not 200 or whose token ids differ from the direct call's for the same prompt and seed.
// Timings are printed, never asserted. Single process, no MPI.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <future>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gateway/engine_backend.hpp"
#include "gateway/server.hpp"
#include "model/llama.hpp"

using namespace tagflow;
using namespace tagflow::gateway;
using Clock = std::chrono::steady_clock;

namespace {

/// Answers every request with max_tokens copies of token 'a' from one worker thread.
class InstantBackend final : public Backend {
public:
    InstantBackend() : thread_([this] { run(); }) {}
    ~InstantBackend() override {
        {
            std::lock_guard<std::mutex> lk(mu_);
            stop_ = true;
        }
        cv_.notify_all();
        thread_.join();
    }
    BackendInfo info() const override {
        BackendInfo b;
        b.models.push_back(ModelInfo{"tagflow-bench", 4096, 272, 0, "tagflow"});
        return b;
    }
    void submit(CompletionRequest req, TokenSinkPtr sink) override {
        {
            std::lock_guard<std::mutex> lk(mu_);
            q_.emplace_back(std::move(req), std::move(sink));
        }
        cv_.notify_one();
    }
    RewardStatus report_reward(const RewardReport&) override { return RewardStatus::kAccepted; }

private:
    void run() {
        for (;;) {
            std::unique_lock<std::mutex> lk(mu_);
            cv_.wait(lk, [&] { return stop_ || !q_.empty(); });
            if (stop_) return;
            auto [req, sink] = std::move(q_.front());
            q_.pop_front();
            lk.unlock();
            sink->tokens(
                std::vector<GeneratedToken>(static_cast<std::size_t>(req.max_tokens), GeneratedToken{'a', -0.5f, 0}));
            sink->finish(Finish{"length", "", 0});
        }
    }
    std::mutex mu_;
    std::condition_variable cv_;
    std::deque<std::pair<CompletionRequest, TokenSinkPtr>> q_;
    bool stop_ = false;
    std::thread thread_;
};

struct WaitSink final : TokenSink {
    std::promise<std::vector<int32_t>> done;
    std::vector<int32_t> ids;
    void tokens(const std::vector<GeneratedToken>& t) override {
        for (const auto& g : t) ids.push_back(g.id);
    }
    void finish(const Finish&) override { done.set_value(ids); }
};

std::vector<int32_t> prompt_for(int i) {
    std::vector<int32_t> p;
    for (int t = 0; t < 8; ++t) p.push_back((7 * i + 13 * t + 3) % 250);
    return p;
}

/// A blocking keep-alive HTTP/1.1 client for one connection.
class Client {
public:
    explicit Client(int port) {
        fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_port = htons(static_cast<uint16_t>(port));
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) throw std::runtime_error("connect failed");
        const int one = 1;
        ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
    ~Client() { ::close(fd_); }
    /// Returns (status, body).
    std::pair<int, std::string> post(const std::string& path, const std::string& token, const std::string& body) {
        std::string req = "POST " + path + " HTTP/1.1\r\nHost: bench\r\nAuthorization: Bearer " + token +
                          "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
                          "\r\n\r\n" + body;
        for (std::size_t off = 0; off < req.size();) {
            const ssize_t n = ::send(fd_, req.data() + off, req.size() - off, MSG_NOSIGNAL);
            if (n <= 0) throw std::runtime_error("send failed");
            off += static_cast<std::size_t>(n);
        }
        std::size_t hdr_end;
        while ((hdr_end = buf_.find("\r\n\r\n")) == std::string::npos) fill();
        const std::string head = buf_.substr(0, hdr_end);
        const int status = std::atoi(head.c_str() + 9);
        std::size_t len = 0;
        const std::size_t cl = head.find("Content-Length: ");
        if (cl != std::string::npos) len = std::stoul(head.substr(cl + 16));
        while (buf_.size() < hdr_end + 4 + len) fill();
        std::string out = buf_.substr(hdr_end + 4, len);
        buf_.erase(0, hdr_end + 4 + len);
        return {status, out};
    }

private:
    void fill() {
        char b[65536];
        const ssize_t n = ::recv(fd_, b, sizeof b, 0);
        if (n <= 0) throw std::runtime_error("connection closed");
        buf_.append(b, static_cast<std::size_t>(n));
    }
    int fd_ = -1;
    std::string buf_;
};

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0 : v[v.size() / 2];
}

struct Row {
    double rps = 0, p50_ms = 0;
};

Row direct(Backend& b, const std::string& model, int clients, int requests, int max_tokens,
           std::vector<std::vector<int32_t>>* answers) {
    std::vector<double> lat(static_cast<std::size_t>(requests));
    const auto t0 = Clock::now();
    std::vector<std::thread> th;
    for (int c = 0; c < clients; ++c)
        th.emplace_back([&, c] {
            for (int i = c; i < requests; i += clients) {
                CompletionRequest r;
                r.request_id = static_cast<uint64_t>(i) + 1;
                r.completion_id = "bench-" + std::to_string(i);
                r.session = r.completion_id;
                r.model = model;
                r.prompt_ids = prompt_for(i);
                r.max_tokens = max_tokens;
                r.temperature = 0;
                r.stop_ids = {257};
                r.seed = static_cast<uint64_t>(i);
                auto sink = std::make_shared<WaitSink>();
                auto fut = sink->done.get_future();
                const auto s = Clock::now();
                b.submit(std::move(r), sink);
                (*answers)[static_cast<std::size_t>(i)] = fut.get();
                lat[static_cast<std::size_t>(i)] = std::chrono::duration<double, std::milli>(Clock::now() - s).count();
            }
        });
    for (auto& t : th) t.join();
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    return {requests / secs, median(lat)};
}

Row http(int port, const std::string& token, const std::string& model, int clients, int requests, int max_tokens,
         const std::vector<std::vector<int32_t>>& want, int* wrong) {
    std::vector<double> lat(static_cast<std::size_t>(requests));
    std::mutex mu;
    const auto t0 = Clock::now();
    std::vector<std::thread> th;
    for (int c = 0; c < clients; ++c)
        th.emplace_back([&, c] {
            Client cl(port);
            for (int i = c; i < requests; i += clients) {
                nlohmann::json body = {{"model", model},
                                       {"prompt", prompt_for(i)},
                                       {"max_tokens", max_tokens},
                                       {"temperature", 0},
                                       {"seed", i}};
                const auto s = Clock::now();
                auto [status, resp] = cl.post("/v1/completions", token, body.dump());
                lat[static_cast<std::size_t>(i)] = std::chrono::duration<double, std::milli>(Clock::now() - s).count();
                bool ok = status == 200;
                if (ok) {
                    const auto j = nlohmann::json::parse(resp, nullptr, false);
                    ok = !j.is_discarded() && j.contains("tagflow") &&
                         j["tagflow"]["token_ids"].get<std::vector<int32_t>>() == want[static_cast<std::size_t>(i)];
                }
                if (!ok) {
                    std::lock_guard<std::mutex> lk(mu);
                    ++*wrong;
                }
            }
        });
    for (auto& t : th) t.join();
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    return {requests / secs, median(lat)};
}

}  // namespace

int main(int argc, char** argv) {
    int requests = 256, max_tokens = 16;
    std::vector<int> clients = {1, 8, 64};
    std::vector<std::string> backends = {"instant", "engine"};
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string a = argv[i], v = argv[i + 1];
        if (a == "--requests") requests = std::stoi(v);
        else if (a == "--max-tokens") max_tokens = std::stoi(v);
        else if (a == "--clients" || a == "--backends") {
            std::stringstream ss(v);
            std::string x;
            if (a == "--clients") clients.clear();
            else backends.clear();
            while (std::getline(ss, x, ','))
                if (a == "--clients") clients.push_back(std::stoi(x));
                else backends.push_back(x);
        } else {
            std::fprintf(stderr,
                         "gateway_bench: unknown option %s\nusage: gateway_bench [--requests N] "
                         "[--clients 1,8,64] [--max-tokens N] [--backends instant,engine]\n",
                         a.c_str());
            return 2;
        }
    }
    at::set_num_threads(1);
    int total_wrong = 0;
    std::printf("# gateway_bench: %d requests per row, %d max tokens, greedy, 8-token prompts\n", requests, max_tokens);
    std::printf("# %-8s %7s %12s %12s %8s %12s %12s %10s %7s\n", "backend", "clients", "direct_rps", "http_rps",
                "ratio", "direct_p50ms", "http_p50ms", "added_ms", "#wrong");
    for (const std::string& kind : backends) {
        std::shared_ptr<Backend> backend;
        if (kind == "instant") {
            backend = std::make_shared<InstantBackend>();
        } else {
            model::HfConfig c;
            c.hidden_size = 64;
            c.intermediate_size = 128;
            c.num_hidden_layers = 2;
            c.num_attention_heads = 4;
            c.num_key_value_heads = 2;
            c.head_dim = 8;
            c.vocab_size = 272;
            c.max_position_embeddings = 256;
            model::LlamaModel m(c, 0);
            m->reset_parameters(3, 0.5);
            EngineBackendOptions o;
            o.model_id = "tagflow-bench";
            o.engine.max_batch = 64;
            backend = std::make_shared<EngineBackend>(m, o);
        }
        ServerConfig sc;
        sc.token = generate_token();
        Server server(sc, backend, nullptr);
        server.start();
        for (int nc : clients) {
            std::vector<std::vector<int32_t>> answers(static_cast<std::size_t>(requests));
            const Row d = direct(*backend, "tagflow-bench", nc, requests, max_tokens, &answers);
            int wrong = 0;
            const Row h = http(server.port(), sc.token, "tagflow-bench", nc, requests, max_tokens, answers, &wrong);
            total_wrong += wrong;
            std::printf("  %-8s %7d %12.1f %12.1f %8.3f %12.3f %12.3f %10.3f %7d\n", kind.c_str(), nc, d.rps, h.rps,
                        h.rps / d.rps, d.p50_ms, h.p50_ms, h.p50_ms - d.p50_ms, wrong);
            std::fflush(stdout);
        }
        server.stop();
    }
    std::printf("# Out of bounds values : %d %s\n", total_wrong, total_wrong ? "FAILED" : "OK");
    return total_wrong ? 1 : 0;
}
