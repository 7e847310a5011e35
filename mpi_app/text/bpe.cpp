// SPDX-License-Identifier: Apache-2.0
// bpe: see bpe.hpp. Merge order and the checks made when loading follow Hugging Face's
// models/bpe/model.rs and word.rs (merge_all): the lowest rank first, ties to the left; a merge
// whose tokens or result are not in the vocabulary is an error; a later duplicate pair wins.
#include "text/bpe.hpp"

#include <algorithm>
#include <cstring>
#include <queue>
#include <stdexcept>
#include <unordered_map>

#include "text/utf8.hpp"

namespace tagflow::text {

// ---- the byte-level alphabet ----

namespace {

struct ByteMap {
    char32_t to_char[256];
    int16_t from_char[324];  // characters are < U+0144
    ByteMap() {
        std::fill(std::begin(from_char), std::end(from_char), static_cast<int16_t>(-1));
        int n = 0;
        for (int b = 0; b < 256; ++b) {
            const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
            to_char[b] = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++);
            from_char[to_char[b]] = static_cast<int16_t>(b);
        }
    }
};
const ByteMap& byte_map() {
    static const ByteMap m;
    return m;
}

}  // namespace

char32_t byte_to_char(unsigned char b) { return byte_map().to_char[b]; }

int char_to_byte(char32_t c) { return c < 324 ? byte_map().from_char[c] : -1; }

bool byte_level_to_bytes(std::string_view token, std::string* out) {
    std::string r;
    r.reserve(token.size());
    for (std::size_t i = 0; i < token.size();) {
        std::size_t len = 0;
        const int b = char_to_byte(utf8_decode(token, i, &len));
        if (b < 0) return false;
        r += static_cast<char>(b);
        i += len;
    }
    *out = std::move(r);
    return true;
}

uint64_t hash_bytes(std::string_view s) noexcept {
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ s.size();
    std::size_t i = 0;
    for (; i + 8 <= s.size(); i += 8) {
        uint64_t w;
        std::memcpy(&w, s.data() + i, 8);
        h = (h ^ w) * 0xff51afd7ed558ccdULL;
        h ^= h >> 32;
    }
    uint64_t w = 0;
    for (std::size_t k = 0; i < s.size(); ++i, ++k)
        w |= static_cast<uint64_t>(static_cast<unsigned char>(s[i])) << (8 * k);
    h = (h ^ w) * 0xc4ceb9fe1a85ec53ULL;
    h ^= h >> 29;
    return h;
}

// ---- merges ----

void MergeTable::reserve(std::size_t n) {
    std::size_t cap = 16;
    while (cap < 2 * n + 16) cap <<= 1;
    slots_.assign(cap, Slot{});
    mask_ = cap - 1;
    size_ = 0;
}

void MergeTable::put(int32_t a, int32_t b, BpeMerge m) {
    if (slots_.empty() || 2 * (size_ + 1) > slots_.size()) {
        std::vector<Slot> old = std::move(slots_);
        reserve(std::max<std::size_t>(size_ + 1, old.size()));
        for (const Slot& s : old)
            if (s.key != kEmpty)
                put(static_cast<int32_t>(s.key >> 32), static_cast<int32_t>(s.key & 0xffffffffULL), s.merge);
    }
    const uint64_t key = pack(a, b);
    std::size_t i = mix(key) & mask_;
    while (slots_[i].key != kEmpty && slots_[i].key != key) i = (i + 1) & mask_;
    if (slots_[i].key == kEmpty) ++size_;
    slots_[i].key = key;
    slots_[i].merge = m;
}

namespace {

constexpr uint32_t kNoRank = 0xffffffffu;

void merge_linear(std::vector<int32_t>& ids, const MergeTable& merges) {
    const std::size_t n = ids.size();
    if (n < 2) return;
    // rank/new id of the pair (ids[i], ids[i+1]); kept in step with `ids` as symbols merge
    thread_local std::vector<BpeMerge> pair;
    pair.resize(n - 1);
    for (std::size_t i = 0; i + 1 < n; ++i) {
        const BpeMerge* m = merges.find(ids[i], ids[i + 1]);
        pair[i] = m ? *m : BpeMerge{kNoRank, 0};
    }
    std::size_t len = n;
    for (;;) {
        std::size_t best = len;
        uint32_t best_rank = kNoRank;
        for (std::size_t i = 0; i + 1 < len; ++i)
            if (pair[i].rank < best_rank) {
                best_rank = pair[i].rank;
                best = i;
            }
        if (best == len) break;
        ids[best] = pair[best].new_id;
        std::copy(ids.begin() + static_cast<std::ptrdiff_t>(best) + 2, ids.begin() + static_cast<std::ptrdiff_t>(len),
                  ids.begin() + static_cast<std::ptrdiff_t>(best) + 1);
        std::copy(pair.begin() + static_cast<std::ptrdiff_t>(best) + 1,
                  pair.begin() + static_cast<std::ptrdiff_t>(len) - 1,
                  pair.begin() + static_cast<std::ptrdiff_t>(best));
        --len;
        if (best > 0) {
            const BpeMerge* m = merges.find(ids[best - 1], ids[best]);
            pair[best - 1] = m ? *m : BpeMerge{kNoRank, 0};
        }
        if (best + 1 < len) {
            const BpeMerge* m = merges.find(ids[best], ids[best + 1]);
            pair[best] = m ? *m : BpeMerge{kNoRank, 0};
        }
    }
    ids.resize(len);
}

// Word::merge_all of Hugging Face: symbols in a linked list, a min-heap of (rank, position);
// stale heap entries are recognised by the pair no longer producing the same token. Buffers are
// per thread and reused, so a huge word costs no fresh page faults the second time.
void merge_heap(std::vector<int32_t>& ids, const MergeTable& merges) {
    const std::size_t n = ids.size();
    struct Entry {
        uint32_t rank;
        uint32_t pos;
        int32_t new_id;
        bool operator>(const Entry& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
    };
    thread_local std::vector<Entry> heap;
    heap.clear();
    for (std::size_t i = 0; i + 1 < n; ++i)
        if (const BpeMerge* m = merges.find(ids[i], ids[i + 1]))
            heap.push_back({m->rank, static_cast<uint32_t>(i), m->new_id});
    if (heap.empty()) return;
    const auto cmp = std::greater<Entry>();
    std::make_heap(heap.begin(), heap.end(), cmp);
    thread_local std::vector<int32_t> prev, next;  // -1: none; next == -2 marks a removed symbol
    prev.resize(n);
    next.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
        prev[i] = static_cast<int32_t>(i) - 1;
        next[i] = i + 1 < n ? static_cast<int32_t>(i + 1) : -1;
    }
    const auto push = [&](uint32_t rank, std::size_t pos, int32_t new_id) {
        heap.push_back({rank, static_cast<uint32_t>(pos), new_id});
        std::push_heap(heap.begin(), heap.end(), cmp);
    };
    while (!heap.empty()) {
        std::pop_heap(heap.begin(), heap.end(), cmp);
        const Entry top = heap.back();
        heap.pop_back();
        if (next[top.pos] < 0) continue;  // removed, or the last symbol
        const auto right = static_cast<std::size_t>(next[top.pos]);
        const BpeMerge* cur = merges.find(ids[top.pos], ids[right]);
        if (!cur || cur->new_id != top.new_id) continue;
        ids[top.pos] = top.new_id;
        next[top.pos] = next[right];
        next[right] = -2;
        if (next[top.pos] >= 0) prev[static_cast<std::size_t>(next[top.pos])] = static_cast<int32_t>(top.pos);
        if (prev[top.pos] >= 0) {
            const auto p = static_cast<std::size_t>(prev[top.pos]);
            if (const BpeMerge* m = merges.find(ids[p], ids[top.pos])) push(m->rank, p, m->new_id);
        }
        if (next[top.pos] >= 0) {
            const auto q = static_cast<std::size_t>(next[top.pos]);
            if (const BpeMerge* m = merges.find(ids[top.pos], ids[q])) push(m->rank, top.pos, m->new_id);
        }
    }
    std::size_t w = 0;
    for (std::size_t i = 0; i < n; ++i)
        if (next[i] != -2) ids[w++] = ids[i];
    ids.resize(w);
}

// The heap's order when merges are monotone: the lowest pending rank never decreases, so the
// pending pairs wait in one bucket per rank; a bucket is complete when its turn comes (new pairs
// only go to higher ranks) and is then taken in position order, as the heap would pop it.
void merge_buckets(std::vector<int32_t>& ids, const MergeTable& merges) {
    const std::size_t n = ids.size();
    std::unordered_map<uint32_t, std::vector<uint32_t>> buckets;
    std::priority_queue<uint32_t, std::vector<uint32_t>, std::greater<uint32_t>> ranks;
    const auto add = [&](uint32_t rank, std::size_t pos) {
        auto& v = buckets[rank];
        if (v.empty()) ranks.push(rank);
        v.push_back(static_cast<uint32_t>(pos));
    };
    for (std::size_t i = 0; i + 1 < n; ++i)
        if (const BpeMerge* m = merges.find(ids[i], ids[i + 1])) add(m->rank, i);
    if (ranks.empty()) return;
    thread_local std::vector<int32_t> prev, next;  // -1: none; next == -2 marks a removed symbol
    prev.resize(n);
    next.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
        prev[i] = static_cast<int32_t>(i) - 1;
        next[i] = i + 1 < n ? static_cast<int32_t>(i + 1) : -1;
    }
    std::vector<uint32_t> todo;
    while (!ranks.empty()) {
        const uint32_t rank = ranks.top();
        ranks.pop();
        const auto it = buckets.find(rank);
        todo.swap(it->second);
        buckets.erase(it);
        if (!std::is_sorted(todo.begin(), todo.end())) std::sort(todo.begin(), todo.end());
        for (const uint32_t pos : todo) {
            if (next[pos] < 0) continue;  // removed, or the last symbol
            const auto right = static_cast<std::size_t>(next[pos]);
            const BpeMerge* cur = merges.find(ids[pos], ids[right]);
            if (!cur || cur->rank != rank) continue;  // stale: this pair changed since
            ids[pos] = cur->new_id;
            next[pos] = next[right];
            next[right] = -2;
            if (next[pos] >= 0) prev[static_cast<std::size_t>(next[pos])] = static_cast<int32_t>(pos);
            if (prev[pos] >= 0) {
                const auto p = static_cast<std::size_t>(prev[pos]);
                if (const BpeMerge* m = merges.find(ids[p], ids[pos])) add(m->rank, p);
            }
            if (next[pos] >= 0) {
                if (const BpeMerge* m = merges.find(ids[pos], ids[static_cast<std::size_t>(next[pos])]))
                    add(m->rank, pos);
            }
        }
        todo.clear();
    }
    std::size_t w = 0;
    for (std::size_t i = 0; i < n; ++i)
        if (next[i] != -2) ids[w++] = ids[i];
    ids.resize(w);
}

}  // namespace

void bpe_merge(std::vector<int32_t>& ids, const MergeTable& merges, std::size_t heap_from, int kind) {
    if (kind == 0) kind = ids.size() < heap_from ? 1 : merges.monotone() ? 3 : 2;
    if (kind == 1) {
        merge_linear(ids, merges);
    } else if (kind == 2) {
        merge_heap(ids, merges);
    } else {
        merge_buckets(ids, merges);
    }
}

// ---- the model ----

struct BpeModel::VocabIndex {
    std::unordered_map<std::string, int32_t> by_bytes;
};

// Word cache: open addressing over (hash, key, ids) in two arenas, cleared when half full, so its
// memory stays bounded on any input (10 MB of distinct words included).
struct BpeModel::Cache {
    static constexpr std::size_t kSlots = 1u << 17;
    static constexpr std::size_t kMaxKey = 256;  // longer words are not cached (as Hugging Face)
    struct Slot {
        uint64_t hash = 0;
        uint32_t key_off = 0, key_len = 0, ids_off = 0, ids_len = 0;
        bool used = false;
    };
    std::mutex mu;
    std::vector<Slot> slots = std::vector<Slot>(kSlots);
    std::string keys;
    std::vector<int32_t> ids;
    std::size_t used = 0;

    bool get(std::string_view word, uint64_t h, std::vector<int32_t>& out) {
        std::lock_guard<std::mutex> lock(mu);
        for (std::size_t i = h & (kSlots - 1);; i = (i + 1) & (kSlots - 1)) {
            const Slot& s = slots[i];
            if (!s.used) return false;
            if (s.hash == h && s.key_len == word.size() &&
                std::memcmp(keys.data() + s.key_off, word.data(), word.size()) == 0) {
                out.insert(out.end(), ids.begin() + s.ids_off, ids.begin() + s.ids_off + s.ids_len);
                return true;
            }
        }
    }
    void put(std::string_view word, uint64_t h, const int32_t* v, std::size_t n) {
        if (word.size() > kMaxKey) return;
        std::lock_guard<std::mutex> lock(mu);
        if (2 * (used + 1) > kSlots) {
            std::fill(slots.begin(), slots.end(), Slot{});
            keys.clear();
            ids.clear();
            used = 0;
        }
        std::size_t i = h & (kSlots - 1);
        while (slots[i].used) {
            if (slots[i].hash == h && slots[i].key_len == word.size() &&
                std::memcmp(keys.data() + slots[i].key_off, word.data(), word.size()) == 0)
                return;  // another thread put it first
            i = (i + 1) & (kSlots - 1);
        }
        Slot& s = slots[i];
        s = Slot{h,
                 static_cast<uint32_t>(keys.size()),
                 static_cast<uint32_t>(word.size()),
                 static_cast<uint32_t>(ids.size()),
                 static_cast<uint32_t>(n),
                 true};
        keys.append(word);
        ids.insert(ids.end(), v, v + n);
        ++used;
    }
};

BpeModel::BpeModel(const std::vector<std::pair<std::string, int32_t>>& vocab,
                   const std::vector<std::pair<std::string, std::string>>& merges, bool ignore_merges)
    : ignore_merges_(ignore_merges), vocab_index_(std::make_unique<VocabIndex>()), cache_(std::make_unique<Cache>()) {
    std::unordered_map<std::string, int32_t> by_string;
    by_string.reserve(vocab.size());
    for (const auto& [tok, id] : vocab) by_string.emplace(tok, id);
    vocab_index_->by_bytes.reserve(vocab.size());
    for (const auto& [tok, id] : vocab) {
        std::string bytes;
        if (byte_level_to_bytes(tok, &bytes)) vocab_index_->by_bytes.emplace(std::move(bytes), id);
    }
    for (int b = 0; b < 256; ++b) {
        std::string one;
        utf8_append(one, byte_to_char(static_cast<unsigned char>(b)));
        const auto it = by_string.find(one);
        if (it == by_string.end()) {
            char buf[96];
            std::snprintf(buf, sizeof buf, "the vocabulary lacks the byte-level token for byte 0x%02X", b);
            throw std::runtime_error(buf);
        }
        byte_id_[b] = it->second;
    }
    merges_.reserve(merges.size());
    for (std::size_t r = 0; r < merges.size(); ++r) {
        const auto& [a, b] = merges[r];
        const auto ia = by_string.find(a), ib = by_string.find(b);
        if (ia == by_string.end() || ib == by_string.end())
            throw std::runtime_error("merge " + std::to_string(r) + " (\"" + a + " " + b +
                                     "\") names a token not in the vocabulary: \"" + (ia == by_string.end() ? a : b) +
                                     "\"");
        const auto im = by_string.find(a + b);
        if (im == by_string.end())
            throw std::runtime_error("merge " + std::to_string(r) + " (\"" + a + " " + b + "\"): the merged token \"" +
                                     a + b + "\" is not in the vocabulary");
        merges_.put(ia->second, ib->second, BpeMerge{static_cast<uint32_t>(r), im->second});
    }
    // monotone: every merge ranks after the last merge that can produce either of its tokens
    std::unordered_map<int32_t, int64_t> last_producer;
    for (std::size_t r = 0; r < merges.size(); ++r) {
        const int32_t c = by_string.at(merges[r].first + merges[r].second);
        int64_t& lp = last_producer[c];
        lp = std::max<int64_t>(lp, static_cast<int64_t>(r) + 1);  // stored +1: 0 means "none"
    }
    bool monotone = true;
    for (std::size_t r = 0; r < merges.size() && monotone; ++r) {
        const int32_t a = by_string.at(merges[r].first), b = by_string.at(merges[r].second);
        const auto pa = last_producer.find(a), pb = last_producer.find(b);
        if ((pa != last_producer.end() && pa->second - 1 >= static_cast<int64_t>(r)) ||
            (pb != last_producer.end() && pb->second - 1 >= static_cast<int64_t>(r)))
            monotone = false;
    }
    merges_.set_monotone(monotone);
}

BpeModel::~BpeModel() = default;

void BpeModel::merge_uncached(std::string_view word, std::vector<int32_t>& out) const {
    if (ignore_merges_) {
        const auto it = vocab_index_->by_bytes.find(std::string(word));
        if (it != vocab_index_->by_bytes.end()) {
            out.push_back(it->second);
            return;
        }
    }
    thread_local std::vector<int32_t> ids;
    ids.resize(word.size());
    for (std::size_t i = 0; i < word.size(); ++i) ids[i] = byte_id_[static_cast<unsigned char>(word[i])];
    bpe_merge(ids, merges_);
    out.insert(out.end(), ids.begin(), ids.end());
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>& out) const {
    if (word.size() == 1) {
        out.push_back(byte_id_[static_cast<unsigned char>(word[0])]);
        return;
    }
    const uint64_t h = hash_bytes(word);
    if (cache_->get(word, h, out)) return;
    const std::size_t start = out.size();
    merge_uncached(word, out);
    cache_->put(word, h, out.data() + start, out.size() - start);
}

}  // namespace tagflow::text
