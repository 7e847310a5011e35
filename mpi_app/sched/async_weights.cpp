// SPDX-License-Identifier: Apache-2.0
// async_weights: new weights from the coordinator to the rollout-only ranks: non-blocking bucket sends,
// and their receive into a shadow buffer swapped in at a token boundary.
// Part of the async scheduler (sched/async_scheduler_impl.hpp).
#include "sched/async_scheduler_impl.hpp"

namespace tagflow::sched::async {

void AsyncScheduler::post_weight_recv() {
    shadow_.resize(static_cast<size_t>(flat_.numel()));
    wreqs_.assign(1 + buckets_.size(), MPI_REQUEST_NULL);
    TAGFLOW_MPI_CHECK(MPI_Irecv(&whdr_, 1, MPI_INT, coord_, kTagWHdr, p2p_.get(), &wreqs_[0]));
    for (size_t b = 0; b < buckets_.size(); ++b)
        TAGFLOW_MPI_CHECK(MPI_Irecv(shadow_.data() + buckets_[b].first, static_cast<int>(buckets_[b].second), MPI_FLOAT,
                                    coord_, kTagWBucket + static_cast<int>(b), p2p_.get(), &wreqs_[b + 1]));
}

void AsyncScheduler::test_weight_recv() {
    int done = 0;
    TAGFLOW_MPI_CHECK(MPI_Testall(static_cast<int>(wreqs_.size()), wreqs_.data(), &done, MPI_STATUSES_IGNORE));
    if (!done) return;
    enter(SpanKind::kWeightSync, whdr_);
    {
        torch::NoGradGuard ng;
        // In place on the flat buffer: the parameters are views of it, their version
        // counters move, and the engine re-snapshots the weights at its next step.
        flat_.copy_(torch::from_blob(shadow_.data(), {flat_.numel()}, torch::kFloat));
    }
    // flat_.copy_ bumps flat_'s counter only: the parameters (set_data views) keep theirs.
    train::bump_versions(policy_->parameters());
    version_ = whdr_;
    // At a token boundary: in-flight generations resume with their KV caches kept.
    engine_->update_weights(version_, rollout::ResumeMode::kKeep, 0);
    post_weight_recv();
}

void AsyncScheduler::cancel_weight_recv() {
    for (auto& r : wreqs_) {
        if (r == MPI_REQUEST_NULL) continue;
        int done = 0;
        TAGFLOW_MPI_CHECK(MPI_Test(&r, &done, MPI_STATUS_IGNORE));
        if (done) continue;
        MPI_Cancel(&r);
        MPI_Wait(&r, MPI_STATUS_IGNORE);
    }
    wreqs_.clear();
}

void AsyncScheduler::send_weights(int32_t version) {
    if (receivers_.empty()) return;
    wait_weight_sends();  // the send buffer is reused
    send_buf_.resize(static_cast<size_t>(flat_.numel()));
    std::memcpy(send_buf_.data(), flat_.data_ptr<float>(), send_buf_.size() * sizeof(float));
    send_version_ = version;
    for (int r : receivers_) {
        wsends_.emplace_back();
        TAGFLOW_MPI_CHECK(MPI_Isend(&send_version_, 1, MPI_INT, r, kTagWHdr, p2p_.get(), &wsends_.back()));
        for (size_t b = 0; b < buckets_.size(); ++b) {
            wsends_.emplace_back();
            TAGFLOW_MPI_CHECK(MPI_Isend(send_buf_.data() + buckets_[b].first, static_cast<int>(buckets_[b].second),
                                        MPI_FLOAT, r, kTagWBucket + static_cast<int>(b), p2p_.get(), &wsends_.back()));
        }
    }
    wsend_t0_ = clock_.now();
}

void AsyncScheduler::test_weight_sends() {
    if (wsends_.empty()) return;
    int done = 0;
    TAGFLOW_MPI_CHECK(MPI_Testall(static_cast<int>(wsends_.size()), wsends_.data(), &done, MPI_STATUSES_IGNORE));
    if (!done) return;
    wsends_.clear();
    io::SyncRecord r;
    r.version = send_version_;
    r.bytes = static_cast<int64_t>(send_buf_.size() * sizeof(float));
    r.dense_bytes = r.bytes;
    r.t_start = wsend_t0_;
    r.t_end = std::max(wsend_t0_, clock_.now());
    r.mode = "mpi_isend";
    r.buckets = static_cast<int32_t>(buckets_.size());
    syncs_.push_back(r);
}

void AsyncScheduler::wait_weight_sends() {
    if (wsends_.empty()) return;
    enter(SpanKind::kIdle);
    while (!wsends_.empty()) {
        poll_messages();
        test_weight_sends();
        if (!wsends_.empty()) nap();
    }
}

}  // namespace tagflow::sched::async
