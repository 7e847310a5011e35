// SPDX-License-Identifier: Apache-2.0
// nccl_collectives: train::Collectives over NCCL on device buffers — bucketed all-reduce and
// broadcast, one NCCL call per bucket. CPU tensors are staged through one device buffer of
// bucket_bytes() with cudaMemcpy; CUDA tensors (a CUDA LibTorch) stay on the device: a bucket
// inside one tensor is reduced in place, a bucket spanning tensors is packed device-to-device.
// Bootstrap: new_id() + the constructor (any transport for the id), local_group() for one
// process driving several GPUs, gpu/nccl_collectives_mpi.hpp over MPI.
// No CUDA, NCCL or torch headers here. Does not choose devices for MPI ranks (see *_mpi.hpp)
// and does not decide what to sync when (the trainer and the weight sync do).
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "train/collectives.hpp"

namespace tagflow::gpu {

/// The bytes of an ncclUniqueId: made by one rank, handed to all (MPI_Bcast, a file, a thread).
struct NcclId {
    char bytes[128];
};

/// Number of CUDA devices this process sees; 0 (never a throw) when there is no driver or no
/// GPU, with CUDA's reason in `why` if given.
int cuda_device_count(std::string* why = nullptr);

/// "NCCL 2.28.9, CUDA runtime 13.0, driver 13.0" (the driver part is "no driver" without one).
std::string nccl_build_info();

/// Part of one bucket: elements [tensor_offset, tensor_offset + count) of tensor `tensor` sit at
/// [bucket_offset, bucket_offset + count) of the bucket.
struct BucketPiece {
    size_t tensor = 0;
    size_t tensor_offset = 0;
    size_t bucket_offset = 0;
    size_t count = 0;
};
struct Bucket {
    size_t elems = 0;
    std::vector<BucketPiece> pieces;
};
/// Splits the concatenation of tensors with `numels` elements into buckets of at most
/// `bucket_elems` elements (>= 1); empty tensors get no piece. Pure.
std::vector<Bucket> plan_buckets(const std::vector<size_t>& numels, size_t bucket_elems);

class NcclCollectives final : public train::Collectives {
public:
    /// A fresh bootstrap id (ncclGetUniqueId), made by one member and given to all.
    static NcclId new_id();
    /// COLLECTIVE over the `size` members that share `id` (processes or threads, each calling
    /// this at the same time): joins as `rank`, on CUDA device `device`. Throws tagflow::Error
    /// with one clear line when no GPU is visible or the device does not exist.
    NcclCollectives(const NcclId& id, int rank, int size, int device, size_t bucket_bytes);
    /// One process, `ndev` devices 0..ndev-1 (ncclCommInitAll): element d is rank d on device d.
    /// Each element's calls must come from its own thread, all at the same time (one thread
    /// per GPU); for ndev == 1 the caller's thread is enough.
    static std::vector<std::unique_ptr<NcclCollectives>> local_group(int ndev, size_t bucket_bytes);
    ~NcclCollectives() override;
    NcclCollectives(const NcclCollectives&) = delete;
    NcclCollectives& operator=(const NcclCollectives&) = delete;

    int rank() const override;
    int size() const override;
    std::string name() const override { return "nccl"; }
    /// Tensors: one dtype (fp32, fp16, bf16, fp64, int8/32/64, uint8), contiguous, on the CPU
    /// or on this member's CUDA device. Returns after the results are in the tensors.
    train::SyncStats allreduce_sum(const std::vector<at::Tensor>& tensors) override;
    train::SyncStats broadcast(const std::vector<at::Tensor>& tensors, int root) override;
    /// Through allreduce_sum (a copy of `send`) and one broadcast per rank: right, not lean.
    train::SyncStats reduce_scatter_sum(const at::Tensor& send, const std::vector<int64_t>& counts,
                                        const at::Tensor& recv) override;
    train::SyncStats allgather(const at::Tensor& mine, const std::vector<int64_t>& counts,
                               const at::Tensor& out) override;
    size_t bucket_bytes() const override;
    /// The CUDA device this member uses.
    int device() const;

    struct Impl;

private:
    explicit NcclCollectives(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

}  // namespace tagflow::gpu
