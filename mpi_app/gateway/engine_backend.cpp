// SPDX-License-Identifier: Apache-2.0
// engine_backend: the engine thread (queue -> InferenceEngine::submit, InferenceEngine::step, each sampled token
// -> its sink at once, the finish after the request's last token)
// and the JSON-lines record of completions and rewards (see engine_backend.hpp).
#include "gateway/engine_backend.hpp"

#include <atomic>
#include <condition_variable>
#include <ctime>
#include <deque>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>
#include <unordered_map>

#include "common/error.hpp"

namespace tagflow::gateway {

struct EngineBackend::Impl {
    EngineBackendOptions opt;
    model::LlamaModel model{nullptr};
    std::unique_ptr<rollout::InferenceEngine> engine;
    int64_t context = 0, vocab = 0, created = 0;

    mutable std::mutex mu;  // guards everything below
    std::condition_variable cv;
    std::deque<std::pair<CompletionRequest, TokenSinkPtr>> incoming;
    std::vector<uint64_t> cancels;  // cancel() ids not handled yet
    int64_t n_cancelled = 0;        // generations InferenceEngine::cancel stopped
    std::set<std::string> sessions, completion_ids;
    std::ofstream record;
    bool stop = false;
    int64_t pending = 0;
    int64_t done = 0;
    std::atomic<int32_t> version{0};

    // Engine thread only.
    struct Live {
        CompletionRequest req;
        TokenSinkPtr sink;
    };
    std::unordered_map<int64_t, Live> live;
    std::thread thread;

    void run();
    void write_record(const nlohmann::json& j) {  // mu held
        if (record.is_open()) {
            record << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
            record.flush();
        }
    }
};

EngineBackend::EngineBackend(model::LlamaModel model, EngineBackendOptions opt) : impl_(std::make_unique<Impl>()) {
    Impl& m = *impl_;
    m.opt = std::move(opt);
    m.model = model;
    m.context = model->config().max_position_embeddings;
    m.vocab = model->config().vocab_size;
    m.created = static_cast<int64_t>(std::time(nullptr));
    if (!m.opt.record_path.empty()) {
        m.record.open(m.opt.record_path, std::ios::out | std::ios::app);
        if (!m.record) throw Error("gateway: cannot open record file " + m.opt.record_path);
    }
    m.engine = std::make_unique<rollout::InferenceEngine>(model, m.opt.engine);
    m.thread = std::thread([&m] { m.run(); });
}

EngineBackend::~EngineBackend() {
    {
        std::lock_guard<std::mutex> lk(impl_->mu);
        impl_->stop = true;
    }
    impl_->cv.notify_all();
    impl_->thread.join();
}

BackendInfo EngineBackend::info() const {
    BackendInfo b;
    ModelInfo m;
    m.id = impl_->opt.model_id;
    m.context_length = impl_->context;
    m.vocab_size = impl_->vocab;
    m.created = impl_->created;
    b.models.push_back(m);
    std::lock_guard<std::mutex> lk(impl_->mu);
    b.pending = impl_->pending;
    b.policy_version = impl_->version.load();
    b.cancelled = impl_->n_cancelled;
    return b;
}

void EngineBackend::submit(CompletionRequest req, TokenSinkPtr sink) {
    {
        std::lock_guard<std::mutex> lk(impl_->mu);
        impl_->sessions.insert(req.session);
        impl_->completion_ids.insert(req.completion_id);
        impl_->incoming.emplace_back(std::move(req), std::move(sink));
        ++impl_->pending;
    }
    impl_->cv.notify_one();
}

void EngineBackend::cancel(uint64_t request_id) {
    {
        std::lock_guard<std::mutex> lk(impl_->mu);
        impl_->cancels.push_back(request_id);
    }
    impl_->cv.notify_one();
}

RewardStatus EngineBackend::report_reward(const RewardReport& r) {
    std::lock_guard<std::mutex> lk(impl_->mu);
    const bool known = (!r.session.empty() && impl_->sessions.count(r.session)) ||
                       (!r.completion_id.empty() && impl_->completion_ids.count(r.completion_id));
    if (!known) return RewardStatus::kUnknown;
    impl_->write_record({{"type", "reward"}, {"session", r.session}, {"id", r.completion_id}, {"reward", r.reward}});
    return RewardStatus::kAccepted;
}

void EngineBackend::set_policy_version(int32_t v) { impl_->version = v; }

int64_t EngineBackend::completed() const {
    std::lock_guard<std::mutex> lk(impl_->mu);
    return impl_->done;
}

void EngineBackend::Impl::run() {
    auto on_finish = [this](const rollout::GenResult& res) {
        auto it = live.find(res.id);
        if (it == live.end()) return;
        Live l = std::move(it->second);
        live.erase(it);
        const int32_t v = version.load();
        std::vector<GeneratedToken> toks;
        toks.reserve(res.response.size());
        for (std::size_t i = 0; i < res.response.size(); ++i)
            toks.push_back({res.response[i], i < res.logprobs.size() ? res.logprobs[i] : 0.0f, v});
        Finish f;
        f.reason = finish_reason_name(res.finish);
        const bool cancelled = res.finish == FinishReason::kCancelled;
        {
            std::lock_guard<std::mutex> lk(mu);
            --pending;
            if (cancelled) ++n_cancelled;
            else ++done;
            std::vector<int32_t> versions(toks.size(), v);
            write_record({{"type", "completion"},
                          {"id", l.req.completion_id},
                          {"session", l.req.session},
                          {"prompt_ids", l.req.prompt_ids},
                          {"token_ids", res.response},
                          {"logprobs", res.logprobs},
                          {"versions", versions},
                          {"finish_reason", f.reason},
                          {"cancelled", cancelled}});
        }
        // The tokens went out one at a time from on_token (streaming); only the end is left
        // (for a cancelled request nobody reads it).
        l.sink->finish(f);
    };
    auto on_token = [this](const rollout::TokenEvent& e) {
        auto it = live.find(e.id);
        if (it == live.end()) return;
        it->second.sink->tokens({GeneratedToken{e.token, e.logprob, version.load()}});
    };
    for (;;) {
        std::deque<std::pair<CompletionRequest, TokenSinkPtr>> batch;
        std::vector<uint64_t> to_cancel;
        bool stopping = false;
        {
            std::unique_lock<std::mutex> lk(mu);
            cv.wait(lk, [&] {
                return stop || !incoming.empty() || !cancels.empty() || engine->active() + engine->waiting() > 0;
            });
            batch.swap(incoming);
            to_cancel.swap(cancels);
            stopping = stop;
        }
        if (stopping) {
            Finish f;
            f.reason = "abort";
            for (auto& [req, sink] : batch) sink->finish(f);
            for (auto& [id, l] : live) l.sink->finish(f);
            live.clear();
            return;
        }
        for (auto& [req, sink] : batch) {
            rollout::GenRequest g;
            g.id = static_cast<int64_t>(req.request_id);
            g.prompt = req.prompt_ids;
            g.params.temperature = req.temperature;
            g.params.top_p = req.top_p;
            g.params.top_k = req.top_k;
            g.params.max_tokens = req.max_tokens;
            g.params.stop_ids = req.stop_ids;
            g.params.seed = req.seed;
            try {
                engine->submit(std::move(g));
                live.emplace(static_cast<int64_t>(req.request_id), Live{std::move(req), std::move(sink)});
            } catch (const std::exception& e) {
                {
                    std::lock_guard<std::mutex> lk(mu);
                    --pending;
                }
                Finish f;
                f.reason = "error";
                f.http_status = 400;
                f.error = e.what();
                sink->finish(f);
            }
        }
        // Cancels at this token boundary (after the batch, so a request cancelled right after
        // its submit is found waiting): the slot is free for the next step's admissions.
        for (uint64_t id : to_cancel) {
            rollout::GenResult part;
            if (live.count(static_cast<int64_t>(id)) && engine->cancel(static_cast<int64_t>(id), &part))
                on_finish(part);
        }
        try {
            engine->step(on_finish, on_token);
        } catch (const std::exception& e) {
            // The engine is in an unknown state: fail everything in flight and start afresh.
            Finish f;
            f.reason = "error";
            f.http_status = 500;
            f.error = std::string("rollout engine failed: ") + e.what();
            {
                std::lock_guard<std::mutex> lk(mu);
                pending -= static_cast<int64_t>(live.size());
            }
            for (auto& [id, l] : live) l.sink->finish(f);
            live.clear();
            engine = std::make_unique<rollout::InferenceEngine>(model, opt.engine);
        }
    }
}

}  // namespace tagflow::gateway
