// SPDX-License-Identifier: Apache-2.0
// packing: how the trainer lays one step's sequences out, without LibTorch: which train rank
// trains each sequence (balance_by_slots) and which sequences share a packed row (first_fit_rows).
// The trainer (engine.cpp, step/rl_trainer.cpp) and the simulator (sim/simulator.cpp, which prices
// the slots a packed step computes) call the same code.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace tagflow::train {

/// Which of n data-parallel ranks trains each sequence of a step: the longest first (ties by
/// index) to the rank whose share holds the fewest token slots so far (the first on a tie), so
/// the shares are as even as whole sequences allow and no rank waits long for a longer one in the
/// gradient all-reduce. slots[i]: sequence i's cost (its prompt + response - 1 input slots).
/// Deterministic: every rank computes the same assignment. n < 1: ConfigError.
std::vector<int> balance_by_slots(const std::vector<int64_t>& slots, int n);

/// The packed rows of sequences of slots[i] input slots each: every sequence goes whole into a row
/// of L slots, L = the longest (at least 1), first fit by decreasing length (ties in input order).
/// rows[r] lists the indices concatenated in row r.
std::vector<std::vector<size_t>> first_fit_rows(const std::vector<int64_t>& slots);

/// The slots a packed forward computes for these sequences: rows x L (first_fit_rows), padding at
/// the rows' ends included. 0 for none.
int64_t packed_slots(const std::vector<int64_t>& slots);

}  // namespace tagflow::train
