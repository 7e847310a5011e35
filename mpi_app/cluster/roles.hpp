// SPDX-License-Identifier: Apache-2.0
// roles: the communicators of a run, built once up front from every rank's tags.
//   io     — dup of MPI_COMM_WORLD, the one fixed communicator the run file is written through
//   rollout— ranks tagged rollout;  train — ranks tagged train
//   sync   — train root + every rollout rank (weight broadcast, root is rank 0 of it)
//   critic — ranks tagged critic, or the train ranks when no rank is (PPO's value model)
// Later modes (multiplex) re-split from here; this file does not schedule anything.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "cluster/tags.hpp"
#include "common/mpi_env.hpp"

namespace tagflow::cluster {

struct Roles {
    int world_rank = 0;
    int world_size = 1;
    uint32_t my_tags = 0;
    std::vector<uint32_t> all_tags;    // by world rank
    std::vector<std::string> sources;  // by world rank
    std::vector<std::string> hosts;    // by world rank
    std::vector<int> rollout_ranks;    // world ranks, ascending
    std::vector<int> train_ranks;      // world ranks, ascending
    std::vector<int> critic_ranks;     // world ranks tagged critic, else = train_ranks
    bool critic_colocated = true;      // true when no rank is tagged critic
    int train_root = -1;               // lowest world rank tagged train

    Comm io;
    Comm rollout;  // null on ranks without the rollout tag
    Comm train;    // null on ranks without the train tag
    Comm sync;     // null on ranks that neither are the train root nor roll out
    Comm critic;   // null on ranks outside critic_ranks

    bool is_rollout() const { return (my_tags & kRollout) != 0; }
    bool is_train() const { return (my_tags & kTrain) != 0; }
    bool is_train_root() const { return world_rank == train_root; }
    bool is_critic() const { return critic_colocated ? is_train() : (my_tags & kCritic) != 0; }
};

/// COLLECTIVE over MPI_COMM_WORLD. `local` is this rank's tags, or an error message in
/// `local_error` (bad tag list on this rank only). Every rank learns every rank's tags; on a bad
/// rank or a run where no rank can train or roll out, the ranks that have the problem print it
/// and every rank throws ConfigError (so main returns 2 everywhere).
Roles build_roles(const RankTags& local, const std::string& local_error);

}  // namespace tagflow::cluster
