// SPDX-License-Identifier: Apache-2.0
// url_scorer: the `--reward-url URL` scorer. Batches of requests are POSTed as JSON to an HTTP
// (or, with libcurl's TLS, HTTPS) endpoint; the protocol is in share/doc/rewards.md:
//   request  {"batch": [{"id", "data_source", "solution_str", "ground_truth", "extra_info"}, ...]}
//   response {"results": [R, ...]}, one R per request in the same order, each a number, or
//            {"score": X, ...other keys -> extras}, or {"error": "why"}; an "id" in R must match.
// `concurrency` sender threads each take up to `batch` queued requests and POST them with a
// per-request timeout (--reward-timeout). A refused connection, a timeout, HTTP 429 or 5xx is
// retried up to --reward-retries times with exponential backoff (0.25 s, 0.5 s, ... capped at
// 5 s); then, or on any other HTTP error or a malformed response, every request of the batch
// fails with one cause. A bearer token is read once from --reward-token-file (refused when
// others may read or write it) and never logged. Redirects are not followed.
//
// Does not: keep connections alive across threads (each thread keeps its own), or validate TLS
// any differently from libcurl's defaults.
#pragma once
#include <string>
#include <thread>
#include <vector>

#include "reward/scorer.hpp"

namespace tagflow::reward {

class UrlScorer final : public Scorer {
public:
    explicit UrlScorer(const Options& opt);
    ~UrlScorer() override;
    std::string describe() const override;

private:
    void wake() override {}
    void run();
    /// POSTs `body`; returns "" and the response body, or a one-line problem. `retry`: whether
    /// another try may help.
    std::string post(void* curl, const std::string& body, std::string& response, bool& retry);
    void score_batch(void* curl, std::vector<Request> reqs);

    std::string url_, token_;
    double timeout_s_;
    std::size_t batch_;
    int retries_;
    std::vector<std::thread> threads_;
};

/// Reads a bearer token file: refused (ConfigError naming the option) when missing, empty, not a
/// regular file, over 64 KiB, holding control characters, or readable/writable by others.
std::string read_token_file(const std::string& path);

}  // namespace tagflow::reward
