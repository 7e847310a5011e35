// SPDX-License-Identifier: Apache-2.0
// tree_workload: the request mix of tree_workload.hpp.
#include "tree_workload.hpp"

namespace tagflow::traj::test {

Request WorkRequest::view(int32_t rank, double t) const {
    Request r;
    r.input = in;
    r.output = out;
    r.logprobs = lp;
    r.versions = ver;
    r.rank = rank;
    r.t_start = t;
    r.t_end = t + 0.5;
    return r;
}

std::vector<Token> WorkRequest::full() const {
    std::vector<Token> v = in;
    v.insert(v.end(), out.begin(), out.end());
    return v;
}

Workload::Workload(int rank, uint32_t seed) : rng_(seed + 7919u * static_cast<uint32_t>(rank)) {}

std::vector<Token> Workload::fresh(int n) {
    std::vector<Token> v;
    for (int i = 0; i < n; ++i) v.push_back(static_cast<Token>(rng_() % 50000));
    return v;
}

WorkRequest Workload::make(std::vector<Token> in, int n_out, int32_t version) {
    WorkRequest r;
    r.in = std::move(in);
    r.out = fresh(n_out);
    for (int i = 0; i < n_out; ++i) {
        r.lp.push_back(-static_cast<float>(rng_() % 1000) / 250.f);
        r.ver.push_back(version);
    }
    return r;
}

std::vector<WorkRequest> Workload::round(int round, int n) {
    std::vector<WorkRequest> out;
    auto pick = [&]() -> const WorkRequest& { return done_[rng_() % done_.size()]; };
    while (static_cast<int>(out.size()) < n) {
        const unsigned kind = done_.empty() ? 0 : rng_() % 10;
        if (kind <= 1) {  // a new prompt, sampled 4 times (a GRPO group / test-time scaling)
            std::vector<Token> prompt = fresh(40 + static_cast<int>(rng_() % 20));
            prompt[0] = 1;  // a shared BOS token
            for (int g = 0; g < 4; ++g) out.push_back(make(prompt, 20 + static_cast<int>(rng_() % 20), round));
        } else if (kind <= 5) {  // next turn: the whole earlier sequence + tool output
            std::vector<Token> in = pick().full();
            std::vector<Token> tool = fresh(5 + static_cast<int>(rng_() % 5));
            in.insert(in.end(), tool.begin(), tool.end());
            out.push_back(make(std::move(in), 10 + static_cast<int>(rng_() % 10), round));
        } else if (kind == 6) {  // memory rewrite: a prefix of a trajectory, then a summary
            std::vector<Token> in = pick().full();
            in.resize(1 + rng_() % in.size());
            std::vector<Token> summary = fresh(8);
            in.insert(in.end(), summary.begin(), summary.end());
            out.push_back(make(std::move(in), 12, round));
        } else if (kind == 7) {  // identical retry
            out.push_back(pick());
        } else if (kind == 8) {  // retry of the same tokens at this round's version
            WorkRequest r = pick();
            for (int32_t& v : r.ver) v = round;
            out.push_back(std::move(r));
        } else {  // unrelated: matches nothing (no BOS)
            std::vector<Token> in = fresh(30);
            in[0] = 100000 + static_cast<Token>(done_.size());  // a first token nobody used
            out.push_back(make(std::move(in), 15, round));
        }
        done_.insert(done_.end(), out.end() - (kind <= 1 ? 4 : 1), out.end());
    }
    return out;
}

}  // namespace tagflow::traj::test
