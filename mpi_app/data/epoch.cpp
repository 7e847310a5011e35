// SPDX-License-Identifier: Apache-2.0
// epoch: the seeded shuffle and the exactly-once cursor (see epoch.hpp).
#include "data/epoch.hpp"

#include <algorithm>
#include <numeric>

#include "common/error.hpp"

namespace tagflow::data {
namespace {

uint64_t mix64(uint64_t z) {  // SplitMix64's output function
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

struct SplitMix64 {
    uint64_t state;
    uint64_t next() { return mix64(state += 0x9E3779B97F4A7C15ULL); }
    /// Uniform in [0, k), k > 0, without modulo bias (reject the lowest 2^64 mod k values).
    uint64_t below(uint64_t k) {
        const uint64_t threshold = (0 - k) % k;
        for (;;) {
            uint64_t x = next();
            if (x >= threshold) return x % k;
        }
    }
};

}  // namespace

std::vector<uint64_t> shuffle_rows(uint64_t rows, uint64_t seed, uint64_t epoch) {
    std::vector<uint64_t> p(rows);
    std::iota(p.begin(), p.end(), uint64_t{0});
    SplitMix64 g{mix64(seed) ^ mix64(epoch + 0x632BE59BD9B4E019ULL)};
    for (uint64_t i = rows; i > 1; --i) std::swap(p[i - 1], p[g.below(i)]);
    return p;
}

EpochSampler::EpochSampler(uint64_t rows, uint64_t seed, uint64_t epochs) : rows_(rows), seed_(seed), epochs_(epochs) {
    if (rows == 0) throw ConfigError("a data set without rows has no epochs");
    load_order();
}

void EpochSampler::load_order() { order_ = shuffle_rows(rows_, seed_, epoch_); }

std::optional<Ticket> EpochSampler::take() {
    if (!requeued_.empty()) {
        auto it = requeued_.begin();
        Ticket t{it->first, it->second.front()};
        it->second.pop_front();
        if (it->second.empty()) requeued_.erase(it);
        outstanding_.insert(t);
        return t;
    }
    if (pos_ == rows_) {
        if (epochs_ != 0 && epoch_ + 1 >= epochs_) return std::nullopt;
        ++epoch_;
        pos_ = 0;
        load_order();
    }
    Ticket t{epoch_, order_[pos_++]};
    outstanding_.insert(t);
    return t;
}

void EpochSampler::done(const Ticket& t) {
    if (outstanding_.erase(t) == 0)
        throw InternalError("data: done() for row " + std::to_string(t.row) + " of epoch " + std::to_string(t.epoch) +
                            ", which is not handed out");
}

void EpochSampler::requeue(const Ticket& t) {
    if (outstanding_.erase(t) == 0)
        throw InternalError("data: requeue() for row " + std::to_string(t.row) + " of epoch " +
                            std::to_string(t.epoch) + ", which is not handed out");
    requeued_[t.epoch].push_back(t.row);
}

void EpochSampler::claim(const Ticket& t) {
    auto it = requeued_.find(t.epoch);
    auto at = it == requeued_.end() ? std::deque<uint64_t>::iterator{}
                                    : std::find(it->second.begin(), it->second.end(), t.row);
    if (it == requeued_.end() || at == it->second.end())
        throw InternalError("data: claim() for row " + std::to_string(t.row) + " of epoch " + std::to_string(t.epoch) +
                            ", which is not requeued");
    it->second.erase(at);
    if (it->second.empty()) requeued_.erase(it);
    outstanding_.insert(t);
}

bool EpochSampler::exhausted() const {
    return requeued_.empty() && epochs_ != 0 && epoch_ + 1 >= epochs_ && pos_ == rows_;
}

bool EpochSampler::finished() const {
    return epochs_ != 0 && epoch_ + 1 >= epochs_ && pos_ == rows_ && requeued_.empty() && outstanding_.empty();
}

uint64_t EpochSampler::completed_epochs() const {
    uint64_t open = pos_ == rows_ ? epoch_ + 1 : epoch_;  // the first epoch the cursor has not finished
    if (!requeued_.empty()) open = std::min(open, requeued_.begin()->first);
    if (!outstanding_.empty()) open = std::min(open, outstanding_.begin()->epoch);
    return open;
}

std::size_t EpochSampler::requeued() const {
    std::size_t n = 0;
    for (const auto& [e, q] : requeued_) n += q.size();
    return n;
}

nlohmann::json EpochSampler::to_json() const {
    nlohmann::json rq = nlohmann::json::array(), out = nlohmann::json::array();
    for (const auto& [e, q] : requeued_)
        for (uint64_t r : q) rq.push_back({e, r});
    for (const auto& t : outstanding_) out.push_back({t.epoch, t.row});
    return {{"format", 1},     {"rows", rows_},    {"seed", seed_},  {"epochs", epochs_},
            {"epoch", epoch_}, {"position", pos_}, {"requeued", rq}, {"outstanding", out}};
}

EpochSampler EpochSampler::from_json(const nlohmann::json& j, uint64_t rows, uint64_t seed, uint64_t epochs) {
    const std::string what = "data cursor in the checkpoint: ";
    try {
        if (!j.is_object() || j.value("format", 0) != 1) throw ConfigError(what + "not format 1");
        uint64_t r = j.at("rows").get<uint64_t>(), s = j.at("seed").get<uint64_t>();
        if (r != rows || s != seed)
            throw ConfigError(what + "written for " + std::to_string(r) + " rows with seed " + std::to_string(s) +
                              "; this run has " + std::to_string(rows) + " rows, seed " + std::to_string(seed) +
                              " (the data file, --max-prompt-tokens or --seed changed)");
        EpochSampler x(rows, seed, epochs);
        x.epoch_ = j.at("epoch").get<uint64_t>();
        x.pos_ = j.at("position").get<uint64_t>();
        if (x.pos_ > rows) throw ConfigError(what + "position past the end of the epoch");
        std::set<Ticket> seen;
        auto add = [&](const nlohmann::json& list) {
            for (const auto& e : list) {
                Ticket t{e.at(0).get<uint64_t>(), e.at(1).get<uint64_t>()};
                if (t.row >= rows || t.epoch > x.epoch_ || !seen.insert(t).second)
                    throw ConfigError(what + "bad ticket [" + std::to_string(t.epoch) + ", " + std::to_string(t.row) +
                                      "]");
                x.requeued_[t.epoch].push_back(t.row);
            }
        };
        add(j.at("requeued"));
        add(j.at("outstanding"));  // handed out, not trained into the checkpoint: hand out again
        x.load_order();
        return x;
    } catch (const nlohmann::json::exception& e) {
        throw ConfigError(what + "malformed (" + std::string(e.what()) + ")");
    }
}

EpochSampler EpochSampler::from_bytes(const std::string& s, uint64_t rows, uint64_t seed, uint64_t epochs) {
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(s);
    } catch (const nlohmann::json::exception& e) {
        throw ConfigError("data cursor in the checkpoint: not JSON (" + std::string(e.what()) + ")");
    }
    return from_json(j, rows, seed, epochs);
}

}  // namespace tagflow::data
