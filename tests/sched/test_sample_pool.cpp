// SPDX-License-Identifier: Apache-2.0
// test_sample_pool: the async coordinator's pool (sched/sample_pool.hpp) on hand-built samples:
// a group is trainable only when complete, batches take ready groups in completion order up to
// the threshold (whole groups; those the next step would drop first), staleness drops or weights
// by the oldest token's version, incomplete groups on their last chance are late (--late-wait),
// and a checkpointed pool restores to the same batches; and the admission budget
// (sched_policy::admission_budget). Expected values are worked out by hand here.
#include <gtest/gtest.h>

#include <deque>
#include <vector>

#include "common/error.hpp"
#include "config/options.hpp"
#include "sched/sample_pool.hpp"
#include "sched/sched_policy.hpp"

using tagflow::config::Options;
using tagflow::sched::PoolBatch;
using tagflow::sched::RolloutSample;
using tagflow::sched::SamplePool;

namespace {

RolloutSample sample(int64_t group, int k, int32_t version, int G = 4) {
    RolloutSample s;
    s.id = group * G + k;
    s.group = group;
    s.version = version;
    return s;
}

void add_group(SamplePool& p, int64_t group, int32_t version, int G = 4) {
    for (int k = 0; k < G; ++k) p.add(sample(group, k, version, G));
}

std::vector<int64_t> ids(const PoolBatch& b) {
    std::vector<int64_t> v;
    for (const auto& s : b.samples) v.push_back(s.id);
    return v;
}

Options opts(int32_t staleness, const char* stale) {
    Options o;
    o.group_size = 4;
    o.staleness = staleness;
    o.stale = stale;
    return o;
}

}  // namespace

TEST(SamplePool, GroupReadyOnlyWhenComplete) {
    const Options o = opts(1, "drop");
    SamplePool p(o);
    for (int k = 0; k < 3; ++k) p.add(sample(5, k, 0));
    EXPECT_EQ(p.usable(0), 0);
    EXPECT_TRUE(p.ready().empty());
    EXPECT_EQ(p.partial_groups(), 1);
    EXPECT_TRUE(p.take_batch(1, 0).samples.empty());  // nothing ready: nothing taken
    EXPECT_EQ(p.groups().at(5).size(), 3u);
    p.add(sample(5, 3, 0));
    EXPECT_EQ(p.usable(0), 4);
    EXPECT_EQ(p.partial_groups(), 0);
    ASSERT_EQ(p.ready().size(), 1u);
    EXPECT_EQ(p.ready().front(), 5);
}

TEST(SamplePool, BatchTakesWholeGroupsInCompletionOrder) {
    const Options o = opts(1, "drop");
    SamplePool p(o);
    // Completion order 7, 2, 9 (not group order); samples of group 2 arrive out of id order.
    add_group(p, 7, 0);
    for (int k : {3, 1, 0, 2}) p.add(sample(2, k, 0));
    add_group(p, 9, 0);
    EXPECT_EQ(p.usable(0), 12);
    // Threshold 5: group 7 (4 samples) is not enough, group 2 is taken whole (8 > 5), 9 stays.
    PoolBatch b = p.take_batch(5, 0);
    EXPECT_EQ(b.groups, (std::vector<int64_t>{7, 2}));
    EXPECT_EQ(ids(b), (std::vector<int64_t>{8, 9, 10, 11, 28, 29, 30, 31}));  // sorted by id
    EXPECT_TRUE(b.dropped_ids.empty());
    EXPECT_EQ(b.weighted, 0);
    EXPECT_EQ(b.age_sum, 0.0);
    EXPECT_EQ(p.usable(0), 4);
    EXPECT_EQ(p.groups().size(), 1u);
    EXPECT_EQ(p.take_batch(100, 0).groups, (std::vector<int64_t>{9}));
    EXPECT_TRUE(p.groups().empty());
}

// A group the next step would drop goes before younger ones that can wait a step, even when it
// completed after them (held back by a long response); the rest keep their completion order.
TEST(SamplePool, BatchTakesLastChanceGroupsFirst) {
    const Options o = opts(1, "drop");  // at version 2, age 1 trains now and is dropped by the next step
    SamplePool p(o);
    add_group(p, 4, 2);  // completion order: 4 (fresh), 5 (fresh), 3 (version 1: last chance), 6 (fresh)
    add_group(p, 5, 2);
    add_group(p, 3, 1);
    add_group(p, 6, 2);
    PoolBatch b = p.take_batch(8, 2);
    EXPECT_EQ(b.groups, (std::vector<int64_t>{3, 4}));
    EXPECT_TRUE(b.dropped_ids.empty());
    EXPECT_EQ(b.age_sum, 4.0);  // group 3's four samples, age 1 each
    EXPECT_EQ(p.ready(), (std::deque<int64_t>{5, 6}));
    // --stale weight: a group loses weight every step but is only "last chance" when the next
    // step weighs it 0 (age 1 -> weight 1; ages 2..: (1+1)/(age+1), 0 below kMinStaleWeight).
    const Options w = opts(1, "weight");
    SamplePool q(w);
    add_group(q, 0, 2);
    add_group(q, 1, 1);
    EXPECT_EQ(q.take_batch(4, 2).groups, (std::vector<int64_t>{0}));
}

// An incomplete group is late when a step now could still train it and the next would drop it:
// the coordinator may hold the step for it. Complete groups and groups already too stale are not.
TEST(SamplePool, LateGroupsAreIncompleteAndOnTheirLastChance) {
    const Options o = opts(1, "drop");
    SamplePool p(o);
    for (int k = 0; k < 3; ++k) p.add(sample(0, k, 1));  // incomplete, version 1
    for (int k = 0; k < 2; ++k) p.add(sample(1, k, 2));  // incomplete, version 2 (can wait)
    for (int k = 0; k < 2; ++k) p.add(sample(2, k, 0));  // incomplete, version 0 (too stale already)
    add_group(p, 3, 1);                                  // complete, last chance: not late
    EXPECT_EQ(p.late_groups(2), 1);                      // group 0
    EXPECT_EQ(p.late_groups(1), 1);                      // group 2 (age 1 at version 1)
    EXPECT_EQ(p.late_groups(3), 1);                      // group 1
    p.add(sample(0, 3, 1));
    EXPECT_EQ(p.late_groups(2), 0);
    EXPECT_EQ(p.take_batch(1, 2).groups, (std::vector<int64_t>{3}));  // completion order among equals
}

// Partial groups are the ones not ready yet, not those below --group-size: a gateway group
// (add_group) is ready at any size. Admission counts their samples as outstanding.
TEST(SamplePool, PartialGroupsAreTheOnesNotReady) {
    const Options o = opts(1, "drop");  // groups of 4
    SamplePool p(o);
    for (int k = 0; k < 3; ++k) p.add(sample(0, k, 1));  // 3 of 4
    p.add(sample(1, 0, 1));                              // 1 of 4
    add_group(p, 2, 1);                                  // complete
    std::vector<RolloutSample> gw{sample(3, 0, 1), sample(3, 1, 1)};
    p.add_group(gw);  // a gateway group of 2: ready
    EXPECT_EQ(p.partial_groups(), 2);
    EXPECT_EQ(p.partial_samples(), 4);
    EXPECT_EQ(p.usable(1), 6);
    p.add(sample(1, 1, 1));
    p.add(sample(1, 2, 1));
    p.add(sample(1, 3, 1));  // group 1 completes
    EXPECT_EQ(p.partial_groups(), 1);
    EXPECT_EQ(p.partial_samples(), 3);
}

// --late-wait: a met threshold waits for late groups for at most their share of the batch (or one
// member's share of a small train group, if larger), and at most the fraction, of the measured
// cycle; never with nothing late, a fraction of 0, or no cycle measured yet.
TEST(SamplePool, LateWaitIsBoundedByTheMeasuredCycle) {
    using tagflow::sched::sched_policy::last_chance;
    using tagflow::sched::sched_policy::late_wait_s;
    using tagflow::sched::sched_policy::next_cycle;
    Options o = opts(1, "drop");  // groups of 4
    o.late_wait = 0.5;
    EXPECT_DOUBLE_EQ(late_wait_s(o, 1, 16, 2.0, 0), 0.5);  // one group of 4 is a quarter of the batch: 0.25 x 2 s
    EXPECT_DOUBLE_EQ(late_wait_s(o, 3, 16, 2.0, 0), 1.0);  // three groups, 3/4, capped at 0.5 x 2 s
    EXPECT_DOUBLE_EQ(late_wait_s(o, 0, 16, 2.0, 2), 0.0);  // nothing late
    EXPECT_DOUBLE_EQ(late_wait_s(o, 1, 16, 0.0, 2), 0.0);  // no cycle measured yet (the first step)
    // A small train group: one member's share (1/2, 1/3) when it is more than the groups' share.
    EXPECT_DOUBLE_EQ(late_wait_s(o, 1, 16, 2.0, 2), 1.0);  // max(1/4, 1/2) = 1/2 x 2 s
    EXPECT_DOUBLE_EQ(late_wait_s(o, 1, 16, 3.0, 3), 1.0);  // max(1/4, 1/3) x 3 s
    EXPECT_DOUBLE_EQ(late_wait_s(o, 1, 16, 2.0, 8), 0.5);  // max(1/4, 1/8): the groups' share decides
    EXPECT_DOUBLE_EQ(late_wait_s(o, 1, 16, 2.0, 1), 1.0);  // one trainer: capped at --late-wait 0.5
    o.late_wait = 0;
    EXPECT_DOUBLE_EQ(late_wait_s(o, 1, 16, 2.0, 1), 0.0);
    // The cycle leaves the wait out, so waiting does not lengthen the next wait: 3 s since the last
    // step's start, 1 s of them waited, is a 2 s cycle; then 0.7 x 2 + 0.3 x 4 = 2.6.
    EXPECT_DOUBLE_EQ(next_cycle(0, 3.0, 1.0), 2.0);
    EXPECT_DOUBLE_EQ(next_cycle(2.0, 4.0, 0.0), 2.6);
    // Last chance at version 5 with --staleness 1: version 4 (age 1 now, 2 next); not 5 (can wait),
    // not 3 (too stale already). --stale weight: only the step that weighs it 0 counts (age 8 -> 2/9).
    EXPECT_TRUE(last_chance(o, 5, 4));
    EXPECT_FALSE(last_chance(o, 5, 5));
    EXPECT_FALSE(last_chance(o, 5, 3));
    const Options w = opts(1, "weight");
    EXPECT_FALSE(last_chance(w, 5, 4));
    EXPECT_TRUE(last_chance(w, 8, 1));
}

TEST(SamplePool, StaleDropCountsEachSampleByItsVersion) {
    const Options o = opts(1, "drop");  // age <= 1 trains with weight 1, older is dropped
    SamplePool p(o);
    p.add(sample(0, 0, 3));
    p.add(sample(0, 1, 1));  // age 2 at version 3: dropped
    p.add(sample(0, 2, 2));
    p.add(sample(0, 3, 0));  // age 3: dropped
    add_group(p, 1, 1);      // age 2: the whole group dropped
    EXPECT_EQ(p.usable(3), 2);
    EXPECT_EQ(p.usable(2), 7);  // at version 2 only the version-0 sample is too old
    PoolBatch b = p.take_batch(100, 3);
    EXPECT_EQ(ids(b), (std::vector<int64_t>{0, 2}));
    EXPECT_EQ(b.dropped_ids, (std::vector<int64_t>{1, 3, 4, 5, 6, 7}));
    EXPECT_EQ(b.age_sum, 0.0 + 1.0);
    EXPECT_EQ(b.age_max, 1);
    EXPECT_EQ(b.weighted, 0);
    for (const auto& s : b.samples) EXPECT_EQ(s.weight, 1.f);
}

// --data: a group trains with all of its samples or is dropped whole (its row is then requeued).
TEST(SamplePool, WholeGroupsGoWithTheirOldestSample) {
    const Options o = opts(1, "drop");
    SamplePool p(o);
    p.set_whole_groups(true);
    p.add(sample(0, 0, 3));
    p.add(sample(0, 1, 1));  // age 2 at version 3: the whole group is too stale
    p.add(sample(0, 2, 3));
    p.add(sample(0, 3, 3));
    add_group(p, 1, 3);         // fresh
    add_group(p, 2, 1);         // too stale
    add_group(p, 3, 2);         // age 1: fine
    EXPECT_EQ(p.usable(3), 8);  // groups 1 and 3, counted by their oldest sample
    // Groups the next step would drop first: 0 and 2 (too stale, dropped whole) and 3 (its last
    // chance: age 2 at version 4), in completion order; group 1 (fresh) waits.
    PoolBatch b = p.take_batch(4, 3);
    EXPECT_EQ(b.groups, (std::vector<int64_t>{0, 2, 3}));
    EXPECT_EQ(b.dropped_groups, (std::vector<int64_t>{0, 2}));
    EXPECT_EQ(b.dropped_ids.size(), 8u);
    EXPECT_EQ(b.samples.size(), 4u);
    EXPECT_EQ(b.age_max, 1);
    std::vector<int64_t> ids;
    EXPECT_EQ(p.take_stale(3, ids), (std::vector<int64_t>{}));
    EXPECT_EQ(p.usable(3), 4);
    EXPECT_EQ(p.take_stale(4, ids), (std::vector<int64_t>{}));   // group 1: age 1 at version 4
    EXPECT_EQ(p.take_stale(5, ids), (std::vector<int64_t>{1}));  // age 2 at version 5: leaves at once
    EXPECT_EQ(ids.size(), 4u);
    EXPECT_EQ(p.usable(5), 0);
    EXPECT_TRUE(p.groups().empty());
}

TEST(SamplePool, StaleWeightDecaysThenDrops) {
    const Options o = opts(1, "weight");  // age a > 1: weight 2/(a+1), dropped below 0.25
    SamplePool p(o);
    p.add(sample(0, 0, 10));  // age 0: 1
    p.add(sample(0, 1, 8));   // age 2: 2/3
    p.add(sample(0, 2, 7));   // age 3: 1/2
    p.add(sample(0, 3, 0));   // age 10: 2/11 < 0.25, dropped
    EXPECT_EQ(p.usable(10), 3);
    PoolBatch b = p.take_batch(1, 10);
    ASSERT_EQ(b.samples.size(), 3u);
    EXPECT_FLOAT_EQ(b.samples[0].weight, 1.f);
    EXPECT_FLOAT_EQ(b.samples[1].weight, 2.f / 3.f);
    EXPECT_FLOAT_EQ(b.samples[2].weight, 0.5f);
    EXPECT_EQ(b.weighted, 2);
    EXPECT_EQ(b.dropped_ids, (std::vector<int64_t>{3}));
    EXPECT_EQ(b.age_sum, 0.0 + 2.0 + 3.0);
    EXPECT_EQ(b.age_max, 3);
}

TEST(SamplePool, WholeGroupAtOnceIsReadyWhateverItsSize) {
    const Options o = opts(1, "drop");
    SamplePool p(o);
    p.add_group({});  // ignored
    EXPECT_TRUE(p.groups().empty());
    p.add_group({sample(40, 0, 0), sample(40, 1, 0)});  // 2 of group_size 4: ready anyway
    EXPECT_EQ(p.usable(0), 2);
    EXPECT_EQ(p.partial_groups(), 0);  // partial = not ready, not below group_size
    EXPECT_EQ(ids(p.take_batch(1, 0)), (std::vector<int64_t>{160, 161}));
}

TEST(SamplePool, RestoreGivesTheSameBatches) {
    const Options o = opts(1, "weight");
    SamplePool a(o);
    add_group(a, 3, 0);
    add_group(a, 1, 1);
    a.add(sample(6, 0, 2));  // partial
    std::vector<RolloutSample> saved;
    for (const auto& [g, v] : a.groups()) saved.insert(saved.end(), v.begin(), v.end());
    const std::vector<int64_t> ready(a.ready().begin(), a.ready().end());
    EXPECT_EQ(ready, (std::vector<int64_t>{3, 1}));

    SamplePool b(o);
    b.restore(saved, ready);
    EXPECT_EQ(b.usable(2), a.usable(2));
    EXPECT_EQ(b.partial_groups(), 1);
    const PoolBatch x = a.take_batch(4, 2), y = b.take_batch(4, 2);
    EXPECT_EQ(ids(x), ids(y));
    EXPECT_EQ(x.groups, (std::vector<int64_t>{3}));
    EXPECT_EQ(y.groups, (std::vector<int64_t>{3}));
    EXPECT_EQ(y.weighted, 4);                                       // age 2: weight 2/3
    EXPECT_THROW(b.restore(saved, ready), tagflow::InternalError);  // only into an empty pool
    SamplePool c(o);
    EXPECT_THROW(c.restore({}, {8}), tagflow::InternalError);  // a ready group with no sample
}

// --admission staleness (sched_policy::admission_budget): (eta+1) x the measured rate, never below
// the threshold rounded up to whole groups; 0 (no bound) with --admission off or in sync.
TEST(Admission, BudgetIsStalenessPlusOneRatesOfSamples) {
    Options o = opts(1, "drop");
    o.mode = tagflow::config::Mode::kMultiplex;
    o.group_size = 4;
    EXPECT_EQ(tagflow::sched::sched_policy::admission_budget(o, 8.0, 8), 16);   // 2 x 8
    EXPECT_EQ(tagflow::sched::sched_policy::admission_budget(o, 12.0, 8), 24);  // the measured rate, not the threshold
    EXPECT_EQ(tagflow::sched::sched_policy::admission_budget(o, 0.0, 8), 16);   // before the first step: the threshold
    o.staleness = 0;
    EXPECT_EQ(tagflow::sched::sched_policy::admission_budget(o, 8.0, 10), 12);  // a step must fill: 3 whole groups
    o.staleness = 3;
    EXPECT_EQ(tagflow::sched::sched_policy::admission_budget(o, 9.5, 8), 38);
    o.admission = "off";
    EXPECT_EQ(tagflow::sched::sched_policy::admission_budget(o, 8.0, 8), 0);
    o.admission = "staleness";
    o.mode = tagflow::config::Mode::kSync;
    EXPECT_EQ(tagflow::sched::sched_policy::admission_budget(o, 8.0, 8), 0);
}

// The grants themselves (sched_policy::grant_groups, called by the async scheduler and by the
// simulator): one group at a time to the generator with the fewest samples granted and not yet
// delivered, while the outstanding samples stay within the budget and the generator within its cap.
TEST(Admission, GrantGroupsFillsTheBudgetLeastLoadedFirst) {
    using tagflow::sched::sched_policy::grant_groups;
    const std::vector<int64_t> open{100, 100};
    // G 4, budget 24, 4 outstanding: 5 groups fit (4 + 5 x 4 = 24). Loads 0, 0: alternate, first on a tie.
    std::vector<int64_t> granted{0, 0}, arrived{0, 0};
    EXPECT_EQ(grant_groups(granted, arrived, 4, 24, 4, open), 24);
    EXPECT_EQ(granted, (std::vector<int64_t>{3, 2}));
    // Generator 1 delivered its 8 samples: its load is 0, generator 0's 12; 8 more fit, both to 1.
    arrived = {0, 8};
    EXPECT_EQ(grant_groups(granted, arrived, 16, 24, 4, open), 24);
    EXPECT_EQ(granted, (std::vector<int64_t>{3, 4}));
    // The cap: a generator with 12 in flight and a cap of 12 gets nothing more; the other fills to it.
    granted = {3, 0};
    arrived = {0, 0};
    EXPECT_EQ(grant_groups(granted, arrived, 12, 100, 4, {12, 12}), 24);
    EXPECT_EQ(granted, (std::vector<int64_t>{3, 3}));
    // Caps per generator: 0 grants nothing, however light the load.
    granted = {0, 0};
    EXPECT_EQ(grant_groups(granted, arrived, 0, 100, 4, {0, 8}), 8);
    EXPECT_EQ(granted, (std::vector<int64_t>{0, 2}));
    // Already at the budget, or no generator: nothing.
    granted = {3, 3};
    EXPECT_EQ(grant_groups(granted, arrived, 22, 24, 4, open), 22);
    EXPECT_EQ(granted, (std::vector<int64_t>{3, 3}));
    std::vector<int64_t> none;
    EXPECT_EQ(grant_groups(none, none, 0, 24, 4, none), 0);
    EXPECT_THROW(grant_groups(granted, none, 0, 24, 4, open), tagflow::InternalError);
    EXPECT_THROW(grant_groups(granted, arrived, 0, 24, 4, {100}), tagflow::InternalError);
    // The moving mean of the rate and the cap.
    EXPECT_DOUBLE_EQ(tagflow::sched::sched_policy::next_admission_rate(0, 64, 0), 64.0);
    EXPECT_DOUBLE_EQ(tagflow::sched::sched_policy::next_admission_rate(64, 74, 0), 67.0);
    // The dropped samples do not count: they would raise the budget, and with it the drops.
    EXPECT_DOUBLE_EQ(tagflow::sched::sched_policy::next_admission_rate(64, 64, 40), 64.0);
    EXPECT_DOUBLE_EQ(tagflow::sched::sched_policy::next_admission_rate(0, 64, 24), 64.0);
    EXPECT_EQ(tagflow::sched::sched_policy::admission_cap(256, 8), 264);
    EXPECT_EQ(tagflow::sched::sched_policy::admission_cap(10, 4), 16);
}

// Grants and --data assignments go one group at a time to the least-loaded generator with room
// (sched_policy::least_loaded): the smallest load at most its limit, the first on a tie, none
// when every generator is full (or the limits do not match the loads).
TEST(Admission, LeastLoadedPicksTheSmallestWithRoom) {
    using tagflow::sched::sched_policy::least_loaded;
    EXPECT_EQ(least_loaded({5, 2, 7}, {10, 10, 10}), 1u);
    EXPECT_EQ(least_loaded({3, 2, 2}, {10, 10, 10}), 1u);  // a tie: the first
    EXPECT_EQ(least_loaded({9, 12, 8}, {8, 8, 8}), 2u);    // at the limit still has room
    EXPECT_EQ(least_loaded({9, 12}, {8, 8}), 2u);          // none: size()
    EXPECT_EQ(least_loaded({5, 2, 7}, {10, 1, 10}), 0u);   // limits per item
    EXPECT_EQ(least_loaded({5, 2}, {10}), 2u);             // sizes differ: none
    EXPECT_EQ(least_loaded({}, {}), 0u);
}

// A generator that trains (a multiplex member) next to one that does not: granted within its
// allowance, and one group at least once the coordinator waited idle since the last step; where
// every generator trains, all take the full cap. The allowance doubles after a step in which the
// coordinator waited and the member delivered without a drop, and halves (down to 0) on a drop.
TEST(Admission, MembersAreGrantedWithinTheirAllowance) {
    using tagflow::sched::sched_policy::grant_caps;
    using tagflow::sched::sched_policy::next_member_cap;
    EXPECT_EQ(grant_caps({0, 1}, {0, 0}, false, 8, 40), (std::vector<int64_t>{40, 0}));
    EXPECT_EQ(grant_caps({0, 1}, {0, 0}, true, 8, 40), (std::vector<int64_t>{40, 8}));
    EXPECT_EQ(grant_caps({0, 1}, {0, 3}, false, 8, 40), (std::vector<int64_t>{40, 24}));
    EXPECT_EQ(grant_caps({0, 1, 1}, {0, 3, 9}, true, 8, 40), (std::vector<int64_t>{40, 24, 40}));
    EXPECT_EQ(grant_caps({1, 1}, {0, 0}, false, 8, 40), (std::vector<int64_t>{40, 40}));
    EXPECT_EQ(grant_caps({0, 0}, {0, 0}, false, 8, 40), (std::vector<int64_t>{40, 40}));
    EXPECT_THROW(grant_caps({0, 1}, {1}, true, 8, 40), tagflow::InternalError);
    EXPECT_EQ(next_member_cap(0, 0, 8, 5), 1);  // delivered, nothing dropped: doubled, at least one
    EXPECT_EQ(next_member_cap(2, 0, 8, 5), 4);
    EXPECT_EQ(next_member_cap(3, 0, 8, 5), 5);  // at most max_groups
    EXPECT_EQ(next_member_cap(3, 0, 0, 5), 3);  // nothing delivered (or the coordinator never waited)
    EXPECT_EQ(next_member_cap(5, 4, 8, 5), 2);  // a drop: halved
    EXPECT_EQ(next_member_cap(1, 4, 8, 5), 0);  // down to none
}
