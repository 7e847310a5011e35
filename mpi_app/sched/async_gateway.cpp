// SPDX-License-Identifier: Apache-2.0
// async_gateway: the --gateway glue: which rank serves the HTTP gateway, polling it between engine
// steps, and the coordinator's intake of rewarded gateway sessions (serve/gateway_router.hpp).
// Part of the async scheduler (sched/async_scheduler_impl.hpp).
#include "sched/async_scheduler_impl.hpp"
#include "step/run_tokenizer.hpp"

namespace tagflow::sched::async {

void AsyncScheduler::setup_gateway() {
    if (receivers_.empty())
        throw ConfigError(
            "--gateway: needs a rank that only rolls out (it is never preempted), e.g. "
            "--rank-tags \"0=rollout;1=rollout,train\"");
    gw_rank_ = receivers_.front();
    if (me_ == coord_) {
        RecorderLimits lim;
        lim.session_idle_s = opt_.gateway_session_idle;
        gw_rec_ = std::make_unique<GatewayRecorder>(opt_.group_size, lim, run_tokenizer(opt_));
    }
    if (me_ == gw_rank_) {
        GatewayConfig gc;
        const size_t c = opt_.gateway.rfind(':');
        gc.host = c == std::string::npos || c == 0 ? "127.0.0.1" : opt_.gateway.substr(0, c);
        if (gc.host.size() > 2 && gc.host.front() == '[') gc.host = gc.host.substr(1, gc.host.size() - 2);
        gc.port = std::stoi(c == std::string::npos ? opt_.gateway : opt_.gateway.substr(c + 1));
        gc.out = opt_.out;
        gc.context = policy_->config().max_position_embeddings;
        gc.vocab = policy_->config().vocab_size;
        gc.me = me_;
        gc.coordinator = coord_;
        gc.targets = receivers_;
        gc.comm = p2p_.get();
        gc.session_idle_s = opt_.gateway_session_idle;
        gc.tokenizer = run_tokenizer(opt_);  // the model's own (tokenizer.json), else byte-level
        gw_router_ = std::make_unique<GatewayRouter>(gc);
    } else if (is_recv_) {
        gw_worker_ = std::make_unique<GatewayWorker>(gw_rank_, p2p_.get());
    }
}

void AsyncScheduler::gateway_poll() {
    if (gw_router_) gw_router_->poll(*engine_, clock_.now(), version_);
    if (gw_worker_) gw_worker_->poll(*engine_);
}

void AsyncScheduler::gateway_ingest(const char* p, size_t n) {
    std::vector<std::vector<RolloutSample>> groups;
    gw_rec_->ingest(p, n, groups);
    for (auto& g : groups) {
        finished_ += static_cast<int64_t>(g.size());
        pool_.add_group(std::move(g));
    }
}

}  // namespace tagflow::sched::async
