// SPDX-License-Identifier: Apache-2.0
// weight_push_mpi: see the header. Receivers holding the same version share one header and one
// payload per bucket (normally every receiver holds the last version pushed: one delta for all).
#include "train/weight_push_mpi.hpp"

#include <algorithm>
#include <string>

#include "common/error.hpp"

namespace tagflow::train {
namespace {

constexpr size_t kHead = 3;  // version, base, bucket count; then (encoding, sent) per bucket

void test_all(std::vector<MPI_Request>& reqs, bool* done) {
    int flag = 1;
    if (!reqs.empty())
        TAGFLOW_MPI_CHECK(MPI_Testall(static_cast<int>(reqs.size()), reqs.data(), &flag, MPI_STATUSES_IGNORE));
    if (flag) reqs.clear();
    *done = flag != 0;
}

// Bucket b travels on tag + 1 + b: all of them must be valid MPI tags.
void check_tags(MPI_Comm comm, int tag, size_t buckets) {
    void* ub = nullptr;
    int flag = 0;
    TAGFLOW_MPI_CHECK(MPI_Comm_get_attr(comm, MPI_TAG_UB, &ub, &flag));
    const long long top = flag ? *static_cast<int*>(ub) : 32767;
    if (tag < 0 || static_cast<long long>(tag) + static_cast<long long>(buckets) > top)
        throw ConfigError("weight sync: " + std::to_string(buckets) + " buckets need MPI tags up to " +
                          std::to_string(static_cast<long long>(tag) + static_cast<long long>(buckets)) +
                          ", above this MPI's limit " + std::to_string(top) + " (a larger --bucket-mb)");
}

void cancel_all(std::vector<MPI_Request>& reqs) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) reqs.clear();  // (a destructor after MPI_Finalize: nothing is in flight any more)
    for (auto& r : reqs) {
        if (r == MPI_REQUEST_NULL) continue;
        int done = 0;
        TAGFLOW_MPI_CHECK(MPI_Test(&r, &done, MPI_STATUS_IGNORE));
        if (done) continue;
        MPI_Cancel(&r);
        MPI_Wait(&r, MPI_STATUS_IGNORE);
    }
    reqs.clear();
}

}  // namespace

// ---- WeightPush ----

WeightPush::WeightPush(PushOptions o, std::vector<std::pair<size_t, size_t>> buckets, MPI_Comm comm, int tag)
    : opt_(o), buckets_(std::move(buckets)), comm_(comm), tag_(tag) {
    if (!(opt_.min_saving >= 0.0 && opt_.min_saving < 1.0))
        throw ConfigError("weight push: min_saving must be in [0, 1)");
    check_tags(comm_, tag_, buckets_.size());
}

WeightPush::~WeightPush() { cancel_all(reqs_); }

int32_t WeightPush::held(int r) const {
    auto it = held_.find(r);
    return it == held_.end() ? -1 : it->second;
}

void WeightPush::hold(const FlatView& v, int32_t version, const std::vector<int>& receivers) {
    if (!reqs_.empty()) throw InternalError("weight push: hold() while a push is in flight");
    if (version <= last_) throw InternalError("weight push: held version " + std::to_string(version) + " is not newer");
    if (opt_.delta) tracker_.record(v, buckets_, version, version);
    last_ = version;
    for (int r : receivers) held_[r] = version;
}

void WeightPush::set_held(int r, int32_t version) {
    if (version != last_)
        throw InternalError("weight push: rank " + std::to_string(r) + " holds version " + std::to_string(version) +
                            ", not the last one pushed or held (" + std::to_string(last_) + ")");
    held_[r] = version;
}

WeightSyncStats WeightPush::start(const FlatView& v, int32_t version, const std::vector<int>& receivers) {
    if (!reqs_.empty()) throw InternalError("weight push: a push started before the last one completed");
    if (version <= last_)
        throw InternalError("weight push: version " + std::to_string(version) + " is not newer than " +
                            std::to_string(last_));
    const size_t nb = buckets_.size();
    WeightSyncStats s;
    s.version = version;
    s.dense_bytes = static_cast<int64_t>(v.size() * sizeof(float));
    // The receivers by the version they hold (-1: nothing known, a full version).
    std::map<int32_t, std::vector<int>> by_base;
    for (int r : receivers) by_base[held(r)].push_back(r);
    const int32_t since = by_base.empty() ? version : by_base.begin()->first;
    s.base_version = since;
    const float* values = nullptr;
    std::vector<size_t> first_counts;
    if (opt_.delta) {
        first_counts = tracker_.record(v, buckets_, version, since);
        values = tracker_.snapshot().data();
    } else {
        dense_.resize(v.size());
        v.gather(0, v.size(), dense_.data());
        values = dense_.data();
    }
    last_ = version;
    headers_.assign(by_base.size(), {});
    payload_.assign(by_base.size() * nb, {});
    size_t g = 0;
    int64_t bytes = 0, values_sent = 0, messages = 0;
    for (const auto& [base, ranks] : by_base) {
        std::vector<int32_t>& h = headers_[g];
        h.assign(kHead + 2 * nb, 0);
        h[0] = version;
        h[1] = opt_.delta ? base : -1;
        h[2] = static_cast<int32_t>(nb);
        for (size_t b = 0; b < nb; ++b) {
            const size_t count = buckets_[b].second;
            DeltaEncoding e = DeltaEncoding::kDense;
            size_t k = count;
            if (opt_.delta) {
                k = base == since ? first_counts[b] : tracker_.count_since(buckets_[b].first, count, base);
                e = choose_delta_encoding(count, k, opt_.min_saving);
            }
            h[kHead + 2 * b] = static_cast<int32_t>(e);
            h[kHead + 2 * b + 1] = static_cast<int32_t>(k);
            if (e == DeltaEncoding::kSparse || e == DeltaEncoding::kBitmask) {
                auto& p = payload_[g * nb + b];
                p.resize(delta_payload_words(e, count, k));
                tracker_.encode(buckets_[b].first, count, e, base, k, p.data());
            }
            if (g == 0) {
                if (e == DeltaEncoding::kSkip) ++s.skipped_buckets;
                else if (e == DeltaEncoding::kSparse) ++s.sparse_buckets;
                else if (e == DeltaEncoding::kBitmask) ++s.bitmask_buckets;
                else ++s.dense_buckets;
            }
        }
        for (int r : ranks) {
            reqs_.emplace_back();
            TAGFLOW_MPI_CHECK(
                MPI_Isend(h.data(), static_cast<int>(h.size()), MPI_INT32_T, r, tag_, comm_, &reqs_.back()));
            s.control_bytes += static_cast<int64_t>(h.size() * sizeof(int32_t));
            for (size_t b = 0; b < nb; ++b) {
                const auto e = static_cast<DeltaEncoding>(h[kHead + 2 * b]);
                const size_t count = buckets_[b].second;
                const int btag = tag_ + 1 + static_cast<int>(b);
                if (e == DeltaEncoding::kSkip) continue;
                reqs_.emplace_back();
                if (e == DeltaEncoding::kDense) {
                    TAGFLOW_MPI_CHECK(MPI_Isend(values + buckets_[b].first, static_cast<int>(count), MPI_FLOAT, r, btag,
                                                comm_, &reqs_.back()));
                    bytes += static_cast<int64_t>(count * sizeof(float));
                    values_sent += static_cast<int64_t>(count);
                } else {
                    const auto& p = payload_[g * nb + b];
                    TAGFLOW_MPI_CHECK(
                        MPI_Isend(p.data(), static_cast<int>(p.size()), MPI_UINT32_T, r, btag, comm_, &reqs_.back()));
                    bytes += static_cast<int64_t>(p.size() * sizeof(uint32_t));
                    values_sent += h[kHead + 2 * b + 1];
                }
                ++messages;
            }
            held_[r] = version;
        }
        ++g;
    }
    const auto n = static_cast<int64_t>(std::max<size_t>(1, receivers.size()));
    s.bytes = bytes / n;
    s.values_sent = values_sent / n;
    s.buckets = static_cast<int32_t>(messages / n);
    s.control_bytes /= n;
    return s;
}

bool WeightPush::done() {
    bool d = false;
    test_all(reqs_, &d);
    return d;
}

// ---- WeightPull ----

WeightPull::WeightPull(std::vector<std::pair<size_t, size_t>> buckets, MPI_Comm comm, int root, int tag)
    : buckets_(std::move(buckets)), comm_(comm), root_(root), tag_(tag) {
    check_tags(comm_, tag_, buckets_.size());
}

WeightPull::~WeightPull() { cancel_all(reqs_); }

void WeightPull::post() {
    if (!reqs_.empty()) throw InternalError("weight pull: a receive is already posted");
    have_header_ = false;
    header_.assign(kHead + 2 * buckets_.size(), 0);
    reqs_.emplace_back();
    TAGFLOW_MPI_CHECK(
        MPI_Irecv(header_.data(), static_cast<int>(header_.size()), MPI_INT32_T, root_, tag_, comm_, &reqs_.back()));
}

void WeightPull::post_buckets() {
    const size_t nb = buckets_.size();
    if (header_[2] != static_cast<int32_t>(nb))
        throw InternalError("weight pull: the root's " + std::to_string(header_[2]) + " buckets are not this rank's " +
                            std::to_string(nb));
    if (header_[1] >= 0 && header_[1] != held_)
        throw InternalError("weight pull: version " + std::to_string(header_[0]) + " is a delta from version " +
                            std::to_string(header_[1]) + ", but this rank holds " + std::to_string(held_));
    payload_.resize(nb);
    for (size_t b = 0; b < nb; ++b) {
        const auto e = static_cast<DeltaEncoding>(header_[kHead + 2 * b]);
        const auto k = static_cast<size_t>(header_[kHead + 2 * b + 1]);
        const auto [first, count] = buckets_[b];
        const int btag = tag_ + 1 + static_cast<int>(b);
        if (e == DeltaEncoding::kSkip) continue;
        reqs_.emplace_back();
        if (e == DeltaEncoding::kDense) {
            if (dense_.size() < first + count) dense_.resize(buckets_.back().first + buckets_.back().second);
            TAGFLOW_MPI_CHECK(MPI_Irecv(dense_.data() + first, static_cast<int>(count), MPI_FLOAT, root_, btag, comm_,
                                        &reqs_.back()));
        } else if (e == DeltaEncoding::kSparse || e == DeltaEncoding::kBitmask) {
            if (k > count) throw InternalError("weight pull: a bucket sends more values than it holds");
            payload_[b].resize(delta_payload_words(e, count, k));
            TAGFLOW_MPI_CHECK(MPI_Irecv(payload_[b].data(), static_cast<int>(payload_[b].size()), MPI_UINT32_T, root_,
                                        btag, comm_, &reqs_.back()));
        } else {
            throw InternalError("weight pull: unknown bucket encoding " + std::to_string(header_[kHead + 2 * b]));
        }
    }
}

bool WeightPull::ready() {
    int flag = 0;
    if (!have_header_) {
        if (reqs_.empty()) return false;  // nothing posted
        TAGFLOW_MPI_CHECK(MPI_Test(&reqs_.front(), &flag, MPI_STATUS_IGNORE));
        if (!flag) return false;
        reqs_.clear();
        have_header_ = true;
        post_buckets();
    }
    if (reqs_.empty()) return true;  // every bucket skipped
    TAGFLOW_MPI_CHECK(MPI_Testall(static_cast<int>(reqs_.size()), reqs_.data(), &flag, MPI_STATUSES_IGNORE));
    return flag != 0;
}

int32_t WeightPull::apply(const FlatView& v) {
    if (!have_header_) throw InternalError("weight pull: apply() before a version arrived");
    reqs_.clear();
    for (size_t b = 0; b < buckets_.size(); ++b) {
        const auto e = static_cast<DeltaEncoding>(header_[kHead + 2 * b]);
        const auto k = static_cast<size_t>(header_[kHead + 2 * b + 1]);
        const auto [first, count] = buckets_[b];
        if (e == DeltaEncoding::kDense) v.scatter(first, count, dense_.data() + first);
        else if (e != DeltaEncoding::kSkip) apply_delta(v, first, count, e, k, payload_[b].data());
    }
    held_ = header_[0];
    post();
    return held_;
}

void WeightPull::cancel() { cancel_all(reqs_); }

}  // namespace tagflow::train
