// SPDX-License-Identifier: Apache-2.0
// backend: what the gateway hands a validated request to. A Backend owns the generation (a
// rollout engine on this rank, or a router that forwards to the rollout rank holding the
// session's prefix); the gateway only enqueues and streams back what the TokenSink receives.
// Contract: submit()/cancel()/report_reward() are called from the gateway's I/O thread, must
// be thread-safe and must not block (queue the work; generate elsewhere). The sink may be
// called from any thread: tokens() zero or more times, then finish() exactly once.
// No LibTorch, no MPI here (engine_backend.hpp is the LibTorch implementation).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tagflow::gateway {

/// One generation, already tokenized and validated by the gateway.
struct CompletionRequest {
    uint64_t request_id = 0;          ///< unique per gateway (for cancel())
    std::string completion_id;        ///< "cmpl-..." / "chatcmpl-..." as returned to the client
    std::string model;                ///< one of BackendInfo::models[].id
    std::string session;              ///< agent session (routing key); never empty
    std::vector<int32_t> prompt_ids;  ///< at least one; prompt_ids.size() + max_tokens <= context
    int32_t max_tokens = 16;          ///< >= 1
    double temperature = 1.0;         ///< [0, 2]; 0 = greedy
    double top_p = 1.0;               ///< (0, 1]
    int32_t top_k = 0;                ///< 0 = off
    std::vector<int32_t> stop_ids;    ///< generating one of these ends the response (it is kept)
    uint64_t seed = 0;                ///< the request's random stream
    bool stream = false;              ///< informational: the gateway streams either way
};

struct GeneratedToken {
    int32_t id = 0;
    float logprob = 0.0f;  ///< log-probability under the sampling distribution (see rollout/engine.hpp)
    int32_t version = 0;   ///< policy version that produced the token
};

struct Finish {
    /// "stop" (a stop id was generated, it is the last token), "length" (max_tokens),
    /// "abort" (the backend gave up, e.g. shutting down), "cancelled" (cancel() stopped it; no
    /// client is listening any more) or "error" (see `error`).
    std::string reason = "length";
    std::string error;      ///< one line, reason == "error" only
    int http_status = 500;  ///< for "error": 4xx if the request was at fault
};

class TokenSink {
public:
    virtual ~TokenSink() = default;
    /// New tokens of the response, in order. Thread-safe, cheap, never blocks.
    virtual void tokens(const std::vector<GeneratedToken>& t) = 0;
    /// The end of the response; called exactly once, after the last tokens().
    virtual void finish(const Finish& f) = 0;
};
using TokenSinkPtr = std::shared_ptr<TokenSink>;

struct ModelInfo {
    std::string id;              ///< the `model` clients send
    int64_t context_length = 0;  ///< prompt + completion tokens at most
    int64_t vocab_size = 0;      ///< token ids in prompts must be < this
    int64_t created = 0;         ///< unix time (for /v1/models)
    std::string owned_by = "tagflow";
};

struct BackendInfo {
    std::vector<ModelInfo> models;
    int64_t pending = 0;  ///< requests queued or generating (for /health)
    int32_t policy_version = 0;
    /// Generations stopped inside the engine because their client went away (for /health).
    int64_t cancelled = 0;
    /// Sessions the backend keeps state for (routing, reward validation); -1 = not tracked.
    int64_t sessions = -1;
};

/// A reward an agent reports for a session or one completion (POST /v1/rewards).
struct RewardReport {
    std::string session;        ///< may be empty if completion_id is set
    std::string completion_id;  ///< may be empty if session is set
    double reward = 0.0;
    /// Optional: sessions reported with the same group (e.g. G attempts at one prompt) form one
    /// GRPO group in training; "" = the session is a group of its own.
    std::string group;
};

enum class RewardStatus { kAccepted, kUnknown };

class Backend {
public:
    virtual ~Backend() = default;
    virtual BackendInfo info() const = 0;
    /// Queues `req`; results go to `sink`. Must not throw for a valid request (report problems
    /// through sink->finish with reason "error").
    virtual void submit(CompletionRequest req, TokenSinkPtr sink) = 0;
    /// The client went away: stop generating `request_id` if possible, freeing its engine slot
    /// (finish() is still called, "cancelled" or whatever ended it first, and ignored by the
    /// gateway). Unknown or finished ids are ignored.
    virtual void cancel(uint64_t request_id) { (void)request_id; }
    /// Records a reward; kUnknown when neither the session nor the completion id was served.
    virtual RewardStatus report_reward(const RewardReport& r) = 0;
};

}  // namespace tagflow::gateway
