// SPDX-License-Identifier: Apache-2.0
// Unit tests of tag lists and per-rank tag resolution (no MPI).
#include <gtest/gtest.h>

#include "cluster/tags.hpp"
#include "common/error.hpp"

using namespace tagflow::cluster;
using tagflow::ConfigError;

TEST(Tags, ParseAndPrint) {
    EXPECT_EQ(parse_tag_list("rollout", "t"), kRollout);
    EXPECT_EQ(parse_tag_list(" train , rollout ", "t"), kRollout | kTrain);
    EXPECT_EQ(tags_to_string(parse_tag_list("critic,train,rollout", "t")), "rollout,train,critic");
}

TEST(Tags, BadTagsAreErrors) {
    EXPECT_THROW(parse_tag_list("", "t"), ConfigError);
    EXPECT_THROW(parse_tag_list("rollout,", "t"), ConfigError);
    EXPECT_THROW(parse_tag_list("gpu", "t"), ConfigError);
    try {
        parse_tag_list("rollout,bogus", "--tags");
        FAIL();
    } catch (const ConfigError& e) {
        std::string m = e.what();
        EXPECT_NE(m.find("--tags"), std::string::npos) << m;
        EXPECT_NE(m.find("'bogus'"), std::string::npos) << m;
    }
}

TEST(Tags, DefaultIsColocated) {
    auto t = resolve_rank_tags(0, 2, "", "", "", "");
    EXPECT_EQ(t.bits, kRollout | kTrain);
    EXPECT_EQ(t.source, "default");
}

TEST(Tags, FromOptionAndEnvironment) {
    auto a = resolve_rank_tags(1, 2, "rollout", "option", "", "");
    EXPECT_EQ(a.bits, kRollout);
    EXPECT_EQ(a.source, "option");
    auto b = resolve_rank_tags(1, 2, "rollout,train,critic", "env", "map", "");
    EXPECT_EQ(b.bits, kRollout | kTrain | kCritic);
    EXPECT_EQ(b.source, "map");
    auto c = resolve_rank_tags(1, 2, "train", "env", "", "");
    EXPECT_EQ(c.source, "env");
}

TEST(Tags, RankTags) {
    const std::string spec = "0=rollout; 1=rollout,train";
    EXPECT_EQ(resolve_rank_tags(0, 3, "", "", "", spec).bits, kRollout);
    auto r1 = resolve_rank_tags(1, 3, "", "", "", spec);
    EXPECT_EQ(r1.bits, kRollout | kTrain);
    EXPECT_EQ(r1.source, "rank-tags");
    // Unlisted ranks fall back to --tags, then to the default.
    EXPECT_EQ(resolve_rank_tags(2, 3, "", "", "", spec).source, "default");
    EXPECT_EQ(resolve_rank_tags(2, 3, "train", "option", "", spec).bits, kTrain);
}

TEST(Tags, RankTagsErrors) {
    EXPECT_THROW(resolve_rank_tags(0, 2, "", "", "", "0rollout"), ConfigError);
    EXPECT_THROW(resolve_rank_tags(0, 2, "", "", "", "x=rollout"), ConfigError);
    EXPECT_THROW(resolve_rank_tags(0, 2, "", "", "", "5=rollout"), ConfigError);
    EXPECT_THROW(resolve_rank_tags(0, 2, "", "", "", "1=bogus"), ConfigError);  // any rank's entry
    EXPECT_THROW(resolve_rank_tags(0, 2, "", "", "", "0=rollout;0=train"), ConfigError);
}
