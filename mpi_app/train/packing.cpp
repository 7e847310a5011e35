// SPDX-License-Identifier: Apache-2.0
#include "train/packing.hpp"
#include <algorithm>
#include <string>
#include "common/error.hpp"

namespace tagflow::train {

std::vector<int> balance_by_slots(const std::vector<int64_t>& slots, int n) {
    if (n < 1) throw ConfigError("balance_by_slots: " + std::to_string(n) + " ranks");
    std::vector<size_t> order(slots.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return slots[a] > slots[b]; });
    std::vector<int64_t> load(static_cast<size_t>(n), 0);
    std::vector<int> owner(slots.size(), 0);
    for (size_t i : order) {
        const auto r = static_cast<size_t>(std::min_element(load.begin(), load.end()) - load.begin());
        owner[i] = static_cast<int>(r);
        load[r] += slots[i];
    }
    return owner;
}

std::vector<std::vector<size_t>> first_fit_rows(const std::vector<int64_t>& slots) {
    int64_t L = 1;
    for (int64_t s : slots) L = std::max(L, s);
    std::vector<size_t> order(slots.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return slots[a] > slots[b]; });
    // First fit by decreasing length: few rows, all nearly L long.
    std::vector<std::vector<size_t>> rows;
    std::vector<int64_t> fill;
    for (size_t i : order) {
        size_t r = 0;
        while (r < rows.size() && fill[r] + slots[i] > L) ++r;
        if (r == rows.size()) {
            rows.emplace_back();
            fill.push_back(0);
        }
        rows[r].push_back(i);
        fill[r] += slots[i];
    }
    return rows;
}

int64_t packed_slots(const std::vector<int64_t>& slots) {
    if (slots.empty()) return 0;
    const int64_t L = std::max<int64_t>(1, *std::max_element(slots.begin(), slots.end()));
    return static_cast<int64_t>(first_fit_rows(slots).size()) * L;
}

}  // namespace tagflow::train
