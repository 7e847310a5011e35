// SPDX-License-Identifier: Apache-2.0
// sample_pool: see the header.
#include "sched/sample_pool.hpp"

#include <algorithm>

#include "common/error.hpp"
#include "config/options.hpp"
#include "sched/sched_policy.hpp"

namespace tagflow::sched {

SamplePool::SamplePool(const config::Options& opt) : opt_(opt) {}

void SamplePool::mark_ready(int64_t group) {
    ready_.push_back(group);
    for (const RolloutSample& r : pool_.at(group)) ++ready_by_version_[r.version];
}

void SamplePool::add(RolloutSample s) {
    const int64_t g = s.group;
    auto& v = pool_[g];
    v.push_back(std::move(s));
    if (static_cast<int64_t>(v.size()) == opt_.group_size) mark_ready(g);
}

void SamplePool::add_group(std::vector<RolloutSample> g) {
    if (g.empty()) return;
    const int64_t id = g.front().group;
    pool_[id] = std::move(g);
    mark_ready(id);
}

int64_t SamplePool::usable(int64_t version) const {
    int64_t n = 0;
    for (const auto& [v, k] : ready_by_version_)
        if (sched_policy::stale_weight(opt_, version - v) > 0) n += k;
    return n;
}

PoolBatch SamplePool::take_batch(int64_t threshold, int64_t version) {
    PoolBatch b;
    while (!ready_.empty() && static_cast<int64_t>(b.samples.size()) < threshold) {
        const int64_t g = ready_.front();
        ready_.pop_front();
        b.groups.push_back(g);
        auto node = pool_.extract(g);
        for (RolloutSample& r : node.mapped()) {
            auto it = ready_by_version_.find(r.version);
            if (it == ready_by_version_.end() || it->second <= 0)
                throw InternalError("sample pool: ready counts out of step with group " + std::to_string(g));
            if (--it->second == 0) ready_by_version_.erase(it);
            const int64_t a = version - r.version;
            const double w = sched_policy::stale_weight(opt_, a);
            if (w <= 0) {
                b.dropped_ids.push_back(r.id);
                continue;
            }
            if (w < 1) {
                r.weight = static_cast<float>(w);
                ++b.weighted;
            }
            b.age_sum += static_cast<double>(a);
            b.age_max = std::max(b.age_max, a);
            b.samples.push_back(std::move(r));
        }
    }
    std::sort(b.samples.begin(), b.samples.end(), [](const auto& x, const auto& y) { return x.id < y.id; });
    return b;
}

int64_t SamplePool::partial_groups() const {
    int64_t n = 0;
    for (const auto& [g, v] : pool_)
        if (static_cast<int64_t>(v.size()) < opt_.group_size) ++n;
    return n;
}

void SamplePool::restore(std::vector<RolloutSample> samples, const std::vector<int64_t>& ready) {
    if (!pool_.empty() || !ready_.empty()) throw InternalError("sample pool: restore into a non-empty pool");
    for (RolloutSample& r : samples) {
        const int64_t g = r.group;
        pool_[g].push_back(std::move(r));
    }
    for (int64_t g : ready) {
        if (!pool_.count(g)) throw InternalError("sample pool: ready group " + std::to_string(g) + " holds no sample");
        mark_ready(g);
    }
}

}  // namespace tagflow::sched
