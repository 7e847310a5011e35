// SPDX-License-Identifier: Apache-2.0
#include "gpu/nccl_collectives.hpp"

#include <ATen/core/Tensor.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "common/error.hpp"

static_assert(sizeof(tagflow::gpu::NcclId) == sizeof(ncclUniqueId), "NcclId must hold an ncclUniqueId");

namespace tagflow::gpu {
namespace {

void cuda_check(cudaError_t rc, const char* call) {
    if (rc != cudaSuccess) throw Error(std::string("CUDA: ") + call + " failed: " + cudaGetErrorString(rc));
}
void nccl_check(ncclResult_t rc, const char* call) {
    if (rc != ncclSuccess) {
        std::string msg = std::string("NCCL: ") + call + " failed: " + ncclGetErrorString(rc);
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 13, 0)
        const char* last = ncclGetLastError(nullptr);
        if (last && *last) msg += std::string(" (") + last + ")";
#endif
        throw Error(msg);
    }
}
#define TAGFLOW_CUDA(call) cuda_check((call), #call)
#define TAGFLOW_NCCL(call) nccl_check((call), #call)

ncclDataType_t nccl_type(at::ScalarType t) {
    switch (t) {
        case at::kFloat: return ncclFloat32;
        case at::kHalf: return ncclFloat16;
        case at::kDouble: return ncclFloat64;
        case at::kInt: return ncclInt32;
        case at::kLong: return ncclInt64;
        case at::kChar: return ncclInt8;
        case at::kByte: return ncclUint8;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 10, 0)
        case at::kBFloat16: return ncclBfloat16;
#endif
        default: throw Error(std::string("nccl_collectives: unsupported dtype ") + c10::toString(t));
    }
}

int visible_devices_or_throw() {
    std::string why;
    int n = cuda_device_count(&why);
    if (n == 0) throw Error("NCCL backend: no CUDA device visible (" + why + ")");
    return n;
}

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

}  // namespace

int cuda_device_count(std::string* why) {
    int n = 0;
    cudaError_t rc = cudaGetDeviceCount(&n);
    if (rc != cudaSuccess) {
        if (why) *why = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(rc);
        (void)cudaGetLastError();  // reset CUDA's last-error state for later calls
        return 0;
    }
    if (n == 0 && why) *why = "cudaGetDeviceCount: 0 devices";
    return n;
}

std::string nccl_build_info() {
    int nv = 0, rt = 0, drv = 0;
    ncclGetVersion(&nv);
    cudaRuntimeGetVersion(&rt);
    cudaDriverGetVersion(&drv);
    // NCCL >= 2.9 encodes X*10000 + Y*100 + Z.
    std::string s =
        "NCCL " + std::to_string(nv / 10000) + "." + std::to_string(nv / 100 % 100) + "." + std::to_string(nv % 100);
    s += ", CUDA runtime " + std::to_string(rt / 1000) + "." + std::to_string(rt / 10 % 100);
    s += drv ? ", driver " + std::to_string(drv / 1000) + "." + std::to_string(drv / 10 % 100)
             : std::string(", no driver");
    return s;
}

std::vector<Bucket> plan_buckets(const std::vector<size_t>& numels, size_t bucket_elems) {
    if (bucket_elems == 0) throw InternalError("plan_buckets: bucket_elems must be >= 1");
    std::vector<Bucket> out;
    Bucket cur;
    for (size_t t = 0; t < numels.size(); ++t) {
        size_t off = 0;
        while (off < numels[t]) {
            size_t n = std::min(numels[t] - off, bucket_elems - cur.elems);
            cur.pieces.push_back({t, off, cur.elems, n});
            cur.elems += n;
            off += n;
            if (cur.elems == bucket_elems) {
                out.push_back(std::move(cur));
                cur = Bucket{};
            }
        }
    }
    if (cur.elems > 0) out.push_back(std::move(cur));
    return out;
}

struct NcclCollectives::Impl {
    int rank = 0, size = 1, device = 0;
    size_t bucket_bytes = 0;
    ncclComm_t comm = nullptr;
    cudaStream_t stream = nullptr;
    void* dbuf = nullptr;  // the staging bucket, bucket_bytes (at least one element)
    size_t dbuf_bytes = 0;

    ~Impl() {
        if (comm || stream || dbuf) cudaSetDevice(device);
        if (comm) ncclCommDestroy(comm);
        if (dbuf) cudaFree(dbuf);
        if (stream) cudaStreamDestroy(stream);
    }

    // A stream that is ordered with the legacy default stream (the one LibTorch uses unless
    // told otherwise), so CUDA tensors written before the call are ready and read after it.
    void make_stream() { TAGFLOW_CUDA(cudaStreamCreate(&stream)); }

    void* staging(size_t bytes) {
        if (dbuf_bytes < bytes) {
            if (dbuf) TAGFLOW_CUDA(cudaFree(dbuf));
            dbuf = nullptr;
            TAGFLOW_CUDA(cudaMalloc(&dbuf, bytes));
            dbuf_bytes = bytes;
        }
        return dbuf;
    }

    // root < 0: all-reduce (sum); else broadcast from root.
    train::SyncStats run(const std::vector<at::Tensor>& ts, int root) {
        train::SyncStats s;
        double t0 = now_s();
        if (root >= size)
            throw Error("nccl broadcast: root " + std::to_string(root) + " is not in a group of " +
                        std::to_string(size));
        if (ts.empty()) return s;
        const at::ScalarType st = ts[0].scalar_type();
        const ncclDataType_t dt = nccl_type(st);
        const size_t esz = static_cast<size_t>(ts[0].element_size());
        std::vector<size_t> numels;
        std::vector<char*> ptrs;
        std::vector<bool> on_gpu;
        for (const auto& t : ts) {
            if (t.scalar_type() != st)
                throw Error("nccl_collectives: all tensors of one call must share a dtype (" +
                            std::string(c10::toString(st)) + " vs " + c10::toString(t.scalar_type()) + ")");
            if (!t.is_contiguous()) throw Error("nccl_collectives: tensors must be contiguous");
            if (t.is_cuda()) {
                if (t.get_device() != device)
                    throw Error("nccl_collectives: CUDA tensor on device " + std::to_string(t.get_device()) +
                                " but this communicator uses device " + std::to_string(device));
            } else if (!t.device().is_cpu()) {
                throw Error("nccl_collectives: tensors must be on the CPU or on CUDA device " + std::to_string(device));
            }
            numels.push_back(static_cast<size_t>(t.numel()));
            ptrs.push_back(static_cast<char*>(t.data_ptr()));
            on_gpu.push_back(t.is_cuda());
        }
        const size_t bucket_elems = std::max<size_t>(1, bucket_bytes / esz);
        TAGFLOW_CUDA(cudaSetDevice(device));
        char* buf = static_cast<char*>(staging(bucket_elems * esz));
        const bool is_bcast = root >= 0;
        const bool send = !is_bcast || rank == root;  // this rank's values go in
        const bool recv = !is_bcast || rank != root;  // this rank's values come back
        size_t total = 0;
        for (const Bucket& b : plan_buckets(numels, bucket_elems)) {
            char* dptr = buf;
            const BucketPiece& p0 = b.pieces.front();
            const bool in_place = b.pieces.size() == 1 && on_gpu[p0.tensor];
            if (in_place) {
                dptr = ptrs[p0.tensor] + p0.tensor_offset * esz;
            } else if (send) {
                for (const BucketPiece& p : b.pieces)
                    TAGFLOW_CUDA(cudaMemcpyAsync(
                        buf + p.bucket_offset * esz, ptrs[p.tensor] + p.tensor_offset * esz, p.count * esz,
                        on_gpu[p.tensor] ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice, stream));
            }
            if (is_bcast) TAGFLOW_NCCL(ncclBroadcast(dptr, dptr, b.elems, dt, root, comm, stream));
            else TAGFLOW_NCCL(ncclAllReduce(dptr, dptr, b.elems, dt, ncclSum, comm, stream));
            if (!in_place && recv) {
                for (const BucketPiece& p : b.pieces)
                    TAGFLOW_CUDA(cudaMemcpyAsync(
                        ptrs[p.tensor] + p.tensor_offset * esz, buf + p.bucket_offset * esz, p.count * esz,
                        on_gpu[p.tensor] ? cudaMemcpyDeviceToDevice : cudaMemcpyDeviceToHost, stream));
            }
            ++s.buckets;
            total += b.elems;
        }
        TAGFLOW_CUDA(cudaStreamSynchronize(stream));
        s.bytes = static_cast<int64_t>(total * esz);
        s.seconds = now_s() - t0;
        return s;
    }
};

NcclId NcclCollectives::new_id() {
    ncclUniqueId id;
    TAGFLOW_NCCL(ncclGetUniqueId(&id));
    NcclId out;
    std::memcpy(out.bytes, id.internal, sizeof out.bytes);
    return out;
}

NcclCollectives::NcclCollectives(const NcclId& id, int rank, int size, int device, size_t bucket_bytes) {
    int ndev = visible_devices_or_throw();
    if (size < 1 || rank < 0 || rank >= size)
        throw Error("NCCL backend: rank " + std::to_string(rank) + " is not in a group of " + std::to_string(size));
    if (device < 0 || device >= ndev)
        throw Error("NCCL backend: CUDA device " + std::to_string(device) + " does not exist (" + std::to_string(ndev) +
                    " visible)");
    if (bucket_bytes == 0) throw Error("NCCL backend: bucket_bytes must be > 0");
    auto impl = std::make_unique<Impl>();
    impl->rank = rank;
    impl->size = size;
    impl->device = device;
    impl->bucket_bytes = bucket_bytes;
    TAGFLOW_CUDA(cudaSetDevice(device));
    impl->make_stream();
    ncclUniqueId uid;
    std::memcpy(uid.internal, id.bytes, sizeof uid.internal);
    TAGFLOW_NCCL(ncclCommInitRank(&impl->comm, size, uid, rank));
    impl_ = std::move(impl);
}

NcclCollectives::NcclCollectives(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

std::vector<std::unique_ptr<NcclCollectives>> NcclCollectives::local_group(int ndev, size_t bucket_bytes) {
    int visible = visible_devices_or_throw();
    if (ndev < 1 || ndev > visible)
        throw Error("NCCL backend: asked for " + std::to_string(ndev) + " devices, " + std::to_string(visible) +
                    " visible");
    if (bucket_bytes == 0) throw Error("NCCL backend: bucket_bytes must be > 0");
    std::vector<ncclComm_t> comms(static_cast<size_t>(ndev), nullptr);
    std::vector<int> devs(static_cast<size_t>(ndev));
    for (int d = 0; d < ndev; ++d) devs[static_cast<size_t>(d)] = d;
    TAGFLOW_NCCL(ncclCommInitAll(comms.data(), ndev, devs.data()));
    std::vector<std::unique_ptr<NcclCollectives>> out;
    for (int d = 0; d < ndev; ++d) {
        // Each Impl owns its comm from here on (and destroys it if a later step throws).
        auto impl = std::make_unique<Impl>();
        impl->rank = d;
        impl->size = ndev;
        impl->device = d;
        impl->bucket_bytes = bucket_bytes;
        impl->comm = comms[static_cast<size_t>(d)];
        out.push_back(std::unique_ptr<NcclCollectives>(new NcclCollectives(std::move(impl))));
    }
    for (auto& m : out) {
        TAGFLOW_CUDA(cudaSetDevice(m->impl_->device));
        m->impl_->make_stream();
    }
    return out;
}

NcclCollectives::~NcclCollectives() = default;

int NcclCollectives::rank() const { return impl_->rank; }
int NcclCollectives::size() const { return impl_->size; }
size_t NcclCollectives::bucket_bytes() const { return impl_->bucket_bytes; }
int NcclCollectives::device() const { return impl_->device; }

train::SyncStats NcclCollectives::allreduce_sum(const std::vector<at::Tensor>& tensors) {
    return impl_->run(tensors, -1);
}

train::SyncStats NcclCollectives::broadcast(const std::vector<at::Tensor>& tensors, int root) {
    if (root < 0) throw Error("nccl broadcast: root must be >= 0 (got " + std::to_string(root) + ")");
    return impl_->run(tensors, root);
}

namespace {

int64_t part_offset(const std::vector<int64_t>& counts, int r) {
    int64_t at = 0;
    for (int k = 0; k < r; ++k) at += counts[static_cast<size_t>(k)];
    return at;
}

void check_parts(const std::vector<int64_t>& counts, int size) {
    if (static_cast<int>(counts.size()) != size)
        throw InternalError("nccl_collectives: " + std::to_string(counts.size()) + " counts for a group of " +
                            std::to_string(size));
}

}  // namespace

train::SyncStats NcclCollectives::reduce_scatter_sum(const at::Tensor& send, const std::vector<int64_t>& counts,
                                                     const at::Tensor& recv) {
    check_parts(counts, size());
    at::Tensor sum = send.detach().clone();
    train::SyncStats s = impl_->run({sum}, -1);
    recv.copy_(sum.narrow(0, part_offset(counts, rank()), counts[static_cast<size_t>(rank())]));
    return s;
}

train::SyncStats NcclCollectives::allgather(const at::Tensor& mine, const std::vector<int64_t>& counts,
                                            const at::Tensor& out) {
    check_parts(counts, size());
    out.narrow(0, part_offset(counts, rank()), counts[static_cast<size_t>(rank())]).copy_(mine);
    train::SyncStats s;
    for (int r = 0; r < size(); ++r) {
        const int64_t n = counts[static_cast<size_t>(r)];
        if (n == 0) continue;
        at::Tensor part = out.narrow(0, part_offset(counts, r), n).contiguous();
        const train::SyncStats one = impl_->run({part}, r);
        out.narrow(0, part_offset(counts, r), n).copy_(part);
        s.bytes += one.bytes;
        s.buckets += one.buckets;
        s.seconds += one.seconds;
    }
    return s;
}

}  // namespace tagflow::gpu
