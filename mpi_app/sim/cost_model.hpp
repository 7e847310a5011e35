// SPDX-License-Identifier: Apache-2.0
// cost_model: what one node of a hardware type costs in virtual seconds — a decode step as a
// function of the batch (piecewise linear in measured points) plus its attention, linear in the
// context the batch's sequences attend to, prefill per prompt token, training
// per token, and the link (latency + bytes / bandwidth) the weight broadcast and the gradient
// all-reduce cross. Built-in defaults for "h100", "t4" and "cpu"; a JSON cost file (written by
// tests/bench/sim_calibrate.sh, format in share/doc/sim.md) adds or overrides types.
// Pure C++ (no MPI, no LibTorch). Does not simulate anything (simulator.hpp does).
#pragma once
#include <map>
#include <string>
#include <vector>

namespace tagflow::sim {

struct HwCost {
    std::vector<double> decode_batch{1, 256};  // batch sizes, ascending
    std::vector<double> decode_s{1e-3, 2e-3};  // seconds of one decode step at each batch
    /// Attention's share of a decode step: seconds per context token attended to, summed over
    /// the batch (a sequence at position p reads p cached keys/values per layer). A step of
    /// sequences at positions p_i costs decode(batch) + decode_s_per_ctx_token * sum(p_i); with
    /// long-tailed lengths the long sequences pile up in the batch and this term dominates.
    /// 0 (the default): decode_s holds all of it.
    double decode_s_per_ctx_token = 0;
    double prefill_s_per_token = 1e-5;
    double train_s_per_token = 1e-4;
    /// Optional: training seconds per token measured at these sequence lengths (ascending; the
    /// per-step overhead and attention make short and long sequences dearer per token). When
    /// given they replace train_s_per_token, looked up at the batch's (padded) sequence length.
    std::vector<double> train_seq, train_s_per_token_seq;
    /// Seconds a process's first training steps cost beyond what later steps of the same size
    /// cost (LibTorch's first calls, the allocator's first touches), in all; charged once per node,
    /// on the first step it trains. 0 (the default): not modelled.
    double train_first_s = 0;
    int max_batch = 256;  // continuous-batching slots (tagflow train's --max-batch)
    std::string source = "default";

    /// Seconds of one decode step of `batch` sequences: linear between the points, extrapolated
    /// linearly beyond the last two; 0 for batch 0. Without the context term (decode_step adds it).
    double decode(double batch) const;
    /// Seconds of one decode step of `batch` sequences attending to `context` tokens in all.
    double decode_step(double batch, double context) const { return decode(batch) + decode_s_per_ctx_token * context; }
    /// Training seconds per token for sequences of `seq` tokens: train_s_per_token, or the
    /// train_seq points (linear between them, constant beyond the ends).
    double train_per_token(double seq) const;
};

struct CostModel {
    std::map<std::string, HwCost> hw;
    double latency_s = 20e-6;     // per message hop
    double bandwidth_Bps = 25e9;  // bytes/s of one link
    double model_bytes = 3e9;     // weights broadcast per sync, gradients all-reduced per step
    /// true: a training step costs samples x the longest sample's tokens (tagflow's trainer pads
    /// each local batch to its longest sequence); false: the sum of the samples' tokens (packed).
    bool train_padded = false;
    /// Seconds one step's run-file rows (the samples, /consumed, /steps, /timeline) and the flush
    /// cost the writer: the coordinator after each async step, every rank after each sync step.
    /// 0 (the default): not modelled.
    double step_io_s = 0;
    std::string source = "built-in defaults";

    const HwCost& at(const std::string& type) const;  // throws ConfigError naming an unknown type
    /// Pipelined broadcast from one root to `receivers` nodes.
    double broadcast_s(int receivers) const;
    /// Ring all-reduce of the gradients over `n` nodes (0 for one node).
    double allreduce_s(int n) const;
};

/// h100, t4 (illustrative, a ~1.5B-parameter bf16 model; see share/doc/sim.md) and cpu (the
/// 2-core dev VM, tagflow train's default 64-wide model; calibrate for real numbers).
CostModel default_costs();

/// Merges a cost file into `m` (types it names replace the defaults'; "link" and "model_bytes"
/// override). Throws ConfigError with one line naming the file and the problem.
void merge_cost_file(CostModel& m, const std::string& path);
/// Parses a cost file's text (same rules; `what` names it in errors).
void merge_cost_json(CostModel& m, const std::string& text, const std::string& what);

/// The model as a cost file (the format merge_cost_file reads).
std::string to_json(const CostModel& m);

}  // namespace tagflow::sim
