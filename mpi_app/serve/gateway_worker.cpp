// SPDX-License-Identifier: Apache-2.0
// gateway_worker: GatewayWorker (serve/gateway_router.hpp), on the rollout-only ranks other than
// the gateway rank: routed requests into the engine, their tokens and finishes back to the
// gateway rank once per engine step. Message layouts: gateway_router.cpp.
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "common/error.hpp"
#include "serve/gateway_link.hpp"
#include "serve/gateway_router.hpp"
#include "step/wire.hpp"

namespace tagflow::sched {

using namespace gw;  // the parts' shared message helpers (gateway_link.hpp)

struct GatewayWorker::Impl {
    int gw = 0;
    MPI_Comm comm = MPI_COMM_NULL;
    wire::Writer toks;
    uint64_t n_toks = 0;
    std::vector<std::pair<uint64_t, uint8_t>> fins;
    Sends sends;
};

GatewayWorker::GatewayWorker(int gateway_rank, MPI_Comm comm) : impl_(std::make_unique<Impl>()) {
    impl_->gw = gateway_rank;
    impl_->comm = comm;
}
GatewayWorker::~GatewayWorker() = default;

void GatewayWorker::poll(rollout::InferenceEngine& engine) {
    Impl& m = *impl_;
    std::vector<char> b;
    while (try_recv(m.comm, m.gw, kTagGwReq, b)) {
        wire::Reader in(b, "gateway");
        const auto kind = in.get<uint8_t>();
        if (kind == kReqCancel) {  // unknown here: it finished already (its finish is on its way)
            const auto rid = in.get<uint64_t>();
            if (engine.cancel(kGatewayIdBase + static_cast<int64_t>(rid))) m.fins.emplace_back(rid, kFinCancelled);
            continue;
        }
        if (kind != kReqGenerate) throw InternalError("gateway worker: unknown request kind " + std::to_string(kind));
        gateway::CompletionRequest q;
        q.request_id = in.get<uint64_t>();
        q.max_tokens = in.get<int32_t>();
        q.temperature = in.get<double>();
        q.top_p = in.get<double>();
        q.top_k = in.get<int32_t>();
        q.seed = in.get<uint64_t>();
        q.stop_ids = in.vec<int32_t>();
        q.prompt_ids = in.vec<int32_t>();
        try {
            engine.submit(to_gen(q));
        } catch (const std::exception&) {
            m.fins.emplace_back(q.request_id, kFinError);
        }
    }
}

void GatewayWorker::on_token(const rollout::TokenEvent& e) {
    Impl& m = *impl_;
    m.toks.put<uint64_t>(static_cast<uint64_t>(e.id - kGatewayIdBase));
    m.toks.put<int32_t>(e.token);
    m.toks.put<float>(e.logprob);
    m.toks.put<int32_t>(e.version);
    ++m.n_toks;
}

void GatewayWorker::on_finish(const rollout::GenResult& g) {
    impl_->fins.emplace_back(static_cast<uint64_t>(g.id - kGatewayIdBase), fin_code(g.finish));
}

void GatewayWorker::flush() {
    Impl& m = *impl_;
    if (m.n_toks == 0 && m.fins.empty()) {
        m.sends.test();
        return;
    }
    wire::Writer o;
    o.put<uint64_t>(m.n_toks);
    o.raw(m.toks.bytes());
    o.put<uint64_t>(m.fins.size());
    for (auto& [rid, code] : m.fins) {
        o.put<uint64_t>(rid);
        o.put<uint8_t>(code);
    }
    m.sends.send(o.take(), m.gw, kTagGwTok, m.comm);
    m.toks.clear();
    m.n_toks = 0;
    m.fins.clear();
}

void GatewayWorker::finish_sends() { impl_->sends.wait(); }

}  // namespace tagflow::sched
