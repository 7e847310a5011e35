// SPDX-License-Identifier: Apache-2.0
// async_generator: generation on the generating ranks: the engine kept full of the task's prompt groups
// (each generator takes its share, --rollout-ahead caps it), one engine step at a time, finished
// samples with their per-token versions, and the samples stream to the coordinator.
// Part of the async scheduler (sched/async_scheduler_impl.hpp).
#include "sched/async_scheduler_impl.hpp"

namespace tagflow::sched::async {

void AsyncScheduler::fill_engine() {
    if (opt_.gateway_only) return;  // only gateway requests are generated
    const int64_t G = opt_.group_size, n = static_cast<int64_t>(gens_.size());
    if (data_) {  // --data: the groups the coordinator assigned (async_data.cpp), in order
        while (!assigned_.empty() && engine_->active() + engine_->waiting() < opt_.max_batch &&
               (quota_ == 0 || started_ < quota_)) {
            started_ += G;
            const int64_t g = assigned_.front();
            assigned_.pop_front();
            auto& [prompt, left] = prompt_of_[g];
            prompt = data_->row_prompt(data_row(g, rows_));
            left = G;
            for (int64_t k = 0; k < G; ++k) {
                rollout::GenRequest rq;
                rq.id = g * G + k;
                rq.prompt = prompt;
                rq.params = rollout_params(opt_, *task_, max_new_, rq.id);
                if (!rq.params.stop_ids.empty()) rq.params.stop_ids = data_->stop_ids();
                groups_of_[rq.id] = g;
                engine_->submit(std::move(rq));
            }
        }
        return;
    }
    // --admission staleness: only the groups the coordinator granted (async_admission.cpp).
    const int64_t allowed = admitted();
    while (engine_->active() + engine_->waiting() < opt_.max_batch && (quota_ == 0 || started_ < quota_) &&
           next_local_ < allowed) {
        started_ += G;
        const int64_t g = next_local_++ * n + gen_index_;
        auto prompt = task_->train_prompt(g);
        for (int64_t k = 0; k < G; ++k) {
            const int64_t id = g * G + k;
            rollout::GenRequest rq;
            rq.id = id;
            rq.prompt = prompt;
            rq.params = rollout_params(opt_, *task_, max_new_, id);
            groups_of_[id] = g;
            if (agent_) start_session(rq);  // multi-turn: this is the session's first turn
            else engine_->submit(std::move(rq));
        }
    }
}

void AsyncScheduler::gen_step(std::vector<RolloutSample>& out) {
    fill_engine();
    // Nothing to step: only rewards to wait for (--data), or no group admitted yet (the caller
    // books the wait as idle). A gateway rank steps anyway (its relays flush after the step).
    if (engine_->active() + engine_->waiting() == 0 && (data_ || (!gw_router_ && !gw_worker_))) {
        if (data_) collect_rewards(out);
        return;
    }
    enter(SpanKind::kRollout);
    step_versions_.push_back(version_);
    const size_t f = step_versions_.size() - 1;
    rollout::InferenceEngine::TokenCallback on_token;
    if (gw_router_)
        on_token = [&](const rollout::TokenEvent& e) {
            if (is_gateway_id(e.id)) gw_router_->on_token(e);
        };
    if (gw_worker_)
        on_token = [&](const rollout::TokenEvent& e) {
            if (is_gateway_id(e.id)) gw_worker_->on_token(e);
        };
    engine_->step(
        [&](const rollout::GenResult& g) {
            if (is_gateway_id(g.id)) {  // a gateway request: it goes back to its client, not to the pool
                if (gw_router_) gw_router_->on_finish(g, clock_.now());
                if (gw_worker_) gw_worker_->on_finish(g);
                return;
            }
            if (agent_ && agent_->owns(g.id)) return agent_turn(g, out);
            RolloutSample r;
            r.id = g.id;
            auto it = groups_of_.find(g.id);
            r.group = it->second;
            groups_of_.erase(it);
            r.rank = me_;
            if (data_) {
                auto p = prompt_of_.find(r.group);
                r.prompt = p->second.first;
                if (--p->second.second == 0) prompt_of_.erase(p);
            } else {
                r.prompt = task_->train_prompt(r.group);
            }
            r.response = g.response;
            r.logprobs = g.logprobs;
            r.hit_eos = g.finish == FinishReason::kStop;
            if (!data_) r.reward = task_->reward(r.prompt, r.response);
            r.t_done = clock_.now();
            // Per-token versions: the engine's (GenResult::versions, set by update_weights);
            // failing that, since the engine samples one token per step for every admitted
            // sequence, the n tokens of a result that finished in step f came from steps f-n+1..f.
            const size_t n = g.response.size();
            if (g.versions.size() == n) {
                r.versions = g.versions;
            } else {
                r.versions.resize(n);
                for (size_t k = 0; k < n; ++k) {
                    const size_t at = f + 1 >= n - k ? f + 1 - (n - k) : 0;
                    r.versions[k] = step_versions_[at];
                }
            }
            r.version = n ? *std::min_element(r.versions.begin(), r.versions.end()) : version_;
            if (data_) {  // scored while the engine goes on; sent once its reward is in (collect_rewards)
                data_->scorer().submit(
                    {data_->reward_request(static_cast<uint64_t>(r.id), data_row(r.group, rows_), r.response)});
                awaiting_.emplace(static_cast<uint64_t>(r.id), std::move(r));
                return;
            }
            out.push_back(std::move(r));
        },
        on_token);
    if (gw_worker_) gw_worker_->flush();
    if (data_) collect_rewards(out);
}

void AsyncScheduler::send_samples(const std::vector<RolloutSample>& s) {
    test_sends();
    wire::Writer w;
    wire::put_spans(w, take_spans());
    wire::put_samples(w, s);
    queue_send(w.take(), kTagSamples);
}

void AsyncScheduler::test_sends() {
    for (auto it = sends_.begin(); it != sends_.end();) {
        int done = 0;
        TAGFLOW_MPI_CHECK(MPI_Test(&it->req, &done, MPI_STATUS_IGNORE));
        it = done ? sends_.erase(it) : std::next(it);
    }
}

void AsyncScheduler::finish_sends() {
    std::vector<MPI_Request> v;
    for (auto& m : sends_) v.push_back(m.req);
    wait_all(v);
    sends_.clear();
}

}  // namespace tagflow::sched::async
