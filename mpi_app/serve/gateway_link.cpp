// SPDX-License-Identifier: Apache-2.0
// gateway_link: see the header.
#include "serve/gateway_link.hpp"

#include <chrono>
#include <thread>

#include "common/error.hpp"
#include "common/mpi_env.hpp"
#include "serve/gateway_router.hpp"
#include "step/wire.hpp"

namespace tagflow::sched::gw {

void Sends::send(std::vector<char> b, int dest, int tag, MPI_Comm comm) {
    test();
    l.push_back({MPI_REQUEST_NULL, std::move(b)});
    Sending& s = l.back();
    TAGFLOW_MPI_CHECK(MPI_Isend(s.buf.data(), static_cast<int>(s.buf.size()), MPI_CHAR, dest, tag, comm, &s.req));
}

void Sends::test() {
    for (auto it = l.begin(); it != l.end();) {
        int done = 0;
        TAGFLOW_MPI_CHECK(MPI_Test(&it->req, &done, MPI_STATUS_IGNORE));
        it = done ? l.erase(it) : std::next(it);
    }
}

void Sends::wait() {
    while (!l.empty()) {
        test();
        if (!l.empty()) std::this_thread::sleep_for(std::chrono::microseconds(300));
    }
}

// Receives one message of `tag` from `src` (MPI_ANY_SOURCE allowed) if one has arrived.
bool try_recv(MPI_Comm comm, int src, int tag, std::vector<char>& b, int* from) {
    int flag = 0;
    MPI_Status st;
    TAGFLOW_MPI_CHECK(MPI_Iprobe(src, tag, comm, &flag, &st));
    if (!flag) return false;
    int count = 0;
    TAGFLOW_MPI_CHECK(MPI_Get_count(&st, MPI_CHAR, &count));
    b.resize(static_cast<size_t>(count));
    TAGFLOW_MPI_CHECK(MPI_Recv(b.data(), count, MPI_CHAR, st.MPI_SOURCE, tag, comm, MPI_STATUS_IGNORE));
    if (from) *from = st.MPI_SOURCE;
    return true;
}

rollout::GenRequest to_gen(const gateway::CompletionRequest& q) {
    rollout::GenRequest g;
    g.id = kGatewayIdBase + static_cast<int64_t>(q.request_id);
    g.prompt = q.prompt_ids;
    g.params.temperature = q.temperature;
    g.params.top_p = q.top_p;
    g.params.top_k = q.top_k;
    g.params.max_tokens = q.max_tokens;
    g.params.stop_ids = q.stop_ids;
    g.params.seed = q.seed;
    return g;
}

namespace {
template <class T>
void put_span(wire::Writer& o, traj::Span<T> v) {  // as Writer::vec: a count, then the elements
    o.put<uint64_t>(v.size());
    o.raw(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}
}  // namespace

std::vector<char> request_record(const std::string& session, const std::string& completion_id, const traj::Request& r,
                                 uint8_t finish) {
    wire::Writer o;
    o.put<uint8_t>(1);
    o.str(session);
    o.str(completion_id);
    o.put<int32_t>(r.rank);
    o.put<double>(r.t_start);
    o.put<double>(r.t_end);
    o.put<uint8_t>(finish);
    put_span(o, r.input);
    put_span(o, r.output);
    put_span(o, r.logprobs);
    put_span(o, r.versions);
    return o.take();
}

std::vector<char> reward_record(const gateway::RewardReport& r, double now) {
    wire::Writer o;
    o.put<uint8_t>(2);
    o.str(r.session);
    o.str(r.completion_id);
    o.str(r.group);
    o.put<double>(r.reward);
    o.put<double>(now);
    return o.take();
}

}  // namespace tagflow::sched::gw
