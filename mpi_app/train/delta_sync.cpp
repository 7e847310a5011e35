// SPDX-License-Identifier: Apache-2.0
// delta_sync: flat view, the root's delta tracker, bucket encoders/decoders (no MPI).
#include "train/delta_sync.hpp"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "common/error.hpp"

namespace tagflow::train {
namespace {

constexpr size_t kCompareChunk = 1024;  // elements compared with one memcmp before looking closer

uint32_t bits_of(float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    return u;
}

float float_of(uint32_t u) {
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}

// Maps increasing bucket-local indices to tensor memory.
class Cursor {
public:
    explicit Cursor(std::vector<FlatView::Piece> p) : p_(std::move(p)) {}
    float* at(size_t j) {
        while (j >= base_ + p_[k_].count) base_ += p_[k_++].count;
        return p_[k_].data + (j - base_);
    }

private:
    std::vector<FlatView::Piece> p_;
    size_t k_ = 0, base_ = 0;
};

}  // namespace

// ---- FlatView ----

FlatView::FlatView(const std::vector<at::Tensor>& tensors) {
    start_.reserve(tensors.size() + 1);
    start_.push_back(0);
    for (const at::Tensor& t : tensors) {
        TORCH_CHECK(t.scalar_type() == at::kFloat, "weight sync: fp32 tensors only");
        TORCH_CHECK(t.device().is_cpu() && t.is_contiguous(), "weight sync: contiguous CPU tensors only");
        ptr_.push_back(t.numel() ? t.data_ptr<float>() : nullptr);
        start_.push_back(start_.back() + static_cast<size_t>(t.numel()));
    }
    // Contiguous runs: a non-empty tensor starts a new run unless it begins where the
    // previous non-empty tensor ended.
    float* end = nullptr;
    for (size_t k = 0; k < ptr_.size(); ++k) {
        size_t n = start_[k + 1] - start_[k];
        if (n == 0) continue;
        if (ptr_[k] != end) runs_.push_back(start_[k]);
        end = ptr_[k] + n;
    }
    runs_.push_back(size());
}

at::Tensor share_one_buffer(const std::vector<at::Tensor>& params) {
    int64_t total = 0;
    for (const at::Tensor& p : params) {
        TORCH_CHECK(p.scalar_type() == at::kFloat && p.device().is_cpu(), "share_one_buffer: fp32 CPU tensors only");
        total += p.numel();
    }
    at::Tensor flat = at::empty({total}, at::TensorOptions().dtype(at::kFloat));
    int64_t off = 0;
    for (const at::Tensor& p : params) {
        at::Tensor view = flat.narrow(0, off, p.numel()).view(p.sizes());
        view.copy_(p.detach());
        const_cast<at::Tensor&>(p).set_data(view);
        off += p.numel();
    }
    return flat;
}

void bump_versions(const std::vector<at::Tensor>& params) {
    for (const at::Tensor& p : params) p.unsafeGetTensorImpl()->bump_version();
}

uint64_t hash_bits(const std::vector<at::Tensor>& tensors) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (const at::Tensor& t : tensors) {
        const at::Tensor c = t.detach().to(at::kCPU).contiguous();
        const auto* p = static_cast<const unsigned char*>(c.data_ptr());
        const size_t n = static_cast<size_t>(c.numel()) * c.element_size();
        size_t i = 0;
        for (; i + 8 <= n; i += 8) {
            uint64_t w = 0;
            std::memcpy(&w, p + i, 8);
            h = (h ^ w) * 0x100000001b3ULL;
        }
        for (; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ULL;
    }
    return h;
}

std::vector<FlatView::Piece> FlatView::pieces(size_t first, size_t count) const {
    std::vector<Piece> out;
    if (count == 0) return out;
    if (first + count > size()) throw InternalError("FlatView::pieces: range past the end");
    // The last tensor starting at or before `first` (empty tensors share a start; skip them).
    size_t k = static_cast<size_t>(std::upper_bound(start_.begin(), start_.end(), first) - start_.begin()) - 1;
    size_t at = first, end = first + count;
    for (; at < end; ++k) {
        size_t lo = start_[k], hi = start_[k + 1];
        if (hi <= at) continue;
        size_t n = std::min(hi, end) - at;
        float* p = ptr_[k] + (at - lo);
        if (!out.empty() && out.back().data + out.back().count == p) out.back().count += n;
        else out.push_back({p, n});
        at += n;
    }
    return out;
}

std::vector<std::pair<size_t, size_t>> FlatView::plan_buckets(size_t bucket_bytes) const {
    size_t per = std::max<size_t>(1, bucket_bytes / sizeof(float));
    per = std::min<size_t>(per, size_t{1} << 30);  // MPI counts are int
    std::vector<std::pair<size_t, size_t>> out;
    size_t group = 0, grouped = 0;  // the open group of whole small tensors: [group, group + grouped)
    auto flush = [&] {
        if (grouped) out.emplace_back(group, grouped);
        grouped = 0;
    };
    for (size_t r = 0; r + 1 < runs_.size(); ++r) {
        size_t lo = runs_[r], n = runs_[r + 1] - lo;
        if (n > per) {
            flush();
            for (size_t c = 0; c < n; c += per) out.emplace_back(lo + c, std::min(per, n - c));
            continue;
        }
        if (grouped + n > per) flush();
        if (grouped == 0) group = lo;
        grouped += n;
    }
    flush();
    return out;
}

void FlatView::gather(size_t first, size_t count, float* out) const {
    for (const Piece& p : pieces(first, count)) {
        std::memcpy(out, p.data, p.count * sizeof(float));
        out += p.count;
    }
}

void FlatView::scatter(size_t first, size_t count, const float* in) const {
    for (const Piece& p : pieces(first, count)) {
        std::memcpy(p.data, in, p.count * sizeof(float));
        in += p.count;
    }
}

// ---- encodings ----

const char* to_string(DeltaEncoding e) {
    switch (e) {
        case DeltaEncoding::kSkip: return "skip";
        case DeltaEncoding::kSparse: return "sparse";
        case DeltaEncoding::kBitmask: return "bitmask";
        case DeltaEncoding::kDense: return "dense";
    }
    return "unknown";
}

size_t delta_payload_words(DeltaEncoding e, size_t count, size_t changed) {
    switch (e) {
        case DeltaEncoding::kSkip: return 0;
        case DeltaEncoding::kSparse: return 2 * changed;
        case DeltaEncoding::kBitmask: return (count + 31) / 32 + changed;
        case DeltaEncoding::kDense: return count;
    }
    return count;
}

DeltaEncoding choose_delta_encoding(size_t count, size_t changed, double min_saving) {
    if (changed == 0) return DeltaEncoding::kSkip;
    size_t sparse = delta_payload_words(DeltaEncoding::kSparse, count, changed);
    size_t mask = delta_payload_words(DeltaEncoding::kBitmask, count, changed);
    DeltaEncoding best = sparse <= mask ? DeltaEncoding::kSparse : DeltaEncoding::kBitmask;
    double words = static_cast<double>(std::min(sparse, mask));
    return words <= (1.0 - min_saving) * static_cast<double>(count) ? best : DeltaEncoding::kDense;
}

// ---- DeltaTracker ----

void DeltaTracker::clear() {
    snapshot_.clear();
    snapshot_.shrink_to_fit();
    stamp_.clear();
    stamp_.shrink_to_fit();
    last_version_ = -1;
}

std::vector<size_t> DeltaTracker::record(const FlatView& v, const std::vector<std::pair<size_t, size_t>>& buckets,
                                         int32_t version, int32_t since) {
    if (version < 0 || (!empty() && version <= last_version_))
        throw Error("weight sync: version " + std::to_string(version) + " is not newer than the last one sent (" +
                    std::to_string(last_version_) + ")");
    const size_t n = v.size();
    std::vector<size_t> counts(buckets.size(), 0);
    if (snapshot_.size() != n || n == 0) {  // first record: everything is new
        snapshot_.resize(n);
        stamp_.assign(n, version);
        v.gather(0, n, snapshot_.data());
        last_version_ = version;
        if (since < version)
            for (size_t b = 0; b < buckets.size(); ++b) counts[b] = buckets[b].second;
        return counts;
    }
    // Every receiver holds the last recorded version: what changed now is what must be sent.
    const bool fast = since >= last_version_;
    for (size_t b = 0; b < buckets.size(); ++b) {
        auto [first, count] = buckets[b];
        size_t changed = 0, f = first;
        for (const FlatView::Piece& p : v.pieces(first, count)) {
            float* snap = snapshot_.data() + f;
            int32_t* st = stamp_.data() + f;
            for (size_t j = 0; j < p.count; j += kCompareChunk) {
                size_t m = std::min(kCompareChunk, p.count - j);
                if (std::memcmp(p.data + j, snap + j, m * sizeof(float)) == 0) continue;
                for (size_t i = j; i < j + m; ++i) {
                    if (bits_of(p.data[i]) != bits_of(snap[i])) {
                        snap[i] = p.data[i];
                        st[i] = version;
                        ++changed;
                    }
                }
            }
            f += p.count;
        }
        if (since >= version) counts[b] = 0;
        else if (fast) counts[b] = changed;
        else counts[b] = count_since(first, count, since);
    }
    last_version_ = version;
    return counts;
}

size_t DeltaTracker::count_since(size_t first, size_t count, int32_t since) const {
    if (first + count > stamp_.size()) throw InternalError("DeltaTracker::count_since: range past the end");
    const int32_t* st = stamp_.data() + first;
    size_t k = 0;
    for (size_t i = 0; i < count; ++i) k += st[i] > since;
    return k;
}

void DeltaTracker::encode(size_t first, size_t count, DeltaEncoding e, int32_t since, size_t changed,
                          uint32_t* out) const {
    if (first + count > snapshot_.size()) throw InternalError("DeltaTracker::encode: range past the end");
    const int32_t* st = stamp_.data() + first;
    const float* val = snapshot_.data() + first;
    size_t w = 0;
    if (e == DeltaEncoding::kSparse) {
        uint32_t* vals = out + changed;
        for (size_t i = 0; i < count; ++i) {
            if (st[i] <= since) continue;
            if (w == changed) break;
            out[w] = static_cast<uint32_t>(i);
            vals[w++] = bits_of(val[i]);
        }
    } else if (e == DeltaEncoding::kBitmask) {
        size_t nmask = (count + 31) / 32;
        std::fill(out, out + nmask, 0u);
        uint32_t* vals = out + nmask;
        for (size_t i = 0; i < count; ++i) {
            if (st[i] <= since) continue;
            if (w == changed) break;
            out[i >> 5] |= 1u << (i & 31);
            vals[w++] = bits_of(val[i]);
        }
    } else {
        throw InternalError(std::string("DeltaTracker::encode: not a delta encoding: ") + to_string(e));
    }
    if (w != changed) throw InternalError("DeltaTracker::encode: changed count does not match the stamps");
}

void apply_delta(const FlatView& v, size_t first, size_t count, DeltaEncoding e, size_t changed,
                 const uint32_t* payload) {
    if (changed == 0) return;
    Cursor cur(v.pieces(first, count));
    if (e == DeltaEncoding::kSparse) {
        const uint32_t* vals = payload + changed;
        size_t prev = 0;
        for (size_t w = 0; w < changed; ++w) {
            size_t j = payload[w];
            if (j >= count || (w > 0 && j <= prev)) throw InternalError("weight sync: malformed sparse bucket");
            *cur.at(j) = float_of(vals[w]);
            prev = j;
        }
    } else if (e == DeltaEncoding::kBitmask) {
        size_t nmask = (count + 31) / 32, w = 0;
        const uint32_t* vals = payload + nmask;
        for (size_t m = 0; m < nmask; ++m) {
            for (uint32_t bits = payload[m]; bits; bits &= bits - 1) {
                size_t j = m * 32 + static_cast<size_t>(__builtin_ctz(bits));
                if (j >= count || w == changed) throw InternalError("weight sync: malformed bitmask bucket");
                *cur.at(j) = float_of(vals[w++]);
            }
        }
        if (w != changed) throw InternalError("weight sync: malformed bitmask bucket");
    } else {
        throw InternalError(std::string("apply_delta: not a delta encoding: ") + to_string(e));
    }
}

}  // namespace tagflow::train
