// SPDX-License-Identifier: Apache-2.0
// shard_memory_bench: what --shard (ZeRO stage 1 / 2, train/engine.hpp) saves on each train rank,
// against --shard off measured in the same run. Every rank of mpirun is a train rank; the policy
// (a Llama of -O d_model= layers= d_ff= vocab=) trains `steps` actor updates on the same batch
// in each mode in turn (off first, the baseline; then optimizer, gradients), each with fresh
// weights from the same seed, after one untimed update of off (the process's first-use costs). Per mode, the largest over the ranks:
//   held_MiB  the allocator's bytes in use between two updates (glibc mallinfo2), less the
//             weights and less what was in use before the model was built: the gradients and
//             the AdamW moments a rank keeps (plus the optimiser's bookkeeping);
//   peak_MiB  the kernel's high-water mark of resident memory during one update
//             (/proc/self/clear_refs), less the resident memory before the model was built and
//             less the weights: gradients, moments, activations and buffers together;
//   step_s    the slowest rank's time of one update;
// then x_held and x_peak (mode / off) and the largest difference of the losses of every update
// from off's (identical loss curves). The memory figures are taken with freed blocks over
// 256 KiB given back to the kernel (as train_step_bench's -O ckpt=on does).
//   mpirun -n 4 shard_memory_bench [-O d_model=N layers=N d_ff=N vocab=N seq=N steps=N]
#include <malloc.h>
#include <mpi.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "model/llama.hpp"
#include "train/collectives_mpi.hpp"
#include "train/workers.hpp"

using namespace tagflow;

namespace {

long status_kib(const char* key) {
    std::ifstream f("/proc/self/status");
    const size_t n = std::strlen(key);
    for (std::string line; std::getline(f, line);)
        if (line.compare(0, n, key) == 0) return std::strtol(line.c_str() + n, nullptr, 10);
    return -1;
}

double in_use_mib() {
    const struct mallinfo2 m = mallinfo2();
    return static_cast<double>(m.uordblks + m.hblkhd) / (1024.0 * 1024.0);
}

double max_over_ranks(double v) {
    MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return v;
}

struct Result {
    double held = 0, peak = 0, step_s = 0, weights = 0;
    std::vector<double> losses;
};

Result run_mode(train::Shard shard, const model::HfConfig& c, int64_t seq, int steps, int rank) {
    malloc_trim(0);
    const double use0 = in_use_mib();
    const long rss0 = status_kib("VmRSS:");
    Result r;
    {
        model::LlamaModel policy(c, 1);
        for (const auto& p : policy->parameters()) r.weights += static_cast<double>(p.numel()) * 4 / (1024.0 * 1024.0);
        train::TrainEngineConfig ec;
        ec.optim.lr = 1e-4;
        ec.shard = shard;
        train::ActorWorker actor(train::make_engine(train::policy_handle(policy), ec), train::ActorConfig{});
        train::MpiCollectives comm(MPI_COMM_WORLD, size_t{4} << 20);
        actor.engine().set_group(&comm);
        std::vector<train::TrainSeq> batch;  // one sequence per rank: half prompt, half response
        std::vector<int32_t> prompt, response;
        for (int64_t k = 0; k < seq / 2; ++k) prompt.push_back(static_cast<int32_t>((rank * 7 + k * 3) % c.vocab_size));
        for (int64_t k = 0; k < seq - seq / 2; ++k)
            response.push_back(static_cast<int32_t>((rank * 5 + k * 11) % c.vocab_size));
        batch.push_back(train::make_train_seq(prompt, response, std::vector<float>(response.size(), -2.5f)));
        batch.back().advantages = {rank % 2 ? 1.f : -1.f};
        for (int s = 0; s < steps; ++s) {
            malloc_trim(0);
            {
                std::ofstream clear("/proc/self/clear_refs");
                clear << "5";  // VmHWM <- VmRSS
            }
            MPI_Barrier(MPI_COMM_WORLD);
            const double t0 = MPI_Wtime();
            const train::ActorStats st = actor.update(batch, &comm);
            const double dt = MPI_Wtime() - t0;
            r.losses.push_back(st.loss);
            if (s == steps - 1) {  // the moments exist since the first update
                r.peak = static_cast<double>(status_kib("VmHWM:") - rss0) / 1024.0 - r.weights;
                r.step_s = dt;
                malloc_trim(0);
                r.held = in_use_mib() - use0 - r.weights;
            }
        }
    }
    r.held = max_over_ranks(r.held);
    r.peak = max_over_ranks(r.peak);
    r.step_s = max_over_ranks(r.step_s);
    return r;
}

}  // namespace

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    std::map<std::string, long> o = {{"d_model", 512}, {"layers", 8}, {"d_ff", 2048},
                                     {"vocab", 32000}, {"seq", 64},   {"steps", 3}};
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "-O") != 0 || i + 1 >= argc) continue;
        const std::string kv = argv[++i];
        const size_t eq = kv.find('=');
        if (eq == std::string::npos || !o.count(kv.substr(0, eq))) {
            if (rank == 0) std::fprintf(stderr, "shard_memory_bench: unknown option -O %s\n", kv.c_str());
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        o[kv.substr(0, eq)] = std::strtol(kv.c_str() + eq + 1, nullptr, 10);
    }
    at::set_num_threads(1);
    mallopt(M_MMAP_MAX, 1 << 20);  // freed blocks over 256 KiB go back to the kernel: RSS follows use
    mallopt(M_MMAP_THRESHOLD, 256 * 1024);
    mallopt(M_TRIM_THRESHOLD, 1 << 20);
    model::HfConfig c;
    c.model_type = "llama";
    c.hidden_size = o["d_model"];
    c.num_hidden_layers = o["layers"];
    c.num_attention_heads = 8;
    c.num_key_value_heads = 4;
    c.head_dim = c.hidden_size / 8;
    c.intermediate_size = o["d_ff"];
    c.vocab_size = o["vocab"];
    c.max_position_embeddings = o["seq"];
    const int steps = static_cast<int>(o["steps"]);
    (void)run_mode(train::Shard::kOff, c, o["seq"], 1, rank);  // warm-up: thread pools, first-touch pages
    const Result off = run_mode(train::Shard::kOff, c, o["seq"], steps, rank);
    if (rank == 0) {
        std::printf("# shard_memory_bench: %d train ranks, %.1fM parameters (%.0f MiB of fp32 weights), %d updates\n",
                    size, off.weights * 1024 * 1024 / 4 / 1e6, off.weights, steps);
        std::printf("%-10s %10s %10s %8s %8s %8s %12s\n", "shard", "held_MiB", "peak_MiB", "step_s", "x_held", "x_peak",
                    "max|dloss|");
        std::printf("%-10s %10.1f %10.1f %8.3f %8.2f %8.2f %12.2g\n", "off", off.held, off.peak, off.step_s, 1.0, 1.0,
                    0.0);
    }
    int wrong = 0;
    for (train::Shard s : {train::Shard::kOptimizer, train::Shard::kGradients}) {
        const Result r = run_mode(s, c, o["seq"], steps, rank);
        double dl = 0;
        for (size_t i = 0; i < r.losses.size(); ++i) dl = std::max(dl, std::abs(r.losses[i] - off.losses[i]));
        wrong += !(dl < 1e-4);
        if (rank == 0)
            std::printf("%-10s %10.1f %10.1f %8.3f %8.2f %8.2f %12.2g\n",
                        s == train::Shard::kOptimizer ? "optimizer" : "gradients", r.held, r.peak, r.step_s,
                        r.held / off.held, r.peak / off.peak, dl);
    }
    if (rank == 0 && wrong) std::printf("# FAILED: a loss curve differs from --shard off's\n");
    MPI_Finalize();
    return wrong ? 1 : 0;
}
