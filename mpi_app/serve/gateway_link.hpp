// SPDX-License-Identifier: Apache-2.0
// gateway_link: what the gateway's three parts (serve/gateway_router.hpp: router, worker,
// recorder) share on the wire besides step/wire.hpp's byte format: non-blocking sends that keep
// their buffers until they complete, a receive that never waits, the request kinds and finish
// codes of their messages, a gateway request as an engine request, and the records the router
// sends the recorder. Internal to the serve/gateway_*.cpp files (and the recorder's unit test).
// Does not route, record or serve HTTP.
#pragma once
#include <mpi.h>

#include <cstdint>
#include <list>
#include <string>
#include <vector>

#include "gateway/backend.hpp"
#include "rollout/engine.hpp"
#include "traj/trajectory_manager.hpp"

namespace tagflow::sched::gw {

struct Sending {
    MPI_Request req = MPI_REQUEST_NULL;
    std::vector<char> buf;
};
// Non-blocking sends whose buffers live until they complete.
struct Sends {
    std::list<Sending> l;
    void send(std::vector<char> b, int dest, int tag, MPI_Comm comm);
    void test();
    void wait();  ///< test-and-sleep until every send completed
};

// Receives one message of `tag` from `src` (MPI_ANY_SOURCE allowed) if one has arrived.
bool try_recv(MPI_Comm comm, int src, int tag, std::vector<char>& b, int* from = nullptr);

// Finish codes on the wire: the FinishReason's value.
inline constexpr uint8_t fin_code(FinishReason r) { return static_cast<uint8_t>(r); }
inline constexpr uint8_t kFinStop = fin_code(FinishReason::kStop), kFinLength = fin_code(FinishReason::kLength),
                         kFinError = fin_code(FinishReason::kError), kFinCancelled = fin_code(FinishReason::kCancelled);
// kTagGwReq kinds.
inline constexpr uint8_t kReqGenerate = 0, kReqCancel = 1;

// A gateway request as an engine request (id kGatewayIdBase + request id).
rollout::GenRequest to_gen(const gateway::CompletionRequest& q);

// kTagGwRec records, gateway rank -> the coordinator's GatewayRecorder::ingest. Kind 1: a
// finished request at token level (`finish`: a finish code above); kind 2: a reward, which
// the router sends after the records of the requests it rewards.
std::vector<char> request_record(const std::string& session, const std::string& completion_id, const traj::Request& r,
                                 uint8_t finish);
std::vector<char> reward_record(const gateway::RewardReport& r, double now);

}  // namespace tagflow::sched::gw
