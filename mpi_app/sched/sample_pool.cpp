// SPDX-License-Identifier: Apache-2.0
// sample_pool: see the header.
#include "sched/sample_pool.hpp"

#include <algorithm>
#include <limits>
#include <set>

#include "common/error.hpp"
#include "config/options.hpp"
#include "sched/sched_policy.hpp"

namespace tagflow::sched {

SamplePool::SamplePool(const config::Options& opt) : opt_(opt) {}

void SamplePool::mark_ready(int64_t group) {
    ready_.push_back(group);
    if (whole_) {
        int64_t lo = std::numeric_limits<int64_t>::max();
        for (const RolloutSample& r : pool_.at(group)) lo = std::min<int64_t>(lo, r.version);
        group_min_[group] = lo;
    }
    for (const RolloutSample& r : pool_.at(group)) ++ready_by_version_[key_of(r)];
}

int64_t SamplePool::key_of(const RolloutSample& r) const { return whole_ ? group_min_.at(r.group) : r.version; }

void SamplePool::unmark(const RolloutSample& r) {
    auto it = ready_by_version_.find(key_of(r));
    if (it == ready_by_version_.end() || it->second <= 0)
        throw InternalError("sample pool: ready counts out of step with group " + std::to_string(r.group));
    if (--it->second == 0) ready_by_version_.erase(it);
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

bool SamplePool::dropped_next(const std::vector<RolloutSample>& g, int64_t version, bool trainable_now) const {
    auto hit = [&](int64_t v) {
        return trainable_now ? sched_policy::last_chance(opt_, version, v)
                             : sched_policy::stale_weight(opt_, version + 1 - v) <= 0;
    };
    if (g.empty()) return false;
    if (whole_) {
        int64_t lo = std::numeric_limits<int64_t>::max();
        for (const RolloutSample& r : g) lo = std::min<int64_t>(lo, r.version);
        return hit(lo);
    }
    for (const RolloutSample& r : g)
        if (hit(r.version)) return true;
    return false;
}

template <class F>
void SamplePool::each_partial(F&& f) const {
    // Not by size: a gateway group is ready below group_size.
    const std::set<int64_t> ready(ready_.begin(), ready_.end());
    for (const auto& [g, v] : pool_)
        if (!ready.count(g)) f(v);
}

int64_t SamplePool::late_groups(int64_t version) const {
    int64_t n = 0;
    each_partial([&](const std::vector<RolloutSample>& v) { n += dropped_next(v, version, true); });
    return n;
}

PoolBatch SamplePool::take_batch(int64_t threshold, int64_t version) {
    PoolBatch b;
    // Groups the next step would drop go first: those on their last chance (e.g. completed late,
    // held back by one long response, behind younger ones that can wait a step) and those already
    // too stale (dropped now, at no cost to the threshold); each part in completion order.
    std::stable_partition(ready_.begin(), ready_.end(),
                          [&](int64_t g) { return dropped_next(pool_.at(g), version, false); });
    while (!ready_.empty() && static_cast<int64_t>(b.samples.size()) < threshold) {
        const int64_t g = ready_.front();
        ready_.pop_front();
        b.groups.push_back(g);
        auto node = pool_.extract(g);
        // whole_: the group goes (or stays) with its oldest sample.
        const bool drop_all = whole_ && sched_policy::stale_weight(opt_, version - group_min_.at(g)) <= 0;
        size_t kept = 0;
        for (RolloutSample& r : node.mapped()) {
            unmark(r);
            const int64_t a = version - r.version;
            const double w = drop_all ? 0.0 : sched_policy::stale_weight(opt_, a);
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
            ++kept;
        }
        if (kept == 0) b.dropped_groups.push_back(g);
        group_min_.erase(g);
    }
    std::sort(b.samples.begin(), b.samples.end(), [](const auto& x, const auto& y) { return x.id < y.id; });
    return b;
}

std::vector<int64_t> SamplePool::take_stale(int64_t version, std::vector<int64_t>& ids) {
    std::vector<int64_t> out;
    for (auto it = ready_.begin(); it != ready_.end();) {
        const int64_t g = *it;
        const std::vector<RolloutSample>& v = pool_.at(g);
        int64_t lo = std::numeric_limits<int64_t>::max();
        for (const RolloutSample& r : v) lo = std::min<int64_t>(lo, r.version);
        // Whole groups: the oldest sample decides; else a group none of whose samples can train.
        int64_t hi = std::numeric_limits<int64_t>::min();
        for (const RolloutSample& r : v) hi = std::max<int64_t>(hi, r.version);
        if (sched_policy::stale_weight(opt_, version - (whole_ ? lo : hi)) > 0) {
            ++it;
            continue;
        }
        for (const RolloutSample& r : v) {
            unmark(r);
            ids.push_back(r.id);
        }
        pool_.erase(g);
        group_min_.erase(g);
        out.push_back(g);
        it = ready_.erase(it);
    }
    return out;
}

int64_t SamplePool::partial_groups() const {
    int64_t n = 0;
    each_partial([&](const std::vector<RolloutSample>&) { ++n; });
    return n;
}

int64_t SamplePool::partial_samples() const {
    int64_t n = 0;
    each_partial([&](const std::vector<RolloutSample>& v) { n += static_cast<int64_t>(v.size()); });
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
