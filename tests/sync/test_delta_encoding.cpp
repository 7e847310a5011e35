// SPDX-License-Identifier: Apache-2.0
// test_delta_encoding: the MPI-free half of the delta weight sync (train/delta_sync.hpp) —
// flat view pieces, encoding choice and sizes, and tracker encode -> apply_delta round trips
// (bit-identical, lagging receivers, values that change and change back). No MPI here; the
// collective protocol is tested in test_weight_sync.cpp.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "common/error.hpp"
#include "train/delta_sync.hpp"

using namespace tagflow;
using namespace tagflow::train;

namespace {

std::vector<at::Tensor> zeros_like_shapes() {
    return {at::zeros({7, 5}), at::zeros({0}), at::zeros({1}), at::zeros({300}), at::zeros({0}), at::zeros({33, 3})};
}

std::vector<at::Tensor> clone_all(const std::vector<at::Tensor>& ts) {
    std::vector<at::Tensor> out;
    for (const auto& t : ts) out.push_back(t.clone());
    return out;
}

bool bit_equal(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
    for (size_t i = 0; i < a.size(); ++i)
        if (a[i].numel() && std::memcmp(a[i].data_ptr<float>(), b[i].data_ptr<float>(),
                                        static_cast<size_t>(a[i].numel()) * sizeof(float)) != 0)
            return false;
    return true;
}

std::vector<std::pair<size_t, size_t>> buckets_of(size_t n, size_t per) {
    std::vector<std::pair<size_t, size_t>> b;
    for (size_t i = 0; i < n; i += per) b.emplace_back(i, std::min(per, n - i));
    return b;
}

// Sends `version` of `root` to `recv` (which holds `since`) bucket by bucket, as the MPI
// protocol does, but in one process. Returns the payload words sent.
size_t sync_once(DeltaTracker& tr, const std::vector<at::Tensor>& root, const std::vector<at::Tensor>& recv,
                 int32_t version, int32_t since, size_t per) {
    FlatView rv(root), dv(recv);
    auto buckets = buckets_of(rv.size(), per);
    auto counts = tr.record(rv, buckets, version, since);
    size_t words = 0;
    for (size_t b = 0; b < buckets.size(); ++b) {
        auto [first, count] = buckets[b];
        DeltaEncoding e = choose_delta_encoding(count, counts[b], 0.125);
        if (e == DeltaEncoding::kSkip) continue;
        if (e == DeltaEncoding::kDense) {
            std::vector<float> tmp(count);
            rv.gather(first, count, tmp.data());
            dv.scatter(first, count, tmp.data());
            words += count;
            continue;
        }
        std::vector<uint32_t> buf(delta_payload_words(e, count, counts[b]));
        tr.encode(first, count, e, since, counts[b], buf.data());
        apply_delta(dv, first, count, e, counts[b], buf.data());
        words += buf.size();
    }
    return words;
}

}  // namespace

TEST(DeltaEncoding, ChoiceAndSizes) {
    EXPECT_EQ(choose_delta_encoding(1024, 0, 0.125), DeltaEncoding::kSkip);
    EXPECT_EQ(choose_delta_encoding(1024, 1, 0.125), DeltaEncoding::kSparse);
    EXPECT_EQ(choose_delta_encoding(1024, 31, 0.125), DeltaEncoding::kSparse);    // 62 < 32 + 31
    EXPECT_EQ(choose_delta_encoding(1024, 33, 0.125), DeltaEncoding::kBitmask);   // 66 > 32 + 33
    EXPECT_EQ(choose_delta_encoding(1024, 864, 0.125), DeltaEncoding::kBitmask);  // 896 words = 7/8
    EXPECT_EQ(choose_delta_encoding(1024, 865, 0.125), DeltaEncoding::kDense);
    EXPECT_EQ(choose_delta_encoding(1024, 900, 0.0), DeltaEncoding::kBitmask);
    EXPECT_EQ(choose_delta_encoding(1024, 1024, 0.0), DeltaEncoding::kDense);
    EXPECT_EQ(choose_delta_encoding(1, 1, 0.125), DeltaEncoding::kDense);
    EXPECT_EQ(delta_payload_words(DeltaEncoding::kSparse, 100, 7), 14u);
    EXPECT_EQ(delta_payload_words(DeltaEncoding::kBitmask, 100, 7), 4u + 7u);
    EXPECT_EQ(delta_payload_words(DeltaEncoding::kDense, 100, 7), 100u);
    EXPECT_EQ(delta_payload_words(DeltaEncoding::kSkip, 100, 0), 0u);
}

TEST(DeltaEncoding, FlatViewPiecesSkipEmptyTensors) {
    auto ts = zeros_like_shapes();  // 35, 0, 1, 300, 0, 99
    FlatView v(ts);
    EXPECT_EQ(v.size(), 435u);
    auto p = v.pieces(30, 10);  // 5 of tensor 0, 1 of tensor 2, 4 of tensor 3
    ASSERT_EQ(p.size(), 3u);
    EXPECT_EQ(p[0].data, ts[0].data_ptr<float>() + 30);
    EXPECT_EQ(p[0].count, 5u);
    EXPECT_EQ(p[1].data, ts[2].data_ptr<float>());
    EXPECT_EQ(p[1].count, 1u);
    EXPECT_EQ(p[2].data, ts[3].data_ptr<float>());
    EXPECT_EQ(p[2].count, 4u);
    auto q = v.pieces(336, 99);  // exactly the last tensor
    ASSERT_EQ(q.size(), 1u);
    EXPECT_EQ(q[0].data, ts[5].data_ptr<float>());
    EXPECT_THROW(v.pieces(400, 36), InternalError);
    EXPECT_THROW(FlatView({at::zeros({2}, at::kDouble)}), c10::Error);
    EXPECT_THROW(FlatView({at::zeros({4, 4}).t()}), c10::Error);  // not contiguous
}

TEST(DeltaEncoding, BucketsFollowTensorBoundaries) {
    auto ts = zeros_like_shapes();  // 35, 0, 1, 300, 0, 99 floats
    FlatView v(ts);
    using R = std::vector<std::pair<size_t, size_t>>;
    // 25 floats per bucket: big tensors in chunks (one piece each), small ones grouped whole.
    R b25 = v.plan_buckets(100);
    ASSERT_EQ(b25.size(), 19u);
    EXPECT_EQ(b25[0], (std::pair<size_t, size_t>{0, 25}));
    EXPECT_EQ(b25[1], (std::pair<size_t, size_t>{25, 10}));
    EXPECT_EQ(b25[2], (std::pair<size_t, size_t>{35, 1}));
    EXPECT_EQ(b25[3], (std::pair<size_t, size_t>{36, 25}));
    EXPECT_EQ(b25.back(), (std::pair<size_t, size_t>{411, 24}));
    // 64 floats: tensors 0 and 2 grouped (36), then 300 = 4 x 64 + 44, then 99 = 64 + 35.
    EXPECT_EQ(v.plan_buckets(256),
              (R{{0, 36}, {36, 64}, {100, 64}, {164, 64}, {228, 64}, {292, 44}, {336, 64}, {400, 35}}));
    EXPECT_EQ(v.plan_buckets(1 << 20), (R{{0, 435}}));
    size_t covered = 0;
    for (auto [first, count] : v.plan_buckets(4)) {
        EXPECT_EQ(first, covered);
        EXPECT_EQ(v.pieces(first, count).size(), 1u);
        covered += count;
    }
    EXPECT_EQ(covered, 435u);
}

TEST(DeltaEncoding, OneSharedBufferMakesOnePiece) {
    auto ts = zeros_like_shapes();
    for (auto& t : ts) t.uniform_();
    auto before = clone_all(ts);
    auto p = ts[3];  // another handle to the same tensor (as a module or optimiser holds)
    at::Tensor buf = share_one_buffer(ts);
    EXPECT_EQ(buf.numel(), 435);
    EXPECT_TRUE(bit_equal(ts, before));
    EXPECT_EQ(p.data_ptr<float>(), ts[3].data_ptr<float>());
    FlatView v(ts);
    EXPECT_EQ(v.pieces(0, 435).size(), 1u);
    auto b = v.plan_buckets(100);  // one run: 17 chunks of 25 + 10, across tensor boundaries
    ASSERT_EQ(b.size(), 18u);
    EXPECT_EQ(b[1], (std::pair<size_t, size_t>{25, 25}));
    EXPECT_EQ(b.back(), (std::pair<size_t, size_t>{425, 10}));
}

TEST(DeltaEncoding, RoundTripsAreBitIdentical) {
    auto root = zeros_like_shapes();
    auto recv = zeros_like_shapes();
    for (auto& t : recv) t.fill_(-7.f);  // garbage: the first sync must overwrite everything
    std::mt19937 rng(5);
    for (auto& t : root) t.normal_();
    DeltaTracker tr;
    const size_t per = 16;  // bucket boundaries inside tensors
    size_t words = sync_once(tr, root, recv, 0, -1, per);
    EXPECT_EQ(words, 435u);  // everything, dense
    EXPECT_TRUE(bit_equal(root, recv));

    FlatView rv(root);
    std::vector<float*> cells;
    for (const auto& p : rv.pieces(0, rv.size()))
        for (size_t i = 0; i < p.count; ++i) cells.push_back(p.data + i);
    for (int32_t ver = 1; ver <= 6; ++ver) {
        std::uniform_int_distribution<size_t> pick(0, cells.size() - 1);
        int n = ver == 3 ? 0 : ver == 4 ? 200 : 5;  // v3: no change; v4: ~half (bitmask/dense)
        for (int i = 0; i < n; ++i) *cells[pick(rng)] += 1.f;
        if (ver == 5) {  // bit-level changes that == would miss: -0.0 vs 0.0, NaN payloads
            *cells[0] = 0.f;
            *cells[1] = -0.f;
            *cells[2] = std::numeric_limits<float>::quiet_NaN();
        }
        if (ver == 6) {
            *cells[0] = -0.f;
            uint32_t u = 0x7fc00001u;  // another NaN
            std::memcpy(cells[2], &u, sizeof u);
        }
        words = sync_once(tr, root, recv, ver, ver - 1, per);
        EXPECT_TRUE(bit_equal(root, recv)) << "version " << ver;
        if (ver == 3) {
            EXPECT_EQ(words, 0u);
        }
        if (ver == 1) {
            EXPECT_LT(words, 435u / 4);
        }
    }
    EXPECT_THROW(tr.record(rv, buckets_of(rv.size(), per), 6, 5), Error);  // not newer
}

TEST(DeltaEncoding, LaggingReceiverGetsEverythingSinceItsVersion) {
    auto root = zeros_like_shapes();
    for (auto& t : root) t.uniform_();
    auto fresh = clone_all(root);   // holds version 0
    auto recent = clone_all(root);  // follows every version
    DeltaTracker tr;
    const size_t per = 32;
    sync_once(tr, root, recent, 0, -1, per);
    float* x = root[3].data_ptr<float>() + 10;
    float orig = *x;
    *x = 5.f;  // v1: x changes ...
    root[0].data_ptr<float>()[3] = 9.f;
    sync_once(tr, root, recent, 1, 0, per);
    *x = orig;  // v2: ... and changes back: equal to v0 again, yet `recent` must get it
    sync_once(tr, root, recent, 2, 1, per);
    EXPECT_TRUE(bit_equal(root, recent));
    root[5].data_ptr<float>()[98] = 1.f;  // v3: one more change
    // One encoding serves both: everything with stamp > 0 (the oldest held version).
    DeltaTracker copy = tr;
    auto recent_copy = clone_all(recent);
    sync_once(tr, root, fresh, 3, 0, per);
    sync_once(copy, root, recent_copy, 3, 0, per);
    EXPECT_TRUE(bit_equal(root, fresh));
    EXPECT_TRUE(bit_equal(root, recent_copy));
}

TEST(DeltaEncoding, MalformedPayloadThrows) {
    auto ts = zeros_like_shapes();
    FlatView v(ts);
    uint32_t sparse[4] = {5, 3, 0, 0};  // indices must increase
    EXPECT_THROW(apply_delta(v, 0, 16, DeltaEncoding::kSparse, 2, sparse), InternalError);
    uint32_t past[2] = {16, 0};  // index past the bucket
    EXPECT_THROW(apply_delta(v, 0, 16, DeltaEncoding::kSparse, 1, past), InternalError);
    uint32_t mask[3] = {0x3u, 0, 0};  // two bits set, one value announced
    EXPECT_THROW(apply_delta(v, 0, 16, DeltaEncoding::kBitmask, 1, mask), InternalError);
}
