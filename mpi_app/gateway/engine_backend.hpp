// SPDX-License-Identifier: Apache-2.0
// engine_backend: a gateway Backend that runs a rollout::InferenceEngine on its own thread (one rank,
// one model). submit() only queues; the thread admits queued requests into the engine, steps
// it, and delivers every token to its sink in the engine step that sampled it (token,
// log-probability, policy version; InferenceEngine::step's on_token), so `stream: true` answers one SSE
// chunk per token; finish() follows the last one. Optionally records every completion and
// reward as JSON lines.
// cancel() (the client went away) stops the generation at the next token boundary with
// InferenceEngine::cancel, freeing its slot; the record says finish_reason "cancelled".
// Does not route between ranks or update weights (set_policy_version() only labels tokens).
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "gateway/backend.hpp"
#include "model/llama.hpp"
#include "rollout/engine.hpp"

namespace tagflow::gateway {

struct EngineBackendOptions {
    std::string model_id = "tagflow-policy";  ///< the `model` clients send
    rollout::InferenceConfig engine;
    /// JSON lines, one per finished completion ({"type":"completion", "id", "session",
    /// "prompt_ids", "token_ids", "logprobs", "versions", "finish_reason"}) and per accepted
    /// reward ({"type":"reward", "session", "id", "reward"}); "" = none.
    std::string record_path;
};

class EngineBackend final : public Backend {
public:
    /// Shares `model` with the engine (no copy). Starts the engine thread.
    explicit EngineBackend(model::LlamaModel model, EngineBackendOptions opt = EngineBackendOptions{});
    ~EngineBackend() override;  ///< finishes queued requests with "abort" and joins the thread

    BackendInfo info() const override;
    void submit(CompletionRequest req, TokenSinkPtr sink) override;
    void cancel(uint64_t request_id) override;
    RewardStatus report_reward(const RewardReport& r) override;

    /// The version written into every generated token from now on.
    void set_policy_version(int32_t v);
    /// Completions finished so far (cancelled ones not counted; info().cancelled counts them).
    int64_t completed() const;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace tagflow::gateway
