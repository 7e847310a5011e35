// SPDX-License-Identifier: Apache-2.0
// gateway_queue: the gateway::Backend the HTTP thread talks to (GatewayRouter's, on the gateway
// rank). It only queues requests, cancels and rewards under a mutex, and validates a reward's
// session or completion id; the router's main-thread poll takes them (MPI stays on that thread).
// Internal to serve/gateway_router.cpp. Does not route or generate.
#pragma once
#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "gateway/backend.hpp"

namespace tagflow::sched::gw {

struct Inbox {
    mutable std::mutex mu;
    std::deque<std::pair<gateway::CompletionRequest, gateway::TokenSinkPtr>> reqs;
    std::deque<gateway::RewardReport> rewards;
    std::deque<uint64_t> reward_seq;  // per reward: requests its session had submitted before it
    std::vector<uint64_t> cancels;
    // Reward validation. session -> requests submitted under it (the main thread forgets a
    // session only if it routed all of them: no newer request is queued); completion id -> session.
    std::unordered_map<std::string, uint64_t> sessions;
    std::unordered_map<std::string, std::string> completion_ids;
    int64_t pending = 0, cancelled = 0, live_sessions = 0;  // the last two: the main thread's, for /health
    std::atomic<int32_t> version{0};
    gateway::ModelInfo model;
};

class QueueBackend final : public gateway::Backend {
public:
    explicit QueueBackend(std::shared_ptr<Inbox> in) : in_(std::move(in)) {}
    gateway::BackendInfo info() const override {
        gateway::BackendInfo b;
        b.models.push_back(in_->model);
        std::lock_guard<std::mutex> lk(in_->mu);
        b.pending = in_->pending;
        b.policy_version = in_->version.load();
        b.cancelled = in_->cancelled;
        b.sessions = in_->live_sessions;
        return b;
    }
    void submit(gateway::CompletionRequest req, gateway::TokenSinkPtr sink) override {
        std::lock_guard<std::mutex> lk(in_->mu);
        ++in_->sessions[req.session];
        in_->completion_ids[req.completion_id] = req.session;
        in_->reqs.emplace_back(std::move(req), std::move(sink));
        ++in_->pending;
    }
    void cancel(uint64_t id) override {
        std::lock_guard<std::mutex> lk(in_->mu);
        in_->cancels.push_back(id);
    }
    gateway::RewardStatus report_reward(const gateway::RewardReport& r) override {
        std::lock_guard<std::mutex> lk(in_->mu);
        const bool known = (!r.session.empty() && in_->sessions.count(r.session)) ||
                           (!r.completion_id.empty() && in_->completion_ids.count(r.completion_id));
        if (!known) return gateway::RewardStatus::kUnknown;
        in_->rewards.push_back(r);
        auto s = in_->sessions.find(r.session);
        in_->reward_seq.push_back(s == in_->sessions.end() ? 0 : s->second);
        return gateway::RewardStatus::kAccepted;
    }

private:
    std::shared_ptr<Inbox> in_;
};

}  // namespace tagflow::sched::gw
