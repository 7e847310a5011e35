// SPDX-License-Identifier: Apache-2.0
// tokenizer_bench: encode throughput of tagflow's HfTokenizer (mpi_app/text) on one thread, in MB
// of UTF-8 per second. tokenizer_bench.sh runs it beside Hugging Face `tokenizers`
// (tokenizer_bench.js, RAYON_NUM_THREADS=1) on the same chunks and prints the ratio.
//   tokenizer_bench --tokenizer PATH --chunks FILE [--repeat N]
//   tokenizer_bench --tokenizer PATH --word C --bytes N      (worst case: one N-byte run of C)
// FILE: JSON Lines, one string (a chunk of the corpus) per line. One untimed pass warms the word
// cache (as the reference's own pass does), then N timed passes. Prints one line:
//   tagflow <MB> <seconds> <MB/s> <ids per pass>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "text/hf_tokenizer.hpp"

int main(int argc, char** argv) {
    std::string tok_path, chunks_path, word;
    long long word_bytes = 0;
    int repeat = 3;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!std::strcmp(argv[i], "--tokenizer")) tok_path = argv[i + 1];
        else if (!std::strcmp(argv[i], "--chunks")) chunks_path = argv[i + 1];
        else if (!std::strcmp(argv[i], "--repeat")) repeat = std::atoi(argv[i + 1]);
        else if (!std::strcmp(argv[i], "--word")) word = argv[i + 1];
        else if (!std::strcmp(argv[i], "--bytes")) word_bytes = std::atoll(argv[i + 1]);
    }
    if (!tok_path.empty() && word.size() == 1 && word_bytes > 0) {
        try {
            const auto tok = tagflow::text::HfTokenizer::load(tok_path);
            const std::string s(static_cast<std::size_t>(word_bytes), word[0]);
            const auto t0 = std::chrono::steady_clock::now();
            const std::size_t ids = tok.encode(s).size();
            const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            std::printf("tagflow-word %.3f %.4f %.2f %zu\n", static_cast<double>(word_bytes) / 1e6, sec,
                        static_cast<double>(word_bytes) / 1e6 / sec, ids);
            return 0;
        } catch (const std::exception& e) {
            std::fprintf(stderr, "tokenizer_bench: %s\n", e.what());
            return 1;
        }
    }
    if (tok_path.empty() || chunks_path.empty() || repeat < 1) {
        std::fprintf(stderr, "usage: tokenizer_bench --tokenizer PATH --chunks FILE [--repeat N]\n");
        return 2;
    }
    try {
        const auto tok = tagflow::text::HfTokenizer::load(tok_path);
        std::vector<std::string> chunks;
        std::ifstream f(chunks_path);
        std::string line;
        std::size_t bytes = 0;
        while (std::getline(f, line)) {
            chunks.push_back(nlohmann::json::parse(line).get<std::string>());
            bytes += chunks.back().size();
        }
        std::size_t ids = 0;
        for (const auto& c : chunks) ids += tok.encode(c).size();  // warm-up (word cache)
        const auto t0 = std::chrono::steady_clock::now();
        std::size_t check = 0;
        for (int r = 0; r < repeat; ++r)
            for (const auto& c : chunks) check += tok.encode(c).size();
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / repeat;
        if (check != ids * static_cast<std::size_t>(repeat)) {
            std::fprintf(stderr, "tokenizer_bench: passes disagree (%zu vs %zu ids)\n", check,
                         ids * static_cast<std::size_t>(repeat));
            return 1;
        }
        std::printf("tagflow %.3f %.4f %.2f %zu\n", static_cast<double>(bytes) / 1e6, s,
                    static_cast<double>(bytes) / 1e6 / s, ids);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "tokenizer_bench: %s\n", e.what());
        return 1;
    }
    return 0;
}
