// SPDX-License-Identifier: Apache-2.0
// write_tree_example: writes a small run file whose /samples rows come from trajectory
// managers (2 ranks, 3 rounds of an agentic request stream: groups, multi-turn, rewrites,
// retries), with /tree, /ranks and /steps, for check_tree.py to read with h5py.
// Usage: mpiexec -n 2 tagflow_traj_write_example OUT.h5. Not a test by itself.
#include <cstdio>
#include <exception>

#include "common/log.hpp"
#include "common/mpi_env.hpp"
#include "io/run_file.hpp"
#include "traj/tree_file_mpi.hpp"
#include "tree_workload.hpp"

using namespace tagflow;
using namespace tagflow::io;

int main(int argc, char** argv) {
    MpiEnvironment env(argc, argv);
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    set_log_rank(rank, size);
    if (argc != 2 || size != 2) {
        if (rank == 0) fprintf(stderr, "usage: mpiexec -n 2 %s OUT.h5\n", argv[0]);
        return 2;
    }
    try {
        RunAttributes a;
        a.config_json = R"({"task":"agentic","steps":3})";
        a.tagflow_version = "0.1.0";
        a.world_size = size;
        a.t0_unix = 1767225600.0;
        RunFile f = RunFile::create(MPI_COMM_WORLD, argv[1], a);
        f.append_ranks({{rank, "node" + std::to_string(rank), "rollout", "option", 0, 0.0}});
        traj::TrajectoryManager m;
        traj::test::Workload w(rank, 2024);
        int64_t id = 0;
        for (int round = 0; round < 3; ++round) {
            std::vector<traj::NodeId> ids;
            const int n = rank == 1 && round == 0 ? 0 : 10;  // rank 1 starts with nothing
            for (const traj::test::WorkRequest& q : w.round(round, n))
                ids.push_back(m.insert(q.view(rank, round)).traj);
            traj::write_tree(f, m);  // before the samples that name its rows
            std::vector<SampleRecord> rows;
            for (traj::NodeId t : ids) {
                SampleRecord s;
                s.id = rank * 100000 + id++;
                s.group = s.id / 4;
                s.prompt_index = s.id;
                s.task = "agentic";
                s.rank = rank;
                s.t_done = round + 0.75;
                traj::fill_sample(m, t, s);
                rows.push_back(std::move(s));
            }
            f.append_samples(rows);
            StepRecord st;
            st.step = round;
            st.t_start = round + 0.8;
            st.t_end = round + 0.9;
            st.policy_version = round + 1;
            f.append_steps(rank == 0 ? std::vector<StepRecord>{st} : std::vector<StepRecord>{});
            f.flush();
        }
        const traj::Stats s = m.stats();
        printf(
            "[rank %d] %lld requests, %lld trajectories, %lld leaves, %lld tokens stored for "
            "%lld requested (%.1f%% saved; %.1f%% against leaves only)\n",
            rank, static_cast<long long>(s.requests), static_cast<long long>(s.trajectories),
            static_cast<long long>(s.leaves), static_cast<long long>(s.tokens_stored),
            static_cast<long long>(s.tokens_requests), 100 * s.saved_vs_requests(), 100 * s.saved_vs_leaves());
        f.close();
    } catch (const std::exception& e) {
        fprintf(stderr, "[rank %d] fatal: %s\n", rank, e.what());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    return 0;
}
