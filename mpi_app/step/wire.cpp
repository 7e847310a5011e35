// SPDX-License-Identifier: Apache-2.0
// wire: see the header. The sample and span layouts (field order is the format).
#include "step/wire.hpp"

#include <algorithm>

#include "io/run_file.hpp"

namespace tagflow::sched::wire {
namespace {
// "XTRAS\0\0\1": marks the reward extras trailer after the samples (put_samples).
constexpr uint64_t kExtrasTrailer = 0x0100005341525458ULL;
}  // namespace

void put_samples(Writer& w, const std::vector<RolloutSample>& samples) {
    w.put<uint64_t>(samples.size());
    for (const auto& s : samples) {
        w.put(s.id);
        w.put(s.group);
        w.put(s.rank);
        w.put(s.version);
        w.put(s.reward);
        w.put<uint8_t>(s.hit_eos ? 1 : 0);
        w.put(s.t_done);
        w.vec(s.prompt);
        w.vec(s.response);
        w.vec(s.logprobs);
        w.vec(s.versions);
        w.put(s.weight);
        w.vec(s.loss_mask);
    }
    // Reward extras follow as a trailer (only when a sample has some), so the byte form of samples
    // without them, and pool.bin files written before extras existed, stay as they were.
    if (std::any_of(samples.begin(), samples.end(), [](const RolloutSample& s) { return !s.extras.empty(); })) {
        w.put(kExtrasTrailer);
        for (const auto& s : samples) w.str(s.extras);
    }
}

std::vector<RolloutSample> get_samples(Reader& r) {
    const auto n = r.get<uint64_t>();
    std::vector<RolloutSample> out;
    for (uint64_t i = 0; i < n; ++i) {
        RolloutSample s;
        s.id = r.get<int64_t>();
        s.group = r.get<int64_t>();
        s.rank = r.get<int32_t>();
        s.version = r.get<int32_t>();
        s.reward = r.get<float>();
        s.hit_eos = r.get<uint8_t>() != 0;
        s.t_done = r.get<double>();
        s.prompt = r.vec<int32_t>();
        s.response = r.vec<int32_t>();
        s.logprobs = r.vec<float>();
        s.versions = r.vec<int32_t>();
        s.weight = r.get<float>();
        s.loss_mask = r.vec<uint8_t>();
        out.push_back(std::move(s));
    }
    uint64_t mark = 0;
    if (r.left() >= sizeof mark) std::memcpy(&mark, r.pos(), sizeof mark);
    if (mark == kExtrasTrailer) {
        r.skip(sizeof mark);
        for (auto& s : out) s.extras = r.str();
    }
    return out;
}

void put_spans(Writer& w, const std::vector<io::SpanRecord>& spans) {
    w.put<uint64_t>(spans.size());
    for (const auto& s : spans) {
        w.put(s.rank);
        w.put(static_cast<uint8_t>(s.kind));
        w.put(s.t_start);
        w.put(s.t_end);
        w.put(s.step);
    }
}

std::vector<io::SpanRecord> get_spans(Reader& r) {
    const auto n = r.get<uint64_t>();
    std::vector<io::SpanRecord> out;
    for (uint64_t i = 0; i < n; ++i) {
        io::SpanRecord s;
        s.rank = r.get<int32_t>();
        s.kind = static_cast<io::SpanKind>(r.get<uint8_t>());
        s.t_start = r.get<double>();
        s.t_end = r.get<double>();
        s.step = r.get<int32_t>();
        out.push_back(s);
    }
    return out;
}

}  // namespace tagflow::sched::wire

namespace tagflow::sched {

std::vector<char> pack_samples(const std::vector<RolloutSample>& samples) {
    wire::Writer w;
    wire::put_samples(w, samples);
    return w.take();
}

std::vector<RolloutSample> unpack_samples(const char* data, size_t size) {
    wire::Reader r(data, size, "unpack_samples");
    return wire::get_samples(r);
}

}  // namespace tagflow::sched
