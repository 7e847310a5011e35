// SPDX-License-Identifier: Apache-2.0
#include "cluster/roles.hpp"

#include <cstring>

#include "common/error.hpp"
#include "common/log.hpp"

namespace tagflow::cluster {
namespace {

// Allgathers one fixed-width string per rank.
std::vector<std::string> allgather_strings(const std::string& mine, size_t width) {
    int n = 0;
    TAGFLOW_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &n));
    std::vector<char> send(width, '\0');
    std::memcpy(send.data(), mine.data(), std::min(mine.size(), width - 1));
    std::vector<char> recv(width * static_cast<size_t>(n));
    TAGFLOW_MPI_CHECK(MPI_Allgather(send.data(), static_cast<int>(width), MPI_CHAR, recv.data(),
                                    static_cast<int>(width), MPI_CHAR, MPI_COMM_WORLD));
    std::vector<std::string> out;
    for (int r = 0; r < n; ++r) out.emplace_back(recv.data() + static_cast<size_t>(r) * width);
    return out;
}

}  // namespace

Roles build_roles(const RankTags& local, const std::string& local_error) {
    Roles r;
    Comm world = Comm::world();
    r.world_rank = world.rank();
    r.world_size = world.size();

    int mine = local_error.empty() ? static_cast<int>(local.bits) : -1;
    std::vector<int> bits(static_cast<size_t>(r.world_size));
    TAGFLOW_MPI_CHECK(MPI_Allgather(&mine, 1, MPI_INT, bits.data(), 1, MPI_INT, MPI_COMM_WORLD));
    int bad = 0;
    for (int b : bits) bad += b < 0;
    if (bad) {
        if (!local_error.empty()) log_error("rank %d: %s", r.world_rank, local_error.c_str());
        throw ConfigError("");  // already reported by the rank(s) concerned
    }
    r.my_tags = local.bits;
    for (int rank = 0; rank < r.world_size; ++rank) {
        auto b = static_cast<uint32_t>(bits[static_cast<size_t>(rank)]);
        r.all_tags.push_back(b);
        if (b & kRollout) r.rollout_ranks.push_back(rank);
        if (b & kTrain) r.train_ranks.push_back(rank);
        if (b & kCritic) r.critic_ranks.push_back(rank);
    }
    r.critic_colocated = r.critic_ranks.empty();
    if (r.critic_colocated) r.critic_ranks = r.train_ranks;
    r.sources = allgather_strings(local.source, 16);
    r.hosts = allgather_strings(processor_name(), 64);
    if (r.train_ranks.empty()) {
        if (r.world_rank == 0)
            log_error("no rank is tagged train (tags: %s); a run needs at least one train rank",
                      tags_to_string(r.all_tags[0]).c_str());
        throw ConfigError("");
    }
    if (r.rollout_ranks.empty()) {
        if (r.world_rank == 0) log_error("no rank is tagged rollout; a run needs at least one rollout rank");
        throw ConfigError("");
    }
    r.train_root = r.train_ranks.front();

    // Every communicator is created here, once, collectively over the world: no later
    // collective of one role ever needs a rank of another role.
    r.io = world.dup();
    r.rollout = world.split(r.is_rollout() ? 0 : MPI_UNDEFINED, r.world_rank);
    r.train = world.split(r.is_train() ? 0 : MPI_UNDEFINED, r.world_rank);
    bool in_sync = r.is_rollout() || r.is_train_root();
    // key 0 for the train root so it is rank 0 of the sync communicator.
    r.sync = world.split(in_sync ? 0 : MPI_UNDEFINED, r.is_train_root() ? -1 : r.world_rank);
    r.critic = world.split(r.is_critic() ? 0 : MPI_UNDEFINED, r.world_rank);
    return r;
}

}  // namespace tagflow::cluster
