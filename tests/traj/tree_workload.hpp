// SPDX-License-Identifier: Apache-2.0
// tree_workload: a deterministic agentic request stream for the /tree tests: prompts sampled
// several times (test-time scaling), multi-turn continuations with tool tokens, memory
// rewrites (a prefix plus a summary), identical retries, retries at a newer version and
// requests that match nothing. Pure generator: keeps every request's full sequence, stores
// nothing in a tree itself.
#pragma once
#include <cstdint>
#include <random>
#include <vector>

#include "traj/trajectory_manager.hpp"

namespace tagflow::traj::test {

struct WorkRequest {
    std::vector<Token> in, out;
    std::vector<float> lp;
    std::vector<int32_t> ver;
    Request view(int32_t rank, double t) const;
    std::vector<Token> full() const;  // in + out
};

class Workload {
public:
    Workload(int rank, uint32_t seed);
    /// The requests of round `round` (policy version = round), about `n` of them.
    std::vector<WorkRequest> round(int round, int n);

private:
    WorkRequest make(std::vector<Token> in, int n_out, int32_t version);
    std::vector<Token> fresh(int n);
    std::mt19937 rng_;
    std::vector<WorkRequest> done_;
};

}  // namespace tagflow::traj::test
