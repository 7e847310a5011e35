// SPDX-License-Identifier: Apache-2.0
// epoch: which row to train on next, so that every row of every epoch is trained exactly once.
// Rows of an epoch come in a seeded shuffle (shuffle_rows: Fisher-Yates driven by SplitMix64, the
// same on every rank and platform, written out in share/doc/data.md). A Ticket (epoch, row) is
// handed out by take(); the caller says done() once the row's samples are in a training step, or
// requeue() when they were dropped (stale, failed) and the row must be trained again in the same
// epoch. The cursor (epoch, position, requeued and outstanding tickets) is a JSON value for the
// checkpoint; restoring it puts the outstanding tickets (handed out, not done when the checkpoint
// was written) back in front, so a kill and resume neither loses nor repeats a row, provided the
// state is saved together with the model that the done() rows trained.
// take() moves on to the next epoch while rows of the previous one are still outstanding (an async
// pipeline never drains at an epoch boundary); requeued rows of the oldest epoch come first.
// One owner (the coordinator rank): not thread-safe, no MPI. Does NOT: read rows (dataset.hpp).
#pragma once
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace tagflow::data {

/// One hand-out of a row in an epoch.
struct Ticket {
    uint64_t epoch = 0;
    uint64_t row = 0;
    bool operator==(const Ticket& o) const { return epoch == o.epoch && row == o.row; }
    bool operator<(const Ticket& o) const { return epoch != o.epoch ? epoch < o.epoch : row < o.row; }
};

/// The row order of `epoch`: a permutation of 0..rows-1 (data.md, "Shuffle").
std::vector<uint64_t> shuffle_rows(uint64_t rows, uint64_t seed, uint64_t epoch);

class EpochSampler {
public:
    /// `rows` > 0 rows, `epochs` epochs (0: no end, for a run bounded by --steps).
    EpochSampler(uint64_t rows, uint64_t seed, uint64_t epochs = 0);

    /// The next row: a requeued one (oldest epoch first), else the next of the shuffle, moving to
    /// the next epoch when this one is all handed out. nullopt when the last epoch is all handed
    /// out (finished() once every ticket is done).
    std::optional<Ticket> take();
    /// The row's samples are trained (weight > 0). InternalError if `t` is not outstanding.
    void done(const Ticket& t);
    /// The row's samples were dropped: it is handed out again, in the same epoch.
    void requeue(const Ticket& t);
    /// A requeued ticket handed out again without take() (a resume whose checkpoint holds the
    /// ticket's samples, untrained: the row is outstanding again, not handed out twice).
    /// InternalError if `t` is not requeued.
    void claim(const Ticket& t);

    /// take() would return nullopt: nothing requeued and the last epoch all handed out.
    bool exhausted() const;

    bool finished() const;
    /// Epochs whose every row is done.
    uint64_t completed_epochs() const;
    /// The epoch and position of the shuffle cursor (rows of the shuffle handed out).
    uint64_t epoch() const { return epoch_; }
    uint64_t position() const { return pos_; }
    uint64_t rows() const { return rows_; }
    uint64_t epochs() const { return epochs_; }
    std::size_t outstanding() const { return outstanding_.size(); }
    std::size_t requeued() const;

    /// {"format": 1, "rows", "seed", "epochs", "epoch", "position", "requeued": [[epoch, row], ...],
    ///  "outstanding": [[epoch, row], ...]}
    nlohmann::json to_json() const;
    /// Restores a cursor; outstanding tickets become requeued (in front, in order). ConfigError when
    /// it was written for another row count or seed (the data file or --seed changed) or is malformed.
    /// `epochs` may differ (a resumed run may be given more epochs).
    static EpochSampler from_json(const nlohmann::json& j, uint64_t rows, uint64_t seed, uint64_t epochs);
    std::string to_bytes() const { return to_json().dump(); }
    static EpochSampler from_bytes(const std::string& s, uint64_t rows, uint64_t seed, uint64_t epochs);

private:
    void load_order();
    uint64_t rows_, seed_, epochs_;
    uint64_t epoch_ = 0, pos_ = 0;
    std::vector<uint64_t> order_;                        // shuffle of epoch_
    std::map<uint64_t, std::deque<uint64_t>> requeued_;  // epoch -> rows, first in first out
    std::set<Ticket> outstanding_;
};

}  // namespace tagflow::data
