// SPDX-License-Identifier: Apache-2.0
// Serial.gpu.*: the NCCL backend (gpu/nccl_collectives.hpp). The bucket planner and the
// no-GPU error path run everywhere; the collectives need a GPU and are skipped (GTEST_SKIP,
// shown as skipped by ctest) without one. One member per visible GPU (at most 4), each on its
// own thread: a single-GPU machine runs them as a group of one.
// Does not test the MPI bootstrap (test_nccl_mpi.cpp) or speed (nccl_bench.cpp).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <exception>
#include <functional>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "common/error.hpp"
#include "gpu/nccl_collectives.hpp"

using tagflow::gpu::Bucket;
using tagflow::gpu::NcclCollectives;
using tagflow::gpu::plan_buckets;

namespace {

int gpus() { return tagflow::gpu::cuda_device_count(); }

#define SKIP_WITHOUT_GPU()                                                                   \
    do {                                                                                     \
        std::string why_;                                                                    \
        if (tagflow::gpu::cuda_device_count(&why_) == 0) GTEST_SKIP() << "no GPU: " << why_; \
    } while (0)

// Runs fn(member) for every member of a local group of `n` GPUs, one thread each; rethrows the
// first exception in the calling thread.
void run_group(std::vector<std::unique_ptr<NcclCollectives>>& group, const std::function<void(NcclCollectives&)>& fn) {
    std::vector<std::exception_ptr> errs(group.size());
    std::vector<std::thread> th;
    for (size_t i = 0; i < group.size(); ++i)
        th.emplace_back([&, i] {
            try {
                fn(*group[i]);
            } catch (...) {
                errs[i] = std::current_exception();
            }
        });
    for (auto& t : th) t.join();
    for (auto& e : errs)
        if (e) std::rethrow_exception(e);
}

int group_size() { return std::min(gpus(), 4); }

// Several tensors whose concatenation spans several 16 KiB buckets, with a tensor that is
// larger than a bucket, tiny ones, and an empty one.
const std::vector<int64_t> kSizes = {1, 1000, 4097, 0, 3, 70001, 17};
constexpr size_t kBucketBytes = 16 * 1024;

size_t total_elems() { return static_cast<size_t>(std::accumulate(kSizes.begin(), kSizes.end(), int64_t{0})); }
int64_t expected_buckets(size_t elem_size) {
    size_t per = kBucketBytes / elem_size;
    return static_cast<int64_t>((total_elems() + per - 1) / per);
}

// Element j of tensor i on rank r is (r+1) * ((j + 3i) % 7 + 1): small integers, exact in
// fp32/bf16/int64 sums over up to 4 ranks.
std::vector<at::Tensor> make_tensors(int r, at::ScalarType dt, at::Device dev = at::kCPU) {
    std::vector<at::Tensor> ts;
    for (size_t i = 0; i < kSizes.size(); ++i) {
        auto idx = at::arange(kSizes[i], at::kLong);
        auto v = ((idx + 3 * static_cast<int64_t>(i)).remainder(7) + 1) * (r + 1);
        ts.push_back(v.to(dt).to(dev).contiguous());
    }
    return ts;
}

}  // namespace

// ---- runs everywhere ----

TEST(NcclPlan, BucketsCoverEveryElementOnceInOrder) {
    std::vector<size_t> numels = {5, 0, 12, 3, 1};
    for (size_t per : {1, 4, 7, 21, 100}) {
        std::vector<Bucket> plan = plan_buckets(numels, per);
        size_t total = 21, seen = 0;
        EXPECT_EQ(plan.size(), (total + per - 1) / per) << "per=" << per;
        size_t tensor = 0, toff = 0;
        for (size_t b = 0; b < plan.size(); ++b) {
            EXPECT_LE(plan[b].elems, per);
            if (b + 1 < plan.size()) {
                EXPECT_EQ(plan[b].elems, per) << "only the last bucket may be short";
            }
            size_t boff = 0;
            for (const auto& p : plan[b].pieces) {
                while (numels[tensor] == 0 || toff == numels[tensor]) {  // skip finished and empty tensors
                    ++tensor;
                    toff = 0;
                }
                EXPECT_EQ(p.tensor, tensor);
                EXPECT_EQ(p.tensor_offset, toff);
                EXPECT_EQ(p.bucket_offset, boff);
                EXPECT_GT(p.count, 0u);
                toff += p.count;
                boff += p.count;
                seen += p.count;
            }
            EXPECT_EQ(boff, plan[b].elems);
        }
        EXPECT_EQ(seen, total);
    }
    EXPECT_TRUE(plan_buckets({}, 8).empty());
    EXPECT_TRUE(plan_buckets({0, 0}, 8).empty());
    EXPECT_THROW(plan_buckets({4}, 0), tagflow::InternalError);
}

TEST(NcclRuntime, NoGpuGivesOneClearError) {
    std::string why;
    if (tagflow::gpu::cuda_device_count(&why) > 0) GTEST_SKIP() << "a GPU is visible; this checks the no-GPU path";
    EXPECT_FALSE(why.empty());
    try {
        NcclCollectives::local_group(1, kBucketBytes);
        FAIL() << "local_group without a GPU must throw";
    } catch (const tagflow::Error& e) {
        EXPECT_NE(std::string(e.what()).find("no CUDA device visible"), std::string::npos) << e.what();
    }
    tagflow::gpu::NcclId id{};
    EXPECT_THROW(NcclCollectives(id, 0, 1, 0, kBucketBytes), tagflow::Error);
    EXPECT_FALSE(tagflow::gpu::nccl_build_info().empty());
}

// ---- need a GPU ----

TEST(NcclCpuStaged, AllreduceSumSeveralBuckets) {
    SKIP_WITHOUT_GPU();
    int n = group_size();
    auto group = NcclCollectives::local_group(n, kBucketBytes);
    std::vector<std::vector<at::Tensor>> data(static_cast<size_t>(n));
    std::vector<tagflow::train::SyncStats> stats(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) data[static_cast<size_t>(r)] = make_tensors(r, at::kFloat);
    run_group(group, [&](NcclCollectives& c) {
        stats[static_cast<size_t>(c.rank())] = c.allreduce_sum(data[static_cast<size_t>(c.rank())]);
    });
    double ranks_sum = n * (n + 1) / 2.0;
    for (int r = 0; r < n; ++r) {
        const auto& s = stats[static_cast<size_t>(r)];
        EXPECT_EQ(s.buckets, expected_buckets(4));
        EXPECT_GT(s.buckets, 2);
        EXPECT_EQ(s.bytes, static_cast<int64_t>(total_elems() * 4));
        EXPECT_GT(s.seconds, 0.0);
        for (size_t i = 0; i < kSizes.size(); ++i) {
            auto expect = make_tensors(0, at::kDouble)[i] * ranks_sum;
            EXPECT_TRUE(at::equal(data[static_cast<size_t>(r)][i].to(at::kDouble), expect))
                << "rank " << r << " tensor " << i;
        }
    }
}

TEST(NcclCpuStaged, BroadcastFromLastRank) {
    SKIP_WITHOUT_GPU();
    int n = group_size();
    int root = n - 1;
    auto group = NcclCollectives::local_group(n, kBucketBytes);
    std::vector<std::vector<at::Tensor>> data(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) data[static_cast<size_t>(r)] = make_tensors(r, at::kFloat);
    auto want = make_tensors(root, at::kFloat);
    run_group(group, [&](NcclCollectives& c) {
        auto s = c.broadcast(data[static_cast<size_t>(c.rank())], root);
        EXPECT_EQ(s.buckets, expected_buckets(4));
    });
    for (int r = 0; r < n; ++r)
        for (size_t i = 0; i < kSizes.size(); ++i)
            EXPECT_TRUE(at::equal(data[static_cast<size_t>(r)][i], want[i])) << "rank " << r << " tensor " << i;
}

TEST(NcclCpuStaged, Int64AndBf16) {
    SKIP_WITHOUT_GPU();
    int n = group_size();
    auto group = NcclCollectives::local_group(n, kBucketBytes);
    for (at::ScalarType dt : {at::kLong, at::kBFloat16}) {
        std::vector<std::vector<at::Tensor>> data(static_cast<size_t>(n));
        for (int r = 0; r < n; ++r) data[static_cast<size_t>(r)] = make_tensors(r, dt);
        run_group(group, [&](NcclCollectives& c) {
            auto s = c.allreduce_sum(data[static_cast<size_t>(c.rank())]);
            EXPECT_EQ(s.buckets, expected_buckets(at::elementSize(dt)));
        });
        double ranks_sum = n * (n + 1) / 2.0;
        for (int r = 0; r < n; ++r)
            for (size_t i = 0; i < kSizes.size(); ++i)
                EXPECT_TRUE(at::equal(data[static_cast<size_t>(r)][i].to(at::kDouble),
                                      make_tensors(0, at::kDouble)[i] * ranks_sum))
                    << c10::toString(dt) << " rank " << r << " tensor " << i;
    }
}

TEST(NcclCpuStaged, BadInputIsOneClearError) {
    SKIP_WITHOUT_GPU();
    auto group = NcclCollectives::local_group(1, kBucketBytes);
    auto& c = *group[0];
    std::vector<at::Tensor> mixed = {at::zeros({4}, at::kFloat), at::zeros({4}, at::kDouble)};
    EXPECT_THROW(c.allreduce_sum(mixed), tagflow::Error);
    std::vector<at::Tensor> strided = {at::zeros({4, 4}, at::kFloat).t()};
    EXPECT_THROW(c.allreduce_sum(strided), tagflow::Error);
    std::vector<at::Tensor> ok = {at::ones({4}, at::kFloat)};
    EXPECT_THROW(c.broadcast(ok, 1), tagflow::Error);  // root outside a group of 1
    EXPECT_EQ(c.allreduce_sum({}).buckets, 0);
    c.allreduce_sum(ok);  // still usable after the errors
    EXPECT_TRUE(at::equal(ok[0], at::ones({4}, at::kFloat)));
}

TEST(NcclCudaTensors, AllreduceInPlaceAndPacked) {
    SKIP_WITHOUT_GPU();
    if (!at::hasCUDA()) GTEST_SKIP() << "LibTorch is a CPU-only build (no CUDA tensors)";
    int n = group_size();
    auto group = NcclCollectives::local_group(n, kBucketBytes);
    std::vector<std::vector<at::Tensor>> data(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r)
        data[static_cast<size_t>(r)] =
            make_tensors(r, at::kFloat, at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(r)));
    run_group(group, [&](NcclCollectives& c) {
        auto s = c.allreduce_sum(data[static_cast<size_t>(c.rank())]);
        EXPECT_EQ(s.buckets, expected_buckets(4));
    });
    double ranks_sum = n * (n + 1) / 2.0;
    for (int r = 0; r < n; ++r)
        for (size_t i = 0; i < kSizes.size(); ++i) {
            EXPECT_TRUE(data[static_cast<size_t>(r)][i].is_cuda());
            EXPECT_TRUE(at::equal(data[static_cast<size_t>(r)][i].cpu().to(at::kDouble),
                                  make_tensors(0, at::kDouble)[i] * ranks_sum))
                << "rank " << r << " tensor " << i;
        }
}
