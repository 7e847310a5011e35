// SPDX-License-Identifier: Apache-2.0
// write_example: writes a small, known run file through RunFile (2 ranks: 5 samples in two
// rounds, 2 steps, spans, syncs, eval, ranks, one resume) for check_runfile.py to read with
// h5py. Usage: mpiexec -n 2 tagflow_io_write_example OUT.h5. Not a test by itself.
#include <cmath>
#include <cstdio>
#include <exception>

#include "common/log.hpp"
#include "common/mpi_env.hpp"
#include "io/run_file.hpp"

using namespace tagflow::io;

namespace {

SampleRecord sample(int rank, int k, int version) {
    SampleRecord s;
    s.id = rank * 100 + k;
    s.group = k / 2;
    s.prompt_index = k;
    s.task = "countdown";
    s.reward = static_cast<float>(k % 2);
    s.finish_reason = k == 3 ? FinishReason::kLength : FinishReason::kStop;
    s.rank = rank;
    s.version_min = s.version_max = version;
    s.t_done = 1.0 + k;
    const int prompt = 3 + k % 2, response = 2 + k;
    for (int j = 0; j < prompt + response; ++j) {
        bool gen = j >= prompt;
        s.tokens.push_back(1000 * rank + 10 * k + j);
        s.loss_mask.push_back(gen);
        s.logprobs.push_back(gen ? -0.5f : std::nanf(""));
        s.versions.push_back(gen ? version : -1);
    }
    s.prompt_text = "Countdown " + std::to_string(k) + " \xe2\x86\x92";  // "... ->" (U+2192)
    s.response_text = k == 2 ? "" : "r" + std::to_string(rank) + "\xc3\xa9";
    return s;
}

}  // namespace

int main(int argc, char** argv) {
    tagflow::MpiEnvironment env(argc, argv);
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    tagflow::set_log_rank(rank, size);
    if (argc != 2 || size != 2) {
        if (rank == 0) fprintf(stderr, "usage: mpiexec -n 2 %s OUT.h5\n", argv[0]);
        return 2;
    }
    try {
        RunAttributes a;
        a.config_json = R"({"task":"countdown","steps":2,"mode":"sync"})";
        a.tagflow_version = "0.1.0";
        a.world_size = size;
        a.t0_unix = 1767225600.0;
        a.slurm_job_id = "77";
        RunFile f = RunFile::create(MPI_COMM_WORLD, argv[1], a);
        f.append_ranks({{rank, "node" + std::to_string(rank), rank ? "rollout,train" : "rollout", "option", 0, 0.0}});
        // Round 0: rank 0 has two samples, rank 1 none; round 1: one and two.
        const int per_round[2][2] = {{2, 0}, {1, 2}};
        int k = 0;
        for (int step = 0; step < 2; ++step) {
            std::vector<SampleRecord> rows;
            for (int i = 0; i < per_round[step][rank]; ++i) rows.push_back(sample(rank, k++, step));
            f.append_samples(rows);
            std::vector<ConsumedRecord> used;
            for (const SampleRecord& s : rows) used.push_back({s.id, step, 0.5f, 1.0f});
            f.append_consumed(used);
            f.append_timeline(
                {{rank, SpanKind::kRollout, 2.0 * step, 2.0 * step + 1, step},
                 {rank, rank ? SpanKind::kIdle : SpanKind::kTrain, 2.0 * step + 1, 2.0 * step + 1.5, step}});
            if (rank == 0) {
                StepRecord st;
                st.step = step;
                st.t_start = 2.0 * step + 1;
                st.t_end = 2.0 * step + 1.5;
                st.policy_version = step + 1;
                st.samples = 3;
                f.append_steps({st});
                f.append_syncs({{step + 1, 4096, st.t_end, st.t_end + 0.01, step ? "mpi_bcast_delta" : "mpi_bcast",
                                 step ? 16384 : -1, 2}});
                f.append_eval({{step, "countdown", 0.25f * static_cast<float>(step), 8}});
            } else {
                f.append_steps({});
                f.append_syncs({});
                f.append_eval({});
            }
            f.flush();
        }
        f.append_resumes(rank == 0 ? std::vector<ResumeRecord>{{1, 5.0, 0}} : std::vector<ResumeRecord>{});
        f.close();
    } catch (const std::exception& e) {
        fprintf(stderr, "[rank %d] fatal: %s\n", rank, e.what());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    return 0;
}
