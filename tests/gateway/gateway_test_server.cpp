// SPDX-License-Identifier: Apache-2.0
// gateway_test_server: the gateway in front of a real rollout engine on a small random Llama
// model, for the Python tests and the benchmark. Writes <out>/model (the checkpoint, so a test
// can recompute the logits independently), <out>/gateway.token (mode 0600) and
// <out>/records.jsonl (completions and rewards), prints one line
//   "gateway listening on http://HOST:PORT/v1"
// and serves until SIGINT/SIGTERM. With --tokenizer PATH the gateway speaks that tokenizer.json and
// its chat template (text::load_tokenizer) and the model's vocabulary covers it; else the byte-level
// tokenizer. Not a product: `tagflow train --gateway` is the lead's.
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include <ATen/Parallel.h>

#include "common/error.hpp"
#include "gateway/engine_backend.hpp"
#include "gateway/server.hpp"
#include "model/llama.hpp"
#include "text/tokenizer.hpp"

using namespace tagflow;

namespace {
[[noreturn]] void usage(const char* msg) {
    std::fprintf(stderr,
                 "gateway_test_server: %s\nusage: gateway_test_server --out DIR [--listen HOST:PORT] "
                 "[--seed S] [--context N] [--max-batch N] [--max-body BYTES] [--model-id ID] [--tokenizer PATH]\n",
                 msg);
    std::exit(2);
}
}  // namespace

int main(int argc, char** argv) {
    std::string out, listen = "127.0.0.1:0", model_id = "tagflow-test", tokenizer;
    uint64_t seed = 1;
    int64_t context = 128, max_batch = 16, max_body = 1 << 20;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto val = [&]() -> std::string {
            if (i + 1 >= argc) usage(("missing value for " + a).c_str());
            return argv[++i];
        };
        if (a == "--out") out = val();
        else if (a == "--listen") listen = val();
        else if (a == "--seed") seed = std::stoull(val());
        else if (a == "--context") context = std::stoll(val());
        else if (a == "--max-batch") max_batch = std::stoll(val());
        else if (a == "--max-body") max_body = std::stoll(val());
        else if (a == "--model-id") model_id = val();
        else if (a == "--tokenizer") tokenizer = val();
        else usage(("unknown option " + a).c_str());
    }
    if (out.empty()) usage("--out is required");
    try {
        // Block the stop signals in every thread; main waits for them with sigwait().
        sigset_t sigs;
        sigemptyset(&sigs);
        sigaddset(&sigs, SIGINT);
        sigaddset(&sigs, SIGTERM);
        pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
        at::set_num_threads(1);

        std::filesystem::create_directories(out);
        const auto [host, port] = gateway::parse_host_port(listen);
        const auto tok = tokenizer.empty() ? text::byte_level_tokenizer() : text::load_tokenizer(tokenizer);
        model::HfConfig c;
        c.hidden_size = 32;
        c.intermediate_size = 64;
        c.num_hidden_layers = 2;
        c.num_attention_heads = 4;
        c.num_key_value_heads = 2;
        c.head_dim = 8;
        c.vocab_size = (tok->vocab_size() + 15) / 16 * 16;  // the tokenizer's ids (byte-level: 261 -> 272)
        c.max_position_embeddings = context;
        c.validate("gateway_test_server");
        model::LlamaModel m(c, 0);
        m->reset_parameters(seed, 0.5);
        m->save_pretrained(out + "/model");

        gateway::EngineBackendOptions bo;
        bo.model_id = model_id;
        bo.engine.max_batch = max_batch;
        bo.record_path = out + "/records.jsonl";
        auto backend = std::make_shared<gateway::EngineBackend>(m, bo);

        gateway::ServerConfig sc;
        sc.host = host;
        sc.port = port;
        sc.token = gateway::generate_token();
        sc.limits.max_body_bytes = static_cast<std::size_t>(max_body);
        gateway::write_token_file(out + "/gateway.token", sc.token);
        gateway::Server server(sc, backend, tok);
        server.start();
        std::printf("gateway listening on http://%s:%d/v1\n",
                    host.find(':') != std::string::npos ? ("[" + host + "]").c_str() : host.c_str(), server.port());
        std::fflush(stdout);
        int sig = 0;
        sigwait(&sigs, &sig);
        server.stop();
        const auto st = server.stats();
        std::printf("stopped: %llu connections, %llu requests, %llu completions, %llu errors, %llu unauthorized\n",
                    static_cast<unsigned long long>(st.connections), static_cast<unsigned long long>(st.requests),
                    static_cast<unsigned long long>(st.completions), static_cast<unsigned long long>(st.errors),
                    static_cast<unsigned long long>(st.unauthorized));
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "gateway_test_server: %s\n", e.what());
        return 1;
    }
}
