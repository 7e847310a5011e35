// SPDX-License-Identifier: Apache-2.0
// child_map: the child index of the trajectory prefix tree: one open-addressing hash table
// (linear probing) from (parent node, first token of the child's edge) to a child node id.
// Internal to traj/; entries are only added or overwritten, never removed (clear() drops all).
// Does not know anything about edges, arenas or sessions.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace tagflow::traj {

class ChildMap {
public:
    ChildMap() { rehash(1024); }

    /// The value stored for (parent, token), or -1.
    int32_t find(int32_t parent, int32_t token) const {
        const uint64_t k = key(parent, token);
        for (size_t i = slot_of(k);; i = (i + 1) & mask_) {
            const Slot& s = slots_[i];
            if (s.key == k) return s.value;
            if (s.key == kEmpty) return -1;
        }
    }

    /// Inserts or overwrites (parent, token) -> value. `parent` must be >= 0.
    void set(int32_t parent, int32_t token, int32_t value) {
        if (2 * (size_ + 1) > slots_.size()) rehash(2 * slots_.size());
        const uint64_t k = key(parent, token);
        for (size_t i = slot_of(k);; i = (i + 1) & mask_) {
            Slot& s = slots_[i];
            if (s.key == k) {
                s.value = value;
                return;
            }
            if (s.key == kEmpty) {
                s.key = k;
                s.value = value;
                ++size_;
                return;
            }
        }
    }

    /// Drops every entry (keeps the capacity).
    void clear() {
        for (Slot& s : slots_) s.key = kEmpty;
        size_ = 0;
    }
    size_t size() const { return size_; }
    size_t memory_bytes() const { return slots_.size() * sizeof(Slot); }

private:
    struct Slot {
        uint64_t key;
        int32_t value;
    };
    // (parent = -1, token = -1) is never stored: parents are >= 0.
    static constexpr uint64_t kEmpty = ~uint64_t{0};

    static uint64_t key(int32_t parent, int32_t token) {
        return (uint64_t{static_cast<uint32_t>(parent)} << 32) | static_cast<uint32_t>(token);
    }
    size_t slot_of(uint64_t k) const { return static_cast<size_t>((k * 0x9E3779B97F4A7C15ull) >> shift_) & mask_; }
    void rehash(size_t capacity) {  // capacity: a power of two
        std::vector<Slot> old;
        old.swap(slots_);
        slots_.assign(capacity, Slot{kEmpty, -1});
        mask_ = capacity - 1;
        shift_ = 64;
        for (size_t c = capacity; c > 1; c >>= 1) --shift_;
        size_ = 0;
        for (const Slot& s : old)
            if (s.key != kEmpty) {
                for (size_t i = slot_of(s.key);; i = (i + 1) & mask_)
                    if (slots_[i].key == kEmpty) {
                        slots_[i] = s;
                        break;
                    }
                ++size_;
            }
    }

    std::vector<Slot> slots_;
    size_t mask_ = 0;
    unsigned shift_ = 64;
    size_t size_ = 0;
};

}  // namespace tagflow::traj
