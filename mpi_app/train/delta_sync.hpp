// SPDX-License-Identifier: Apache-2.0
// delta_sync: the MPI-free half of the delta weight sync. FlatView sees many fp32 tensors as
// one flat array (no copy); DeltaTracker is the train root's record of what it sent (snapshot
// of the values + the version in which each element last changed); the per-bucket encodings
// (skip, sparse index/value pairs, bitmask + values, dense) have an encoder and a decoder.
// New values are sent, never float differences, so receivers end bit-identical to the root.
// Does no communication: train/delta_sync_mpi.hpp moves the encoded buckets.
#pragma once
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace at {
class Tensor;
}

namespace tagflow::train {

/// Many tensors as one flat fp32 array: flat index -> tensor memory. Holds raw pointers:
/// the tensors must outlive the view and keep their storage.
class FlatView {
public:
    struct Piece {
        float* data;
        size_t count;
    };
    /// Tensors must be fp32, contiguous and on the CPU (throws c10::Error otherwise).
    explicit FlatView(const std::vector<at::Tensor>& tensors);
    size_t size() const { return start_.back(); }
    /// The contiguous pieces covering flat [first, first + count), in order (empty tensors
    /// skipped; neighbouring tensors adjacent in memory make one piece).
    std::vector<Piece> pieces(size_t first, size_t count) const;
    /// Buckets of at most `bucket_bytes` (fp32) that follow memory boundaries: a contiguous
    /// run (one tensor, or neighbouring tensors that share one buffer, see
    /// share_one_buffer()) larger than a bucket is cut into bucket-sized chunks, each one piece
    /// sent with no copy; smaller runs are grouped whole (packed when sent). Depends on the
    /// shapes and on the memory layout, not only on size().
    std::vector<std::pair<size_t, size_t>> plan_buckets(size_t bucket_bytes) const;
    /// Copies flat [first, first + count) to `out`, or from `in` into the tensors.
    void gather(size_t first, size_t count, float* out) const;
    void scatter(size_t first, size_t count, const float* in) const;

private:
    std::vector<float*> ptr_;
    std::vector<size_t> start_;  // start_[k]: flat index of tensor k's first element; back() = size
    std::vector<size_t> runs_;   // flat index where each contiguous memory run starts; back() = size
};

/// Moves `params` into one fresh contiguous fp32 buffer (values kept; each tensor becomes a
/// view of it via set_data, so modules and optimisers holding them see the change). Then every
/// weight-sync bucket is one piece and moves with no copy. Returns the buffer.
at::Tensor share_one_buffer(const std::vector<at::Tensor>& params);

/// Bumps the version counter of every tensor in `params`: call it after writing their memory
/// behind autograd's back (an MPI receive into the raw pointers, a copy into the flat buffer
/// share_one_buffer() made them views of). Watchers of the counters — the rollout decoder's
/// weight snapshot (model::LlamaSlotDecoder::sync_weights) — otherwise keep the old weights.
/// Pass the parameters themselves: a `p.data()` alias has a counter of its own.
void bump_versions(const std::vector<at::Tensor>& params);

/// A hash of the tensors' bits, in order: 64-bit FNV-1a over each one's 8-byte words, then its odd
/// tail bytes (any dtype and device; a copy is made when not contiguous on the CPU). Equal hashes
/// of the same shapes = bit-identical tensors (the async modes' end-of-run weight checks).
uint64_t hash_bits(const std::vector<at::Tensor>& tensors);

/// How one bucket travels. Values are 32-bit words (float bits), indices bucket-local uint32.
enum class DeltaEncoding : int32_t {
    kSkip = 0,     ///< nothing changed: no collective at all
    kSparse = 1,   ///< k indices, then k values
    kBitmask = 2,  ///< ceil(count/32) mask words (bit i of word i/32 = element i changed), then k values
    kDense = 3,    ///< every value, straight from/into the tensors
};
const char* to_string(DeltaEncoding e);

/// Payload of one bucket of `count` elements with `changed` of them sent, in 32-bit words.
size_t delta_payload_words(DeltaEncoding e, size_t count, size_t changed);
/// The smallest encoding; dense unless the sparse/bitmask payload is at least `min_saving`
/// (a fraction of the dense payload) smaller, because decoding them costs more than a copy.
DeltaEncoding choose_delta_encoding(size_t count, size_t changed, double min_saving);

/// The root's record of the weights it sent. snapshot = the values of the last recorded
/// version; stamp[i] = the version in which element i last changed. A receiver that holds any
/// version h >= `since` is made exact by the elements with stamp > since (every other element
/// is equal in all versions from `since` on), so one broadcast serves receivers at different
/// versions as long as `since` is the oldest version any of them holds. Memory: 8 bytes per
/// element (root only).
class DeltaTracker {
public:
    bool empty() const { return snapshot_.empty(); }
    /// Last recorded version (-1 when empty).
    int32_t last_version() const { return last_version_; }
    void clear();
    /// Records `version` (must be > last_version()) of the weights in `v`: compares with the
    /// snapshot bitwise (so -0.0 vs 0.0 and NaN payloads count as changes), updates snapshot and
    /// stamps. The first record (or one after clear() or a size change) stamps every element.
    /// Returns, per bucket, how many elements have stamp > since (what must be sent).
    std::vector<size_t> record(const FlatView& v, const std::vector<std::pair<size_t, size_t>>& buckets,
                               int32_t version, int32_t since);
    /// How many elements of bucket [first, first + count) have stamp > since: what a receiver
    /// holding recorded version `since` needs (record() returns it for one `since` only).
    size_t count_since(size_t first, size_t count, int32_t since) const;
    /// Writes the sparse or bitmask payload (delta_payload_words() words) of bucket
    /// [first, first + count): the `changed` elements with stamp > since, values from the snapshot.
    void encode(size_t first, size_t count, DeltaEncoding e, int32_t since, size_t changed, uint32_t* out) const;
    const std::vector<float>& snapshot() const { return snapshot_; }

private:
    std::vector<float> snapshot_;
    std::vector<int32_t> stamp_;
    int32_t last_version_ = -1;
};

/// Receiver side: writes one bucket's sparse or bitmask payload into flat [first, first + count)
/// of `v`. Throws InternalError on a malformed payload (index out of range or not increasing,
/// bit count != changed).
void apply_delta(const FlatView& v, size_t first, size_t count, DeltaEncoding e, size_t changed,
                 const uint32_t* payload);

}  // namespace tagflow::train
