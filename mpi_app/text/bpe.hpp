// SPDX-License-Identifier: Apache-2.0
// bpe: the byte-level BPE model of a Hugging Face tokenizer.json (vocabulary, ranked merges,
// ignore_merges) and a per-word cache. Words are raw UTF-8 bytes; the GPT-2 byte-to-character
// map is applied to the vocabulary once at load time instead of to every word.
// Does not split text into words (hf_tokenizer.cpp does) and reads no files.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tagflow::text {

/// GPT-2's byte <-> character map (bytes_char() in Hugging Face's byte_level.rs).
char32_t byte_to_char(unsigned char b);
/// The byte of a byte-level character, or -1 when `c` is not one of the 256.
int char_to_byte(char32_t c);
/// A token string of the byte-level alphabet turned back into raw bytes; false (and `out`
/// untouched) when some character is outside the alphabet.
bool byte_level_to_bytes(std::string_view token, std::string* out);

/// One merge: the pair's rank (its line in the file) and the id of the merged token.
struct BpeMerge {
    uint32_t rank;
    int32_t new_id;
};

/// Open-addressing map (id a, id b) -> BpeMerge.
class MergeTable {
public:
    void reserve(std::size_t n);
    /// Inserts or replaces (a later merge of the same pair wins, as in Hugging Face).
    void put(int32_t a, int32_t b, BpeMerge m);
    const BpeMerge* find(int32_t a, int32_t b) const {
        const uint64_t key = pack(a, b);
        std::size_t i = mix(key) & mask_;
        for (;;) {
            const Slot& s = slots_[i];
            if (s.key == key) return &s.merge;
            if (s.key == kEmpty) return nullptr;
            i = (i + 1) & mask_;
        }
    }
    std::size_t size() const { return size_; }
    /// True when every merge ranks after every merge that can produce one of its two tokens (as
    /// a trained BPE does). Then the lowest pending rank never decreases while a word is merged,
    /// and long words use a bucket queue instead of a heap (same order, linear in practice).
    bool monotone() const { return monotone_; }
    void set_monotone(bool m) { monotone_ = m; }

private:
    static constexpr uint64_t kEmpty = ~0ULL;
    struct Slot {
        uint64_t key = kEmpty;
        BpeMerge merge{0, 0};
    };
    static uint64_t pack(int32_t a, int32_t b) {
        return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
    }
    static uint64_t mix(uint64_t k) {
        k ^= k >> 33;
        k *= 0xff51afd7ed558ccdULL;
        k ^= k >> 33;
        return k;
    }
    std::vector<Slot> slots_;
    std::size_t mask_ = 0, size_ = 0;
    bool monotone_ = false;
};

/// Applies the merges to `ids` in place: repeatedly the pair of lowest rank, leftmost first.
/// This is the order of Hugging Face's Word::merge_all (a heap of (rank, position)); words
/// of `heap_from` symbols or more use that heap (or, with monotone() merges, rank buckets),
/// shorter ones a linear scan. `kind` forces one algorithm (tests): 0 auto, 1 linear, 2 heap,
/// 3 buckets.
void bpe_merge(std::vector<int32_t>& ids, const MergeTable& merges, std::size_t heap_from = 96, int kind = 0);

/// The model: vocabulary keyed by raw bytes, merges, the byte -> id table and the word cache.
class BpeModel {
public:
    /// `vocab` holds the file's token strings; `merges` pairs of token strings in rank order.
    /// Throws std::runtime_error naming the problem (the caller adds the file name).
    BpeModel(const std::vector<std::pair<std::string, int32_t>>& vocab,
             const std::vector<std::pair<std::string, std::string>>& merges, bool ignore_merges);
    ~BpeModel();

    /// Appends the ids of one word (raw bytes, non-empty) to `out`.
    void encode_word(std::string_view word, std::vector<int32_t>& out) const;

    std::size_t merges_size() const { return merges_.size(); }

private:
    struct Cache;
    void merge_uncached(std::string_view word, std::vector<int32_t>& out) const;

    MergeTable merges_;
    int32_t byte_id_[256];
    bool ignore_merges_;
    struct VocabIndex;  // raw-byte token -> id (ignore_merges: whole word)
    std::unique_ptr<VocabIndex> vocab_index_;
    std::unique_ptr<Cache> cache_;
};

/// 64-bit hash of a byte string (used by the caches and the vocabulary index).
uint64_t hash_bytes(std::string_view s) noexcept;

}  // namespace tagflow::text
