// SPDX-License-Identifier: Apache-2.0
// engine: the rollout engine. Continuous batching over the Llama/Qwen2 decoder: up to
// `max_batch` sequences decode together, one token per step, from a preallocated slot KV
// cache (model::LlamaSlotDecoder); a finished sequence's slot is refilled at once by the next
// waiting request (its prompt is prefilled) while the others keep decoding. Each request
// samples from its own counter-based random stream, so its completion does not depend on the
// batch size, the slot it got or the other requests (up to float rounding of batched GEMMs).
// Also the convenience generate()/evaluate() built on it. Per-rank and single-threaded: no MPI, no locking (one engine per thread).
// Partial rollout: new weights can arrive while generations are in flight; update_weights()
// (between steps) swaps them at a token boundary and the generations resume (kept or
// recomputed KV caches), every response token tagged with the policy version that sampled it.
// Cancel: cancel(id) removes a queued or running request between steps and frees its slot.
// Does not tokenize, compute rewards or exchange weights (the caller updates the model's
// parameters in place; the engine notices and re-snapshots them at the next step, or at once
// in update_weights()).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/finish_reason.hpp"
#include "model/llama.hpp"
#include "rollout/task.hpp"

namespace tagflow::rollout {

/// How one request is sampled.
struct GenParams {
    double temperature = 1.0;       ///< 0 = greedy (argmax)
    double top_p = 1.0;             ///< nucleus mass kept, in (0, 1]; 1 = no filtering
    int32_t top_k = 0;              ///< keep the k most likely tokens; 0 = no filtering
    int32_t max_tokens = 16;        ///< response budget, stop token included
    std::vector<int32_t> stop_ids;  ///< a sampled token from this list ends the response (kept in it)
    uint64_t seed = 0;              ///< the request's random stream (see sampling.hpp)
};

struct GenRequest {
    int64_t id = 0;               ///< the caller's id, copied into the result
    std::vector<int32_t> prompt;  ///< token ids, at least one
    GenParams params;
};

struct GenResult {
    int64_t id = 0;
    std::vector<int32_t> response;  ///< generated tokens; ends with the stop token iff finish == kStop
    /// One per response token: log_softmax(logits / T)[token] of the raw model at the sampling
    /// temperature T (T = 0: plain log_softmax), before top-k/top-p filtering — the quantity
    /// the trainer computes, so PPO ratios are exactly 1 on-policy without filtering.
    std::vector<float> logprobs;
    /// One per response token: the engine's policy version when the token was sampled (see
    /// InferenceEngine::update_weights); a generation interrupted by a weight update has two or more.
    std::vector<int32_t> versions;
    FinishReason finish = FinishReason::kLength;  ///< kStop, kLength, or kCancelled from cancel()
    int32_t prompt_tokens = 0;
    int32_t num_tokens = 0;  ///< response.size()
};

struct InferenceConfig {
    int64_t max_batch = 64;  ///< sequences decoding together (KV-cache slots)
    bool bf16 = false;       ///< compute in bf16 (weights snapshot, cache, activations); logits fp32
};

/// Counters since construction (for tests and benchmarks).
struct InferenceStats {
    int64_t steps = 0;              ///< calls of step() that did work
    int64_t decode_steps = 0;       ///< batched decode steps
    int64_t decode_rows = 0;        ///< sum over decode steps of the rows decoded
    int64_t prefills = 0;           ///< batched prefill calls
    int64_t prefill_tokens = 0;     ///< prompt tokens prefilled
    int64_t generated_tokens = 0;   ///< response tokens sampled
    int64_t max_active = 0;         ///< most sequences in the slots at once
    int64_t weight_refreshes = 0;   ///< re-snapshots of the model's weights after a change
    int64_t weight_updates = 0;     ///< update_weights() calls
    int64_t recomputed_tokens = 0;  ///< cached tokens whose k/v update_weights() recomputed
    int64_t recomputed_seqs = 0;    ///< sequences update_weights() recomputed (once per update each)
    int64_t cancelled = 0;          ///< requests removed by cancel() (queued or running)
};

/// What update_weights() does with the KV caches of the sequences in flight.
///  - kKeep (the default): keep them. Free; the tokens generated after the update attend to keys
///    and values computed partly with the old weights, so they are sampled from a mixture of
///    the two policies, one version stale at most per update. Their logprobs are exactly the
///    probabilities they were sampled with, and `versions` says which update each followed, so
///    an off-policy-corrected loss (PPO's ratio against these logprobs) stays exact. This is the
///    default because an update costs nothing, whatever the batch and lengths, and the
///    staleness it leaves is bounded and recorded.
///  - kRecompute: re-run each active sequence's prompt + generated tokens through the new
///    weights (one batched extend) before resuming, so that the rest of the generation is
///    exactly what the new policy would sample after that prefix. Costs a prefill of everything
///    in flight per update; `recompute_window` W > 0 recomputes only the last W cached tokens
///    of each sequence (older positions keep their old k/v), bounding that cost, and
///    `min_tokens` N > 0 recomputes only the sequences holding at least N cached tokens (the
///    shorter ones keep theirs).
/// Either way the token already sampled before the update keeps its old version and logprob.
enum class ResumeMode { kKeep, kRecompute };

/// One token sampled in a step (streaming, e.g. the gateway's SSE chunks): which request, the
/// token, its log-probability and policy version (the same numbers GenResult ends up with).
struct TokenEvent {
    int64_t id = 0;
    int32_t token = 0;
    float logprob = 0.0f;
    int32_t version = 0;
};

class InferenceEngine {
public:
    using Callback = std::function<void(const GenResult&)>;
    using TokenCallback = std::function<void(const TokenEvent&)>;

    /// Shares `model` (no copy of the module; its weights are snapshotted for decoding).
    explicit InferenceEngine(model::LlamaModel model, InferenceConfig cfg = InferenceConfig{});
    ~InferenceEngine();
    InferenceEngine(const InferenceEngine&) = delete;
    InferenceEngine& operator=(const InferenceEngine&) = delete;

    /// Queues a request (first come, first served). Throws tagflow::Error naming the request on
    /// an empty prompt, a token id outside the vocabulary, bad sampling parameters, or
    /// prompt + max_tokens - 1 beyond the model's max_position_embeddings.
    void submit(GenRequest request);
    /// One step: decode one token for every active sequence, retire finished ones, then
    /// admit and prefill waiting requests into the free slots (their first token is sampled
    /// from the prefill). `on_finish` (may be empty; may call submit()) is called once per
    /// request that finished in this step. Returns false when nothing is left to do.
    bool step(const Callback& on_finish = {});
    /// Same, and `on_token` (may be empty; must not call submit()) is called once per token
    /// sampled in this step, in sampling order per request, after the step's compute and before
    /// `on_finish` of the requests that finished in it: streaming one token at a time.
    bool step(const Callback& on_finish, const TokenCallback& on_token);
    /// Steps until every queued request (including any submitted from `on_finish`) finished;
    /// returns the results not yet returned, in submission order.
    std::vector<GenResult> run(const Callback& on_finish = {});

    /// Partial rollout: call between step()s after changing the model's parameters in place
    /// (e.g. a weight sync). Re-snapshots the weights at once, sets the policy version that
    /// later tokens are tagged with, and keeps or recomputes the caches of the sequences in
    /// flight (ResumeMode; `recompute_window` 0 = everything, else the last W tokens;
    /// `min_tokens` 0 = every sequence, else those holding at least N). No request is restarted
    /// or dropped. Throws tagflow::Error on a negative window or threshold.
    void update_weights(int32_t new_version, ResumeMode mode = ResumeMode::kKeep, int64_t recompute_window = 0,
                        int64_t min_tokens = 0);
    /// Sets the version that tokens sampled from now on carry (no weight handling; e.g. the
    /// version of the weights the engine starts with). Default 0.
    void set_policy_version(int32_t version);
    int32_t policy_version() const;

    /// Cancels request `id` at a token boundary (call between step()s, or from step()'s
    /// callbacks): a queued request is dropped; a running one leaves its slot at once (the slot
    /// is refilled by the next waiting request in the next step) and the other sequences go on
    /// exactly as before. Its on_finish is never called and run() does not return it; if
    /// `partial` is given it receives what was generated so far (finish kCancelled). Returns
    /// false (nothing changed) if no queued or running request has that id (e.g. it finished
    /// already). With duplicate ids, the first submitted one is cancelled.
    bool cancel(int64_t id, GenResult* partial = nullptr);

    int64_t active() const;   ///< sequences decoding
    int64_t waiting() const;  ///< requests not admitted yet
    const InferenceStats& stats() const;
    const InferenceConfig& config() const;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

/// One completion per prompt, all with `params`; request i uses the stream
/// derive_seed(params.seed, i). A fresh InferenceEngine per call (it re-snapshots the weights): keep an
/// InferenceEngine instead when calling repeatedly with large models.
std::vector<GenResult> generate(model::LlamaModel& model, const std::vector<std::vector<int32_t>>& prompts,
                                const GenParams& params, const InferenceConfig& cfg = InferenceConfig{});
/// Same with an explicit seed per prompt (seeds.size() == prompts.size()).
std::vector<GenResult> generate(model::LlamaModel& model, const std::vector<std::vector<int32_t>>& prompts,
                                const GenParams& params, const std::vector<uint64_t>& seeds,
                                const InferenceConfig& cfg = InferenceConfig{});

/// Mean reward of greedy completions (stop at the task's EOS, at most max_response_tokens())
/// on eval prompts [first, first + n_prompts), decoded with up to `batch_size` in flight.
double evaluate(model::LlamaModel& model, const Task& task, int64_t n_prompts, int64_t batch_size = 512,
                int64_t first = 0, bool bf16 = false);

}  // namespace tagflow::rollout
