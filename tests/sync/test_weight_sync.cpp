// SPDX-License-Identifier: Apache-2.0
// test_weight_sync: the train root -> receivers weight broadcast over real MPI ranks (np 1, 2,
// 4): dense (broadcast_tensors, WeightSync) and delta (WeightSync) leave every rank's tensors
// bit-identical to the root's over several versions with random sparse changes, no changes,
// whole-tensor changes (dense fallback), bit-level changes (-0.0, NaN payloads), bucket
// boundaries inside tensors, receivers lagging several versions, reset(), and bad input that
// must make every rank throw together; receivers' version counters move. Every rank rebuilds the root's expected weights from the
// same seed, so checks need no extra communication. WeightPush/WeightPull (the async modes'
// point-to-point sync): dense and delta, receivers that skip versions (each gets its own delta),
// one that holds nothing (a full version), all bit-identical to the root.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <random>

#include "common/error.hpp"
#include "mpi_test_util.hpp"
#include "train/delta_sync_mpi.hpp"
#include "train/weight_push_mpi.hpp"
#include "train/weight_sync_mpi.hpp"

using namespace tagflow;
using namespace tagflow::train;

using tagflow::test::all_ranks;
using tagflow::test::same_everywhere;
using tagflow::test::world_rank;
using tagflow::test::world_size;

namespace {

// Shapes with empty tensors and sizes that put bucket boundaries inside tensors: 435 floats.
std::vector<at::Tensor> make_tensors(float fill) {
    std::vector<at::Tensor> ts = {at::zeros({7, 5}), at::zeros({0}), at::zeros({1}),
                                  at::zeros({300}),  at::zeros({0}), at::zeros({33, 3})};
    for (auto& t : ts) t.fill_(fill);
    return ts;
}

bool bit_equal(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
    for (size_t i = 0; i < a.size(); ++i)
        if (a[i].numel() && std::memcmp(a[i].data_ptr<float>(), b[i].data_ptr<float>(),
                                        static_cast<size_t>(a[i].numel()) * sizeof(float)) != 0)
            return false;
    return true;
}

void copy_into(const std::vector<at::Tensor>& dst, const std::vector<at::Tensor>& src) {
    for (size_t i = 0; i < dst.size(); ++i) dst[i].copy_(src[i]);
}

// The root's weights, version by version, identical on every rank (same seed).
class Model {
public:
    Model() : ref(make_tensors(0.f)), rng_(1234) {
        FlatView v(ref);
        for (const auto& p : v.pieces(0, v.size()))
            for (size_t i = 0; i < p.count; ++i) cells_.push_back(p.data + i);
        for (float* c : cells_) *c = normal_(rng_);
    }
    size_t size() const { return cells_.size(); }
    // `n` random elements get a new value.
    void change_random(int n) {
        std::uniform_int_distribution<size_t> pick(0, cells_.size() - 1);
        for (int i = 0; i < n; ++i) *cells_[pick(rng_)] = normal_(rng_);
    }
    void change_tensor(size_t k) { ref[k].add_(1.f); }
    float& cell(size_t i) { return *cells_[i]; }
    std::vector<at::Tensor> ref;

private:
    std::mt19937 rng_;
    std::normal_distribution<float> normal_{0.f, 1.f};
    std::vector<float*> cells_;
};

}  // namespace

TEST(WeightSync, DenseBroadcastIsBitIdentical) {
    const int root = world_size() - 1;
    Model m;
    m.cell(3) = -0.f;
    m.cell(4) = std::numeric_limits<float>::quiet_NaN();
    for (size_t bucket : {size_t{4}, size_t{64}, size_t{1} << 20}) {
        auto ts = make_tensors(static_cast<float>(world_rank()) + 0.5f);
        if (world_rank() == root) copy_into(ts, m.ref);
        SyncStats st = broadcast_tensors(ts, MPI_COMM_WORLD, root, bucket);
        EXPECT_TRUE(all_ranks(bit_equal(ts, m.ref))) << "bucket " << bucket;
        EXPECT_EQ(st.bytes, 435 * 4);
        EXPECT_EQ(static_cast<size_t>(st.buckets), (435 * 4 + bucket - 1) / bucket);
    }
    // WeightSync in dense mode: the same, with its stats.
    WeightSync ws({/*bucket_bytes=*/100, /*delta=*/false, 0.125});
    auto ts = make_tensors(-1.f);
    if (world_rank() == root) copy_into(ts, m.ref);
    std::vector<int64_t> before;
    for (const auto& t : ts) before.push_back(static_cast<int64_t>(t._version()));
    WeightSyncStats st = ws.broadcast(ts, 0, MPI_COMM_WORLD, root);
    EXPECT_TRUE(all_ranks(bit_equal(ts, m.ref)));
    // Written through raw pointers: receivers' version counters move (the rollout decoder
    // re-snapshots on them), the root's stay.
    for (size_t i = 0; i < ts.size(); ++i)
        EXPECT_EQ(static_cast<int64_t>(ts[i]._version()), before[i] + (world_rank() == root ? 0 : 1)) << "tensor " << i;
    EXPECT_EQ(st.bytes, st.dense_bytes);
    EXPECT_EQ(st.dense_bytes, 435 * 4);
    EXPECT_EQ(st.buckets, 19);  // tensor-aligned buckets of 25 floats: 35 = 25 + 10, {1}, 12 x 25, 99 = 4
    EXPECT_EQ(static_cast<size_t>(st.buckets), FlatView(ts).plan_buckets(100).size());
    EXPECT_EQ(ws.held_version(), 0);
    EXPECT_STREQ(ws.mode(), "mpi_bcast");
}

TEST(WeightSync, DeltaVersionsStayBitIdentical) {
    const int root = 0;
    const bool is_root = world_rank() == root;
    const bool receivers = world_size() > 1;
    for (size_t bucket : {size_t{16}, size_t{256}, size_t{1} << 20}) {
        Model m;
        WeightSync ws({bucket, /*delta=*/true, 0.125});
        EXPECT_STREQ(ws.mode(), "mpi_bcast_delta");
        auto ts = make_tensors(static_cast<float>(world_rank()) * 3.f + 1.f);  // garbage on receivers
        const int64_t dense = 435 * 4;
        for (int32_t ver = 0; ver <= 7; ++ver) {
            switch (ver) {
                case 1: m.change_random(4); break;  // sparse
                case 2: break;                      // no change at all
                case 3:
                    m.change_tensor(3);
                    m.change_random(2);
                    break;                            // dense fallback for tensor 3
                case 4: m.change_random(120); break;  // bitmask-sized changes
                case 5:                               // bit-level changes
                    m.cell(0) = 0.f;
                    m.cell(1) = -0.f;
                    m.cell(2) = std::numeric_limits<float>::quiet_NaN();
                    break;
                case 6: {
                    m.cell(0) = -0.f;
                    uint32_t u = 0x7fc00001u;  // a NaN with another payload
                    std::memcpy(&m.cell(2), &u, sizeof u);
                    break;
                }
                case 7:
                    for (auto& t : m.ref) t.mul_(0.5f);
                    break;  // all but 0, -0 and NaN
                default: break;
            }
            if (is_root) copy_into(ts, m.ref);
            WeightSyncStats st = ws.broadcast(ts, ver, MPI_COMM_WORLD, root);
            EXPECT_TRUE(all_ranks(bit_equal(ts, m.ref))) << "bucket " << bucket << " version " << ver;
            EXPECT_TRUE(all_ranks(same_everywhere(st.bytes) && same_everywhere(st.buckets)));
            EXPECT_EQ(ws.held_version(), ver);
            EXPECT_EQ(st.version, ver);
            EXPECT_EQ(st.dense_bytes, dense);
            EXPECT_LE(st.bytes, st.dense_bytes);
            if (!receivers) {  // the root alone: nothing to send, ever
                EXPECT_EQ(st.bytes, 0);
                continue;
            }
            if (ver == 0) {
                EXPECT_EQ(st.bytes, dense);  // receivers held nothing
            }
            if (ver == 7) {  // all but the zeros and NaNs changed
                EXPECT_GT(st.bytes, dense * 9 / 10);
            }
            if (ver == 1 || ver == 5 || ver == 6) {
                EXPECT_LT(st.bytes, dense / 10) << "version " << ver;
            }
            if (ver == 2) {
                EXPECT_EQ(st.bytes, 0);
                EXPECT_EQ(st.buckets, 0);
                EXPECT_EQ(static_cast<size_t>(st.skipped_buckets), FlatView(ts).plan_buckets(bucket).size());
            }
            if (ver == 3 && bucket == 16) {
                EXPECT_GT(st.dense_buckets, 0);
            }
            if (ver == 4 && bucket == 256) {
                EXPECT_GT(st.bitmask_buckets, 0);
            }
            if (ver == 1 && bucket == 256) {
                EXPECT_GT(st.sparse_buckets, 0);
            }
            EXPECT_EQ(st.buckets, st.dense_buckets + st.sparse_buckets + st.bitmask_buckets);
        }
    }
}

TEST(WeightSync, LaggingReceiverIsServedByTheSameBroadcast) {
    if (world_size() < 2) GTEST_SKIP() << "needs a receiver";
    const int last = world_size() - 1;
    // Versions 1..3 go to every rank but the last (at np 2: the root alone); version 4 to all.
    MPI_Comm most = MPI_COMM_NULL;
    MPI_Comm_split(MPI_COMM_WORLD, world_rank() == last ? MPI_UNDEFINED : 0, 0, &most);
    Model m;
    WeightSync ws({64, true, 0.125});
    auto ts = make_tensors(-3.f);
    if (world_rank() == 0) copy_into(ts, m.ref);
    ws.broadcast(ts, 0, MPI_COMM_WORLD, 0);
    const float x0 = m.cell(100);
    for (int32_t ver = 1; ver <= 3; ++ver) {
        if (ver == 1) m.cell(100) = 42.f;  // changes at 1 ...
        if (ver == 3) m.cell(100) = x0;    // ... and back to the version-0 value at 3
        m.change_random(3);
        if (world_rank() == 0) copy_into(ts, m.ref);
        if (most != MPI_COMM_NULL) {
            ws.broadcast(ts, ver, most, 0);
            EXPECT_TRUE(bit_equal(ts, m.ref));
        }
    }
    EXPECT_EQ(ws.held_version(), world_rank() == last ? 0 : 3);
    m.change_random(2);
    if (world_rank() == 0) copy_into(ts, m.ref);
    WeightSyncStats st = ws.broadcast(ts, 4, MPI_COMM_WORLD, 0);
    EXPECT_TRUE(all_ranks(bit_equal(ts, m.ref)));
    EXPECT_EQ(st.base_version, 0);  // the oldest version a receiver held
    EXPECT_LT(st.bytes, st.dense_bytes / 4);
    if (most != MPI_COMM_NULL) MPI_Comm_free(&most);
}

TEST(WeightSync, ResetAsksForAFullSync) {
    if (world_size() < 2) GTEST_SKIP() << "needs a receiver";
    Model m;
    WeightSync ws({128, true, 0.125});
    auto ts = make_tensors(0.f);
    if (world_rank() == 0) copy_into(ts, m.ref);
    ws.broadcast(ts, 0, MPI_COMM_WORLD, 0);
    m.change_random(1);
    if (world_rank() == 0) copy_into(ts, m.ref);
    if (world_rank() == world_size() - 1) {
        ws.reset();  // this receiver's tensors were touched: it needs everything
        ts[3].fill_(7.f);
    }
    WeightSyncStats st = ws.broadcast(ts, 1, MPI_COMM_WORLD, 0);
    EXPECT_TRUE(all_ranks(bit_equal(ts, m.ref)));
    EXPECT_EQ(st.base_version, -1);
    EXPECT_EQ(st.bytes, st.dense_bytes);
}

TEST(WeightSync, BadInputThrowsOnEveryRank) {
    Model m;
    WeightSync ws({64, true, 0.125});
    auto ts = make_tensors(0.f);
    if (world_rank() == 0) copy_into(ts, m.ref);
    ws.broadcast(ts, 5, MPI_COMM_WORLD, 0);
    EXPECT_THROW(ws.broadcast(ts, 5, MPI_COMM_WORLD, 0), Error);  // version not newer
    EXPECT_THROW(ws.broadcast(ts, -1, MPI_COMM_WORLD, 0), Error);
    // One rank has a different element count: every rank throws before anything moves.
    auto other = ts;
    if (world_rank() == world_size() - 1) other.push_back(at::zeros({2}));
    if (world_size() > 1) {
        EXPECT_THROW(ws.broadcast(other, 6, MPI_COMM_WORLD, 0), Error);
    }
    ws.broadcast(ts, 6, MPI_COMM_WORLD, 0);  // still usable afterwards
    EXPECT_TRUE(all_ranks(bit_equal(ts, m.ref)));
    EXPECT_THROW(WeightSync({0, true, 0.125}), ConfigError);
    EXPECT_THROW(WeightSync({64, true, 1.0}), ConfigError);
}

// Receiver r (r >= 1) is pushed version v when v % r == 0 (rank 1 every version, rank 2 every
// other, ...), so receivers hold different versions and each needs its own delta; the last
// receiver was not told to hold version 0 (its tensors hold garbage), so its first push is full.
TEST(WeightPush, ReceiversThatSkipVersionsStayBitIdentical) {
    if (world_size() < 2) GTEST_SKIP() << "needs a receiver";
    const int me = world_rank(), last = world_size() - 1;
    for (bool delta : {false, true}) {
        Model m;
        auto ts = make_tensors(me == 0 || me == last ? -5.f : 0.f);
        const auto buckets = FlatView(ts).plan_buckets(64);
        std::vector<int> all, known;
        for (int r = 1; r <= last; ++r) {
            all.push_back(r);
            if (r != last || last == 1) known.push_back(r);
        }
        if (me != last || last == 1) copy_into(ts, m.ref);  // version 0, held by all but `last`
        if (me == 0) copy_into(ts, m.ref);
        WeightPush push({delta, 0.125}, buckets, MPI_COMM_WORLD, 9000);
        WeightPull pull(buckets, MPI_COMM_WORLD, 0, 9000);
        EXPECT_STREQ(push.mode(), delta ? "mpi_isend_delta" : "mpi_isend");
        if (me == 0) push.hold(FlatView(ts), 0, known);
        if (me != 0) {
            if (me != last || last == 1) pull.set_held(0);
            pull.post();
        }
        for (int32_t ver = 1; ver <= 6; ++ver) {
            m.change_random(ver == 4 ? 200 : 3);
            if (ver == 5) m.change_tensor(0);
            std::vector<int> to;
            for (int r : all)
                if (ver % r == 0 || r == last) to.push_back(r);
            if (me == 0) {
                copy_into(ts, m.ref);
                WeightSyncStats st = push.start(FlatView(ts), ver, to);
                while (!push.done()) {}
                EXPECT_EQ(st.version, ver);
                EXPECT_LE(st.bytes, st.dense_bytes);
                if (!delta) {
                    EXPECT_EQ(st.bytes, st.dense_bytes);
                }
                if (delta && ver == 1 && last == 1) {
                    EXPECT_LT(st.bytes, st.dense_bytes / 4);
                }
                for (int r : to) EXPECT_EQ(push.held(r), ver);
            } else if (std::count(to.begin(), to.end(), me)) {
                while (!pull.ready()) {}
                EXPECT_EQ(pull.incoming(), ver);
                EXPECT_EQ(pull.apply(FlatView(ts)), ver);
                EXPECT_EQ(pull.held(), ver);
                EXPECT_TRUE(bit_equal(ts, m.ref)) << (delta ? "delta" : "dense") << " version " << ver;
            }
            EXPECT_TRUE(all_ranks(true));  // the version is done everywhere before the next
        }
        // A receive still posted on the tag would take the next pair's first header (a lost
        // version, and a hang): cancel it everywhere before the root can push again.
        if (me != 0) pull.cancel();
        EXPECT_TRUE(all_ranks(true));
    }
}

TEST(WeightPush, MisuseThrows) {
    Model m;
    auto ts = make_tensors(0.f);
    const auto buckets = FlatView(ts).plan_buckets(64);
    WeightPush push({true, 0.125}, buckets, MPI_COMM_WORLD, 9000);
    push.hold(FlatView(ts), 3, {});
    EXPECT_THROW(push.start(FlatView(ts), 3, {}), InternalError);  // not newer
    EXPECT_THROW(push.hold(FlatView(ts), 2, {}), InternalError);
    EXPECT_NO_THROW(push.start(FlatView(ts), 4, {}));  // no receivers: nothing sent
    EXPECT_TRUE(push.done());
    EXPECT_THROW(WeightPush({true, 1.0}, buckets, MPI_COMM_WORLD, 9000), ConfigError);
    EXPECT_THROW(WeightPull(buckets, MPI_COMM_WORLD, 0, std::numeric_limits<int>::max() - 1), ConfigError);
}
