// SPDX-License-Identifier: Apache-2.0
// tags: capability tags (rollout, train, critic) of one rank and where they came from.
// Pure parsing (no MPI): each rank resolves its own tags; roles.hpp agrees on them collectively.
#pragma once
#include <cstdint>
#include <string>

namespace tagflow::cluster {

enum TagBits : uint32_t { kRollout = 1u, kTrain = 2u, kCritic = 4u };

/// "rollout,train" -> bits. Throws ConfigError naming `what` on an unknown or empty tag.
uint32_t parse_tag_list(const std::string& list, const std::string& what);
/// bits -> "rollout,train,critic" (canonical order).
std::string tags_to_string(uint32_t bits);

struct RankTags {
    uint32_t bits = 0;
    std::string source;  // map/option/default (from the plugin), env, option, rank-tags, default
};

/// Resolves this rank's tags from the options. Order: --rank-tags (if it names this rank),
/// then --tags / TAGFLOW_TAGS (with TAGFLOW_TAG_SOURCE when it came from the environment),
/// then the colocated default rollout,train. Throws ConfigError on bad input.
/// `tags_origin` is "option" or "env"; `plugin_source` is TAGFLOW_TAG_SOURCE (may be empty).
RankTags resolve_rank_tags(int rank, int world_size, const std::string& tags, const std::string& tags_origin,
                           const std::string& plugin_source, const std::string& rank_tags);

}  // namespace tagflow::cluster
