// SPDX-License-Identifier: Apache-2.0
// policy: see the header. Moved verbatim from async_scheduler.cpp (issue 6, the simulator).
#include "sched/policy.hpp"

#include <algorithm>
#include <cmath>

#include "cluster/tags.hpp"
#include "common/error.hpp"

namespace tagflow::sched::policy {

std::vector<int> tagged_train(const std::vector<uint32_t>& all_tags) {
    std::vector<int> t;
    for (size_t r = 0; r < all_tags.size(); ++r)
        if (all_tags[r] & cluster::kTrain) t.push_back(static_cast<int>(r));
    return t;
}

int coordinator(const std::vector<uint32_t>& all_tags) {
    const std::vector<int> t = tagged_train(all_tags);
    return t.empty() ? -1 : t.front();
}

std::vector<int> train_group(const config::Options& opt, const std::vector<uint32_t>& all_tags) {
    std::vector<int> t = tagged_train(all_tags);
    if (opt.mode != "multiplex") return t;
    const int n = static_cast<int>(all_tags.size());
    const int need = static_cast<int>(std::ceil(opt.min_rollout_frac * n - 1e-9));
    int staying = 0;  // ranks tagged rollout and not train
    for (int r = 0; r < n; ++r)
        if ((all_tags[static_cast<size_t>(r)] & cluster::kRollout) && !(all_tags[static_cast<size_t>(r)] & cluster::kTrain))
            ++staying;
    // Keep the highest multi-tag ranks (never the coordinator) in rollout until enough stay.
    for (int k = static_cast<int>(t.size()) - 1; k >= 1 && staying < need; --k)
        if (all_tags[static_cast<size_t>(t[static_cast<size_t>(k)])] & cluster::kRollout) {
            t.erase(t.begin() + k);
            ++staying;
        }
    return t;
}

void check_roles(const config::Options& opt, const std::vector<uint32_t>& all_tags) {
    if (opt.mode == "sync") return;
    const bool critic_colocated =
        std::none_of(all_tags.begin(), all_tags.end(), [](uint32_t b) { return (b & cluster::kCritic) != 0; });
    if (!critic_colocated)
        throw ConfigError("--mode " + opt.mode + ": ranks tagged critic are supported in sync mode only "
                          "(the async modes keep the critic on the train group)");
    const std::vector<int> t = train_group(opt, all_tags);
    const int n = static_cast<int>(all_tags.size());
    int outside = 0;
    for (int r = 0; r < n; ++r)
        if ((all_tags[static_cast<size_t>(r)] & cluster::kRollout) && !std::count(t.begin(), t.end(), r)) ++outside;
    if (opt.mode == "disaggregated" && outside == 0)
        throw ConfigError("--mode disaggregated: every rank tagged rollout is also tagged train; the mode needs at "
                          "least one rank that only rolls out (e.g. --rank-tags \"0=rollout;1=rollout,train\")");
    if (opt.mode == "multiplex") {
        const int need = static_cast<int>(std::ceil(opt.min_rollout_frac * n - 1e-9));
        if (outside < need)
            throw ConfigError("--min-rollout-frac " + std::to_string(opt.min_rollout_frac) + ": needs " +
                              std::to_string(need) + " rank(s) that never leave rollout, but only " +
                              std::to_string(outside) + " rank(s) besides the coordinator (rank " +
                              std::to_string(coordinator(all_tags)) + ") can stay there");
    }
}

int64_t train_threshold(const config::Options& opt) {
    return opt.train_threshold > 0 ? opt.train_threshold : static_cast<int64_t>(opt.prompts_per_step) * opt.group_size;
}

double stale_weight(const config::Options& opt, int64_t age) {
    if (age <= opt.staleness) return 1.0;
    if (opt.stale == "drop") return 0.0;
    const double w = static_cast<double>(opt.staleness + 1) / static_cast<double>(age + 1);
    return w < kMinStaleWeight ? 0.0 : w;
}

}  // namespace tagflow::sched::policy
