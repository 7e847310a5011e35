// SPDX-License-Identifier: Apache-2.0
// wire: the one byte format of the scheduler's messages between ranks (samples, spans, control,
// gateway requests/tokens/records, the checkpoint's pool.bin). Host byte order, fixed-width
// fields, vectors and strings as a uint64 count then their elements: every rank of a job runs
// the same binary on the same kind of machine. A Reader throws InternalError naming the message
// on a truncated buffer. Does not send anything (the callers own the MPI calls) and knows no
// LibTorch.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "common/error.hpp"
#include "sched/sample.hpp"

namespace tagflow::io {
struct SpanRecord;
}

namespace tagflow::sched::wire {

/// Appends fields to a byte buffer.
class Writer {
public:
    template <typename T>
    void put(const T& v) {
        static_assert(std::is_trivially_copyable_v<T>, "wire: plain fields only");
        const char* p = reinterpret_cast<const char*>(&v);
        b_.insert(b_.end(), p, p + sizeof(T));
    }
    /// A count (uint64), then the elements.
    template <typename T>
    void vec(const std::vector<T>& v) {
        static_assert(std::is_trivially_copyable_v<T>, "wire: plain fields only");
        put<uint64_t>(v.size());
        const char* p = reinterpret_cast<const char*>(v.data());
        b_.insert(b_.end(), p, p + v.size() * sizeof(T));
    }
    void str(const std::string& s) {
        put<uint64_t>(s.size());
        b_.insert(b_.end(), s.begin(), s.end());
    }
    /// Raw bytes (e.g. another Writer's buffer), no count.
    void raw(const char* p, size_t n) { b_.insert(b_.end(), p, p + n); }
    void raw(const std::vector<char>& v) { raw(v.data(), v.size()); }

    const std::vector<char>& bytes() const { return b_; }
    size_t size() const { return b_.size(); }
    void clear() { b_.clear(); }
    /// The buffer, moved out (the Writer is empty after).
    std::vector<char> take() { return std::move(b_); }

private:
    std::vector<char> b_;
};

/// Reads fields back in the order they were put. `what` names the message in errors.
class Reader {
public:
    Reader(const char* data, size_t size, const char* what) : p_(data), end_(data + size), what_(what) {}
    explicit Reader(const std::vector<char>& b, const char* what) : Reader(b.data(), b.size(), what) {}

    template <typename T>
    T get() {
        static_assert(std::is_trivially_copyable_v<T>, "wire: plain fields only");
        if (left() < sizeof(T)) throw InternalError(std::string(what_) + ": truncated message");
        T v;
        std::memcpy(&v, p_, sizeof(T));
        p_ += sizeof(T);
        return v;
    }
    template <typename T>
    std::vector<T> vec() {
        static_assert(std::is_trivially_copyable_v<T>, "wire: plain fields only");
        const auto n = get<uint64_t>();
        if (left() / sizeof(T) < n) throw InternalError(std::string(what_) + ": truncated vector");
        std::vector<T> v(n);
        if (n) std::memcpy(v.data(), p_, n * sizeof(T));
        p_ += n * sizeof(T);
        return v;
    }
    std::string str() {
        const auto n = get<uint64_t>();
        if (left() < n) throw InternalError(std::string(what_) + ": truncated string");
        std::string s(p_, p_ + n);
        p_ += n;
        return s;
    }

    /// What is left unread (e.g. a payload whose length is the rest of the message).
    const char* pos() const { return p_; }
    size_t left() const { return static_cast<size_t>(end_ - p_); }
    /// Skips `n` bytes (after reading them through pos()).
    void skip(size_t n) {
        if (left() < n) throw InternalError(std::string(what_) + ": truncated message");
        p_ += n;
    }

private:
    const char* p_;
    const char* end_;
    const char* what_;
};

/// Samples: a count, then each sample's fields.
void put_samples(Writer& w, const std::vector<RolloutSample>& samples);
std::vector<RolloutSample> get_samples(Reader& r);

/// Timeline spans (io::SpanRecord, io/run_file.hpp): a count, then each span's fields.
void put_spans(Writer& w, const std::vector<io::SpanRecord>& spans);
std::vector<io::SpanRecord> get_spans(Reader& r);

}  // namespace tagflow::sched::wire

namespace tagflow::sched {

/// Serialises samples into bytes and back (the sync mode's all-gather, the async batch
/// broadcast, pool.bin). unpack_samples throws InternalError on a truncated buffer.
std::vector<char> pack_samples(const std::vector<RolloutSample>& samples);
std::vector<RolloutSample> unpack_samples(const char* data, size_t size);

}  // namespace tagflow::sched
