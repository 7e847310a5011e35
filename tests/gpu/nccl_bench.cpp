// SPDX-License-Identifier: Apache-2.0
// nccl_bench: speed of the NCCL backend (gpu/nccl_collectives.hpp) on this machine's GPUs, one
// member per GPU (threads), for weight-like payloads (many fp32 tensors of 4 MiB).
// Baseline measured in the same run: a plain cudaMemcpy host->device->host round trip of the
// same bytes through one bucket-sized device buffer, i.e. the copy cost that CPU staging can
// not beat. Prints one table row per (op, size); never asserts timings. Exits 0 with a note
// when no GPU is visible.
//   nccl_bench [--max-mb 256] [--bucket-mb 32] [--iters 5] [--gpus N]
#include <ATen/ATen.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "common/error.hpp"
#include "gpu/nccl_collectives.hpp"

using tagflow::gpu::NcclCollectives;

namespace {

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

// Seconds for one H2D + D2H round trip of `bytes`, bucket by bucket through one device buffer.
double memcpy_round_trip(char* host, size_t bytes, size_t bucket) {
    void* d = nullptr;
    if (cudaMalloc(&d, bucket) != cudaSuccess) throw tagflow::Error("cudaMalloc failed");
    double t0 = now_s();
    for (size_t off = 0; off < bytes; off += bucket) {
        size_t n = std::min(bucket, bytes - off);
        cudaMemcpy(d, host + off, n, cudaMemcpyHostToDevice);
        cudaMemcpy(host + off, d, n, cudaMemcpyDeviceToHost);
    }
    cudaDeviceSynchronize();
    double t = now_s() - t0;
    cudaFree(d);
    return t;
}

}  // namespace

int main(int argc, char** argv) {
    long max_mb = 256, bucket_mb = 32, iters = 5, want_gpus = 0;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        auto next = [&]() -> long {
            if (i + 1 >= argc) {
                std::fprintf(stderr, "nccl_bench: %s needs a value\n", a.c_str());
                std::exit(2);
            }
            return std::strtol(argv[++i], nullptr, 10);
        };
        if (a == "--max-mb") max_mb = next();
        else if (a == "--bucket-mb") bucket_mb = next();
        else if (a == "--iters") iters = next();
        else if (a == "--gpus") want_gpus = next();
        else {
            std::fprintf(stderr, "usage: nccl_bench [--max-mb N] [--bucket-mb N] [--iters N] [--gpus N]\n");
            return a == "--help" || a == "-h" ? 0 : 2;
        }
    }
    if (max_mb < 4 || bucket_mb < 1 || iters < 1) {
        std::fprintf(stderr, "nccl_bench: need --max-mb >= 4, --bucket-mb >= 1, --iters >= 1\n");
        return 2;
    }
    std::string why;
    int ndev = tagflow::gpu::cuda_device_count(&why);
    if (ndev == 0) {
        std::printf("nccl_bench: no GPU visible (%s); nothing measured\n", why.c_str());
        return 0;
    }
    int n = want_gpus > 0 ? std::min<int>(static_cast<int>(want_gpus), ndev) : ndev;
    size_t bucket = static_cast<size_t>(bucket_mb) << 20;
    std::printf("nccl_bench: %s, %d GPU(s), bucket %ld MiB, median of %ld\n", tagflow::gpu::nccl_build_info().c_str(),
                n, bucket_mb, iters);
    auto group = NcclCollectives::local_group(n, bucket);
    std::printf("%-22s %10s %8s %10s %9s %14s\n", "op", "MiB", "buckets", "ms", "GB/s", "vs memcpy rt");

    for (long mb = 4; mb <= max_mb; mb *= 4) {
        size_t elems = static_cast<size_t>(mb) << 18;  // fp32
        size_t per_tensor = size_t{1} << 20;           // 4 MiB tensors
        std::vector<std::vector<at::Tensor>> cpu(static_cast<size_t>(n)), gpu(static_cast<size_t>(n));
        for (int r = 0; r < n; ++r)
            for (size_t off = 0; off < elems; off += per_tensor) {
                auto t = at::full({static_cast<int64_t>(std::min(per_tensor, elems - off))}, 1.0f, at::kFloat);
                cpu[static_cast<size_t>(r)].push_back(t);
                if (at::hasCUDA())
                    gpu[static_cast<size_t>(r)].push_back(
                        t.to(at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(r))));
            }
        // Baseline: the same bytes, one contiguous host buffer, round trip on device 0.
        std::vector<char> host(elems * 4, 1);
        cudaSetDevice(0);
        memcpy_round_trip(host.data(), host.size(), bucket);  // warm-up
        std::vector<double> base;
        for (long it = 0; it < iters; ++it) base.push_back(memcpy_round_trip(host.data(), host.size(), bucket));
        double base_s = median(base);
        std::printf("%-22s %10ld %8s %10.2f %9.2f %14s\n", "memcpy round trip", mb, "-", base_s * 1e3,
                    2.0 * static_cast<double>(host.size()) / base_s / 1e9, "1.00");

        struct Case {
            const char* name;
            std::vector<std::vector<at::Tensor>>* data;
            bool bcast;
        };
        std::vector<Case> cases = {{"allreduce cpu-staged", &cpu, false}, {"broadcast cpu-staged", &cpu, true}};
        if (at::hasCUDA()) {
            cases.push_back({"allreduce cuda", &gpu, false});
            cases.push_back({"broadcast cuda", &gpu, true});
        }
        for (const Case& c : cases) {
            std::vector<double> t;
            tagflow::train::SyncStats last;
            for (long it = 0; it <= iters; ++it) {  // first one is the warm-up
                std::vector<tagflow::train::SyncStats> st(static_cast<size_t>(n));
                std::vector<std::thread> th;
                for (int r = 0; r < n; ++r)
                    th.emplace_back([&, r] {
                        auto& m = *group[static_cast<size_t>(r)];
                        auto& d = (*c.data)[static_cast<size_t>(r)];
                        st[static_cast<size_t>(r)] = c.bcast ? m.broadcast(d, 0) : m.allreduce_sum(d);
                    });
                for (auto& x : th) x.join();
                double worst = 0;
                for (auto& s : st) worst = std::max(worst, s.seconds);
                if (it > 0) t.push_back(worst);
                last = st[0];
            }
            double s = median(t);
            std::printf("%-22s %10ld %8d %10.2f %9.2f %14.2f\n", c.name, mb, last.buckets, s * 1e3,
                        static_cast<double>(last.bytes) / s / 1e9, s / base_s);
        }
    }
    return 0;
}
