// SPDX-License-Identifier: Apache-2.0
// sim_command: `tagflow sim` — parses its own options (one-line ConfigError on bad values),
// runs the simulator for every node count x mode, prints a table (throughput, idle fraction per
// node type, scaling efficiency against the smallest node count, each mode against sync) and
// optionally writes JSON. No MPI: main.cpp runs it on rank 0 only. Does not calibrate (that is
// tests/bench/sim_calibrate.sh, which writes the --cost file).
#pragma once
#include <string>
#include <vector>

#include "sim/simulator.hpp"

namespace tagflow::sim {

struct SimArgs {
    std::vector<int> nodes{8, 32, 64, 128, 200, 256};
    std::vector<config::Mode> modes{config::Mode::kSync, config::Mode::kDisaggregated, config::Mode::kMultiplex};
    std::string hw = "h100:rollout,train:0.5;t4:rollout:0.5";
    SimConfig base;          // mode, nodes and hw filled per run
    std::string cost_file;   // --cost
    double model_bytes = 0;  // --model-bytes (0: the cost model's)
    std::string json_out;    // --json
    bool help = false;
    bool print_cost = false;  // --print-cost
};

/// Parses `sim` arguments (argv[0] is "sim"). Throws ConfigError with one line.
SimArgs parse_sim_args(int argc, const char* const* argv);
std::string sim_help();

/// Runs every (nodes, mode); results in nodes-major order.
std::vector<ModeResult> run_sims(const SimArgs& a, const CostModel& cost);
/// The table printed by `tagflow sim`.
std::string format_table(const SimArgs& a, const CostModel& cost, const std::vector<ModeResult>& rs);
/// {"config": {...}, "cost": {...}, "results": [...]} (spans left out).
std::string results_json(const SimArgs& a, const CostModel& cost, const std::vector<ModeResult>& rs);

/// `tagflow sim ...`: every process parses (bad usage throws ConfigError everywhere); only
/// `root` simulates and prints to stdout. Returns 0.
int sim_command(int argc, char** argv, bool root = true);

}  // namespace tagflow::sim
