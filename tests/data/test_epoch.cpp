// SPDX-License-Identifier: Apache-2.0
// Serial.data_epoch.*: the seeded shuffle (a permutation, the documented algorithm, different per
// epoch and seed) and the exactly-once cursor: random sequences of take / done / requeue / save /
// kill-and-restore, where a restore rolls the "trained" record back to what the saved checkpoint
// held, must end with every row of every epoch done exactly once.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <optional>
#include <random>
#include <set>

#include "common/error.hpp"
#include "data/epoch.hpp"

using namespace tagflow::data;

TEST(Shuffle, IsAPermutationAndDependsOnSeedAndEpoch) {
    for (uint64_t n : {1ul, 2ul, 3ul, 10ul, 1000ul}) {
        auto p = shuffle_rows(n, 42, 0);
        std::vector<uint64_t> s = p;
        std::sort(s.begin(), s.end());
        for (uint64_t i = 0; i < n; ++i) ASSERT_EQ(s[i], i);
    }
    EXPECT_EQ(shuffle_rows(1000, 42, 3), shuffle_rows(1000, 42, 3));
    EXPECT_NE(shuffle_rows(1000, 42, 3), shuffle_rows(1000, 42, 4));
    EXPECT_NE(shuffle_rows(1000, 42, 3), shuffle_rows(1000, 43, 3));
}

TEST(Shuffle, MatchesTheDocumentedAlgorithm) {
    // Produced by the Python of share/doc/data.md ("Shuffle"), not by this code:
    //   shuffle_rows(10, 1234, 0) and shuffle_rows(10, 1234, 1)
    EXPECT_EQ(shuffle_rows(10, 1234, 0), (std::vector<uint64_t>{7, 4, 0, 3, 5, 1, 9, 2, 6, 8}));
    EXPECT_EQ(shuffle_rows(10, 1234, 1), (std::vector<uint64_t>{1, 9, 6, 3, 7, 4, 5, 0, 8, 2}));
}

TEST(Shuffle, RoughlyUniform) {
    // position of row 0 over 20000 seeds, 8 rows: each position ~2500 times
    std::vector<int> count(8);
    for (uint64_t seed = 0; seed < 20000; ++seed) {
        auto p = shuffle_rows(8, seed, 0);
        ++count[std::find(p.begin(), p.end(), 0) - p.begin()];
    }
    for (int c : count) EXPECT_NEAR(c, 2500, 250);
}

TEST(EpochSampler, PlainEpochsFollowTheShuffle) {
    EpochSampler s(5, 9, 2);
    for (uint64_t e = 0; e < 2; ++e) {
        auto order = shuffle_rows(5, 9, e);
        for (uint64_t i = 0; i < 5; ++i) {
            auto t = s.take();
            ASSERT_TRUE(t);
            EXPECT_EQ(t->epoch, e);
            EXPECT_EQ(t->row, order[i]);
            s.done(*t);
        }
        EXPECT_EQ(s.completed_epochs(), e + 1);
    }
    EXPECT_FALSE(s.take());
    EXPECT_TRUE(s.finished());
    EXPECT_THROW(s.done({0, 0}), tagflow::InternalError);
}

TEST(EpochSampler, RequeuedRowsComeBackInTheirEpoch) {
    EpochSampler s(3, 1, 2);
    auto a = *s.take(), b = *s.take(), c = *s.take();
    auto d = *s.take();  // epoch 1 starts while epoch 0 is outstanding
    EXPECT_EQ(d.epoch, 1u);
    s.requeue(b);
    auto again = *s.take();
    EXPECT_EQ(again, b);  // the requeued row, same epoch, before fresh ones
    s.done(a);
    s.done(c);
    EXPECT_EQ(s.completed_epochs(), 0u);
    s.done(again);
    EXPECT_EQ(s.completed_epochs(), 1u);
    EXPECT_THROW(s.requeue(again), tagflow::InternalError);
    s.done(d);
}

// A resume claims back the tickets whose samples its checkpoint holds: outstanding, not handed out again.
TEST(EpochSampler, ClaimTakesARequeuedTicketBackAndExhaustedSaysTakeIsDry) {
    EpochSampler s(3, 2, 1);
    auto a = *s.take(), b = *s.take(), c = *s.take();
    EXPECT_TRUE(s.exhausted());
    EpochSampler r = EpochSampler::from_bytes(s.to_bytes(), 3, 2, 1);  // a, b, c requeued
    EXPECT_FALSE(r.exhausted());
    r.claim(b);  // b's group is in the restored pool
    EXPECT_THROW(r.claim(b), tagflow::InternalError);
    auto x = *r.take(), y = *r.take();
    EXPECT_FALSE(r.take());
    EXPECT_TRUE(r.exhausted());
    EXPECT_EQ(std::set<Ticket>({x, y}), std::set<Ticket>({a, c}));
    r.done(x);
    r.done(b);
    EXPECT_FALSE(r.finished());
    r.requeue(y);
    EXPECT_FALSE(r.exhausted());
    r.done(*r.take());
    EXPECT_TRUE(r.finished());
}

TEST(EpochSampler, CursorRefusesAnotherDataSet) {
    EpochSampler s(100, 5, 3);
    s.take();
    std::string bytes = s.to_bytes();
    EXPECT_THROW(EpochSampler::from_bytes(bytes, 99, 5, 3), tagflow::ConfigError);
    EXPECT_THROW(EpochSampler::from_bytes(bytes, 100, 6, 3), tagflow::ConfigError);
    EXPECT_THROW(EpochSampler::from_bytes("{\"format\": 1}", 100, 5, 3), tagflow::ConfigError);
    EXPECT_THROW(EpochSampler::from_bytes("not json", 100, 5, 3), tagflow::ConfigError);
    auto j = s.to_json();
    j["outstanding"].push_back({0, 100});  // a row that does not exist
    EXPECT_THROW(EpochSampler::from_json(j, 100, 5, 3), tagflow::ConfigError);
    EXPECT_NO_THROW(EpochSampler::from_bytes(bytes, 100, 5, 7));  // more epochs on resume: fine
}

// The property: whatever the interleaving, every (epoch, row) is trained exactly once.
TEST(EpochSampler, ExactlyOnceUnderRandomTakeDoneRequeueSaveRestore) {
    std::mt19937_64 rng(2026);
    for (int trial = 0; trial < 400; ++trial) {
        const uint64_t rows = 1 + rng() % 40, epochs = 1 + rng() % 4, seed = rng();
        EpochSampler s(rows, seed, epochs);
        // trained: what the model has seen since the last checkpoint plus what the checkpoint holds
        std::multiset<Ticket> trained;
        std::optional<std::pair<std::string, std::multiset<Ticket>>> ckpt;
        std::vector<Ticket> in_flight;
        int steps = 0;
        while (!s.finished()) {
            ASSERT_LT(++steps, 100000) << "trial " << trial << " does not finish";
            int op = static_cast<int>(rng() % 100);
            if (op < 45) {
                if (auto t = s.take()) in_flight.push_back(*t);
                else if (in_flight.empty()) FAIL() << "nothing to take and nothing in flight, not finished";
            } else if (op < 75 && !in_flight.empty()) {
                std::size_t k = rng() % in_flight.size();
                s.done(in_flight[k]);
                trained.insert(in_flight[k]);
                in_flight.erase(in_flight.begin() + static_cast<long>(k));
            } else if (op < 90 && !in_flight.empty()) {
                std::size_t k = rng() % in_flight.size();
                s.requeue(in_flight[k]);  // dropped as stale: not trained
                in_flight.erase(in_flight.begin() + static_cast<long>(k));
            } else if (op < 95) {
                ckpt = std::make_pair(s.to_bytes(), trained);  // checkpoint: cursor + model together
            } else if (ckpt) {
                // kill: in-flight work and everything trained after the checkpoint is lost
                s = EpochSampler::from_bytes(ckpt->first, rows, seed, epochs);
                trained = ckpt->second;
                in_flight.clear();
            }
        }
        ASSERT_TRUE(in_flight.empty());
        ASSERT_EQ(trained.size(), rows * epochs) << "trial " << trial;
        for (uint64_t e = 0; e < epochs; ++e)
            for (uint64_t r = 0; r < rows; ++r) ASSERT_EQ(trained.count({e, r}), 1u) << "epoch " << e << " row " << r;
        EXPECT_EQ(s.completed_epochs(), epochs);
    }
}

TEST(EpochSampler, UnboundedEpochsKeepGoing) {
    EpochSampler s(4, 3, 0);
    std::map<uint64_t, std::set<uint64_t>> seen;
    for (int i = 0; i < 40; ++i) {
        auto t = s.take();
        ASSERT_TRUE(t);
        seen[t->epoch].insert(t->row);
        s.done(*t);
    }
    EXPECT_EQ(seen.size(), 10u);
    for (const auto& [e, rows] : seen) EXPECT_EQ(rows.size(), 4u);
    EXPECT_FALSE(s.finished());
}
