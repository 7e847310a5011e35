// SPDX-License-Identifier: Apache-2.0
// engine: continuous batching on LlamaSlotDecoder. Active sequences live in cache rows
// 0..n-1 (row i = active_[i]); a finished row is filled by moving the last active row into
// it (one cache copy of that row), so the decode step always works on a prefix of the cache
// and never on idle rows. See engine.hpp.
#include "rollout/engine.hpp"

#include <algorithm>
#include <cmath>
#include <deque>
#include <utility>

#include <c10/core/InferenceMode.h>
#include <torch/torch.h>

#include "common/error.hpp"
#include "health/status.hpp"
#include "rollout/sampling.hpp"

namespace tagflow::rollout {

struct InferenceEngine::Impl {
    struct Seq {
        int64_t order = 0;  ///< submission number
        GenRequest req;
        GenResult res;
        int64_t len = 0;         ///< tokens in the cache
        int64_t next_token = 0;  ///< sampled, not yet in the cache
    };

    model::LlamaModel model{nullptr};
    InferenceConfig cfg;
    std::unique_ptr<model::LlamaSlotDecoder> dec;
    std::deque<Seq> waiting;
    std::vector<Seq> active;
    std::vector<std::pair<int64_t, GenResult>> done;
    int64_t submitted = 0;
    int32_t version = 0;  ///< policy version of the tokens sampled now
    InferenceStats stats;
    std::vector<TokenEvent>* token_log = nullptr;  ///< set during a streaming step()

    static int64_t need(const GenRequest& r) {
        return static_cast<int64_t>(r.prompt.size()) + std::max<int64_t>(r.params.max_tokens, 1) - 1;
    }

    /// Appends sampled tokens to rows [first, first + n) of `active`; true where finished.
    std::vector<char> accept(int64_t first, const torch::Tensor& tok, const torch::Tensor& lp) {
        const auto n = tok.size(0);
        const int64_t* t = tok.data_ptr<int64_t>();
        const float* l = lp.data_ptr<float>();
        std::vector<char> fin(static_cast<std::size_t>(n), 0);
        for (int64_t i = 0; i < n; ++i) {
            Seq& s = active[static_cast<std::size_t>(first + i)];
            const auto token = static_cast<int32_t>(t[i]);
            s.res.response.push_back(token);
            s.res.logprobs.push_back(l[i]);
            s.res.versions.push_back(version);
            if (token_log) token_log->push_back(TokenEvent{s.req.id, token, l[i], version});
            s.next_token = token;
            const auto& stop = s.req.params.stop_ids;
            if (std::find(stop.begin(), stop.end(), token) != stop.end()) {
                s.res.finish = FinishReason::kStop;
                fin[static_cast<std::size_t>(i)] = 1;
            } else if (static_cast<int32_t>(s.res.response.size()) >= s.req.params.max_tokens) {
                s.res.finish = FinishReason::kLength;
                fin[static_cast<std::size_t>(i)] = 1;
            }
        }
        stats.generated_tokens += n;
        return fin;
    }

    torch::Tensor sample(int64_t first, const torch::Tensor& logits, torch::Tensor& lp) const {
        std::vector<RowSampling> rows(static_cast<std::size_t>(logits.size(0)));
        for (std::size_t i = 0; i < rows.size(); ++i) {
            const Seq& s = active[static_cast<std::size_t>(first) + i];
            const GenParams& p = s.req.params;
            rows[i] = RowSampling{p.temperature, p.top_p, p.top_k,
                                  stream_uniform(p.seed, static_cast<uint64_t>(s.res.response.size()))};
        }
        return sample_rows(logits, rows, lp);
    }

    /// Removes the rows marked in `fin` (indices relative to row 0), highest first, moving the
    /// last active row into each hole; the finished results go to `out`.
    void retire(const std::vector<char>& fin, std::vector<Seq>& out) {
        for (int64_t i = static_cast<int64_t>(fin.size()) - 1; i >= 0; --i) {
            if (!fin[static_cast<std::size_t>(i)]) continue;
            const int64_t last = static_cast<int64_t>(active.size()) - 1;
            out.push_back(std::move(active[static_cast<std::size_t>(i)]));
            if (i != last) {
                dec->move_slot(last, i, active[static_cast<std::size_t>(last)].len);
                active[static_cast<std::size_t>(i)] = std::move(active[static_cast<std::size_t>(last)]);
            }
            active.pop_back();
        }
    }

    void decode_step(std::vector<Seq>& finished) {
        const auto n = static_cast<int64_t>(active.size());
        std::vector<int64_t> tokens(static_cast<std::size_t>(n)), pos(static_cast<std::size_t>(n));
        for (int64_t i = 0; i < n; ++i) {
            tokens[static_cast<std::size_t>(i)] = active[static_cast<std::size_t>(i)].next_token;
            pos[static_cast<std::size_t>(i)] = active[static_cast<std::size_t>(i)].len;
        }
        const torch::Tensor logits = dec->decode(tokens, pos);
        for (auto& s : active) ++s.len;
        torch::Tensor lp;
        const torch::Tensor tok = sample(0, logits, lp);
        std::vector<char> fin = accept(0, tok, lp);
        ++stats.decode_steps;
        stats.decode_rows += n;
        retire(fin, finished);
    }

    void admit(std::vector<Seq>& finished) {
        const int64_t first = static_cast<int64_t>(active.size());
        int64_t cap = 0;
        while (!waiting.empty() && static_cast<int64_t>(active.size()) < cfg.max_batch) {
            Seq s = std::move(waiting.front());
            waiting.pop_front();
            s.res.id = s.req.id;
            s.res.prompt_tokens = static_cast<int32_t>(s.req.prompt.size());
            if (s.req.params.max_tokens <= 0) {  // nothing to generate
                finished.push_back(std::move(s));
                continue;
            }
            cap = std::max(cap, need(s.req));
            active.push_back(std::move(s));
        }
        const int64_t m = static_cast<int64_t>(active.size()) - first;
        if (m == 0) return;
        stats.max_active = std::max<int64_t>(stats.max_active, static_cast<int64_t>(active.size()));
        const int64_t want_slots = static_cast<int64_t>(active.size());
        if (!dec) {
            dec = std::make_unique<model::LlamaSlotDecoder>(model, want_slots, cap, cfg.bf16);
        } else if (want_slots > dec->slots() || cap > dec->capacity()) {
            // Grow geometrically so that a stream of slightly longer requests does not copy the
            // cache every time.
            const int64_t max_pos = model->config().max_position_embeddings;
            const int64_t ns = want_slots > dec->slots()
                                   ? std::min(cfg.max_batch, std::max(want_slots, 2 * dec->slots()))
                                   : dec->slots();
            const int64_t nc =
                cap > dec->capacity() ? std::min(max_pos, std::max(cap, 2 * dec->capacity())) : dec->capacity();
            dec->reserve(ns, nc);
        }
        std::vector<int64_t> slots(static_cast<std::size_t>(m));
        std::vector<std::vector<int32_t>> prompts(static_cast<std::size_t>(m));
        for (int64_t i = 0; i < m; ++i) {
            Seq& s = active[static_cast<std::size_t>(first + i)];
            slots[static_cast<std::size_t>(i)] = first + i;
            prompts[static_cast<std::size_t>(i)] = s.req.prompt;
            s.len = static_cast<int64_t>(s.req.prompt.size());
            stats.prefill_tokens += s.len;
        }
        const torch::Tensor logits = dec->prefill(slots, prompts);
        ++stats.prefills;
        torch::Tensor lp;
        const torch::Tensor tok = sample(first, logits, lp);
        std::vector<char> fin(static_cast<std::size_t>(first), 0);
        const std::vector<char> f2 = accept(first, tok, lp);
        fin.insert(fin.end(), f2.begin(), f2.end());
        retire(fin, finished);
    }
};

InferenceEngine::InferenceEngine(model::LlamaModel model, InferenceConfig cfg) : impl_(std::make_unique<Impl>()) {
    if (!model) throw Error("Engine: no model");
    if (cfg.max_batch < 1) throw Error("Engine: max_batch must be >= 1, got " + std::to_string(cfg.max_batch));
    impl_->model = std::move(model);
    impl_->cfg = cfg;
}

InferenceEngine::~InferenceEngine() = default;

void InferenceEngine::submit(GenRequest r) {
    const model::HfConfig& c = impl_->model->config();
    const std::string who = "Engine: request " + std::to_string(r.id) + ": ";
    if (r.prompt.empty()) throw Error(who + "empty prompt");
    for (int32_t t : r.prompt)
        if (t < 0 || t >= c.vocab_size)
            throw Error(who + "token id " + std::to_string(t) + " outside the vocabulary [0, " +
                        std::to_string(c.vocab_size) + ")");
    const GenParams& p = r.params;
    if (!std::isfinite(p.temperature) || p.temperature < 0) throw Error(who + "temperature must be >= 0");
    if (!(p.top_p > 0.0 && p.top_p <= 1.0)) throw Error(who + "top_p must be in (0, 1]");
    if (p.top_k < 0) throw Error(who + "top_k must be >= 0");
    if (Impl::need(r) > c.max_position_embeddings)
        throw Error(who + "prompt (" + std::to_string(r.prompt.size()) + ") + max_tokens (" +
                    std::to_string(p.max_tokens) + ") exceeds max_position_embeddings (" +
                    std::to_string(c.max_position_embeddings) + ") + 1");
    Impl::Seq s;
    s.order = impl_->submitted++;
    s.req = std::move(r);
    impl_->waiting.push_back(std::move(s));
}

bool InferenceEngine::step(const Callback& on_finish) { return step(on_finish, TokenCallback{}); }

bool InferenceEngine::step(const Callback& on_finish, const TokenCallback& on_token) {
    Impl& m = *impl_;
    if (m.active.empty() && m.waiting.empty()) return false;
    std::vector<Impl::Seq> finished;
    std::vector<TokenEvent> events;
    {
        c10::InferenceMode im;
        if (on_token) m.token_log = &events;
        struct Reset {
            Impl& m;
            ~Reset() { m.token_log = nullptr; }
        } reset{m};
        if (m.dec && m.dec->sync_weights()) ++m.stats.weight_refreshes;
        if (!m.active.empty()) m.decode_step(finished);
        m.admit(finished);
    }
    ++m.stats.steps;
    // Live status (health/status.hpp): four relaxed stores.
    health::status_board().set_engine(static_cast<int64_t>(m.active.size()), static_cast<int64_t>(m.waiting.size()),
                                      m.stats.generated_tokens, m.version);
    for (const TokenEvent& e : events) on_token(e);
    for (auto& s : finished) {
        s.res.num_tokens = static_cast<int32_t>(s.res.response.size());
        m.done.emplace_back(s.order, s.res);
        if (on_finish) on_finish(m.done.back().second);
    }
    return !(m.active.empty() && m.waiting.empty());
}

std::vector<GenResult> InferenceEngine::run(const Callback& on_finish) {
    while (step(on_finish)) {}
    auto& d = impl_->done;
    std::sort(d.begin(), d.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<GenResult> out;
    out.reserve(d.size());
    for (auto& x : d) out.push_back(std::move(x.second));
    d.clear();
    return out;
}

void InferenceEngine::update_weights(int32_t new_version, ResumeMode mode, int64_t recompute_window,
                                     int64_t min_tokens) {
    Impl& m = *impl_;
    if (recompute_window < 0)
        throw Error("Engine::update_weights: recompute_window must be >= 0, got " + std::to_string(recompute_window));
    if (min_tokens < 0)
        throw Error("Engine::update_weights: min_tokens must be >= 0, got " + std::to_string(min_tokens));
    c10::InferenceMode im;
    if (m.dec && m.dec->sync_weights()) ++m.stats.weight_refreshes;
    m.version = new_version;
    ++m.stats.weight_updates;
    if (mode != ResumeMode::kRecompute || !m.dec || m.active.empty()) return;
    // Row i holds (prompt + response)[0, len) (the last sampled token is not in the cache yet):
    // recompute [start, len) of every row in one batched extend; its logits are not needed
    // (the next token was sampled already, with the old weights).
    // (Rows shorter than min_tokens keep their caches.)
    std::vector<int64_t> slots, starts;
    std::vector<std::vector<int32_t>> seqs;
    for (std::size_t i = 0; i < m.active.size(); ++i) {
        const Impl::Seq& s = m.active[i];
        if (s.len < min_tokens) continue;
        const int64_t start = recompute_window > 0 ? std::max<int64_t>(0, s.len - recompute_window) : 0;
        std::vector<int32_t> all = s.req.prompt;
        all.insert(all.end(), s.res.response.begin(), s.res.response.end());
        slots.push_back(static_cast<int64_t>(i));
        starts.push_back(start);
        seqs.emplace_back(all.begin() + start, all.begin() + s.len);
        m.stats.recomputed_tokens += s.len - start;
        ++m.stats.recomputed_seqs;
    }
    if (!slots.empty()) m.dec->extend(slots, seqs, starts);
}

bool InferenceEngine::cancel(int64_t id, GenResult* partial) {
    Impl& m = *impl_;
    // The first submitted match: admission is FIFO, so every active row precedes the queue.
    std::vector<Impl::Seq> out;
    int64_t row = -1;
    for (std::size_t i = 0; i < m.active.size(); ++i)
        if (m.active[i].req.id == id && (row < 0 || m.active[i].order < m.active[static_cast<std::size_t>(row)].order))
            row = static_cast<int64_t>(i);
    if (row >= 0) {
        c10::InferenceMode im;  // move_slot() writes into the (inference-mode) cache
        std::vector<char> fin(static_cast<std::size_t>(row) + 1, 0);
        fin.back() = 1;
        m.retire(fin, out);
    } else {
        auto it = std::find_if(m.waiting.begin(), m.waiting.end(), [&](const Impl::Seq& s) { return s.req.id == id; });
        if (it == m.waiting.end()) return false;
        out.push_back(std::move(*it));
        m.waiting.erase(it);
        out.back().res.id = id;
        out.back().res.prompt_tokens = static_cast<int32_t>(out.back().req.prompt.size());
    }
    ++m.stats.cancelled;
    if (partial) {
        *partial = std::move(out.back().res);
        partial->finish = FinishReason::kCancelled;
        partial->num_tokens = static_cast<int32_t>(partial->response.size());
    }
    return true;
}

void InferenceEngine::set_policy_version(int32_t version) { impl_->version = version; }
int32_t InferenceEngine::policy_version() const { return impl_->version; }

int64_t InferenceEngine::active() const { return static_cast<int64_t>(impl_->active.size()); }
int64_t InferenceEngine::waiting() const { return static_cast<int64_t>(impl_->waiting.size()); }
const InferenceStats& InferenceEngine::stats() const { return impl_->stats; }
const InferenceConfig& InferenceEngine::config() const { return impl_->cfg; }

std::vector<GenResult> generate(model::LlamaModel& model, const std::vector<std::vector<int32_t>>& prompts,
                                const GenParams& params, const std::vector<uint64_t>& seeds,
                                const InferenceConfig& cfg) {
    if (seeds.size() != prompts.size())
        throw Error("generate: " + std::to_string(seeds.size()) + " seeds for " + std::to_string(prompts.size()) +
                    " prompts");
    InferenceConfig c = cfg;
    c.max_batch = std::max<int64_t>(1, std::min<int64_t>(cfg.max_batch, static_cast<int64_t>(prompts.size())));
    InferenceEngine engine(model, c);
    for (std::size_t i = 0; i < prompts.size(); ++i) {
        GenRequest r;
        r.id = static_cast<int64_t>(i);
        r.prompt = prompts[i];
        r.params = params;
        r.params.seed = seeds[i];
        engine.submit(std::move(r));
    }
    return engine.run();
}

std::vector<GenResult> generate(model::LlamaModel& model, const std::vector<std::vector<int32_t>>& prompts,
                                const GenParams& params, const InferenceConfig& cfg) {
    std::vector<uint64_t> seeds(prompts.size());
    for (std::size_t i = 0; i < seeds.size(); ++i) seeds[i] = derive_seed(params.seed, i);
    return generate(model, prompts, params, seeds, cfg);
}

double evaluate(model::LlamaModel& model, const Task& task, int64_t n_prompts, int64_t batch_size, int64_t first,
                bool bf16) {
    if (n_prompts <= 0) return 0.0;
    GenParams greedy;
    greedy.temperature = 0.0;
    // The task's limit, or less when the model was sized for less (tagflow train --max-new-tokens).
    greedy.max_tokens = static_cast<int32_t>(std::min<int64_t>(
        task.max_response_tokens(), model->config().max_position_embeddings + 1 - task.max_prompt_tokens()));
    greedy.stop_ids = {task.eos_token()};
    std::vector<std::vector<int32_t>> prompts;
    for (int64_t i = 0; i < n_prompts; ++i) prompts.push_back(task.eval_prompt(first + i));
    InferenceConfig cfg;
    cfg.max_batch = std::max<int64_t>(1, batch_size);
    cfg.bf16 = bf16;
    const auto comps = generate(model, prompts, greedy, cfg);
    double total = 0.0;
    for (std::size_t i = 0; i < prompts.size(); ++i) total += task.reward(prompts[i], comps[i].response);
    return total / static_cast<double>(n_prompts);
}

}  // namespace tagflow::rollout
