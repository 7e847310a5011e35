// SPDX-License-Identifier: Apache-2.0
// policy: the pure scheduling decisions of the async modes (disaggregated, multiplex), as
// functions of the options and every rank's tag bits: which ranks form the train group, whether
// the tags allow the mode, how many samples trigger a training step, and the staleness rule
// (drop or down-weight a sample that lags the trained version by more than eta). No MPI, no
// LibTorch: async_scheduler.cpp calls these on the real ranks, the simulator (sim/) on synthetic
// nodes, so both make the same choices. Does not move data or build communicators.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "config/options.hpp"

namespace tagflow::sched::sched_policy {

/// World ranks tagged train (ascending); the lowest is the coordinator (train root), -1 if none.
std::vector<int> tagged_train(const std::vector<uint32_t>& all_tags);
int coordinator(const std::vector<uint32_t>& all_tags);

/// --train-priority "KEY=P;KEY=P": KEY is a tag set ("rollout,train", every rank with exactly
/// those tags) or a world rank ("3"); P is 0..1000. A rank's entry wins over its tag set's.
struct TrainPriority {
    std::map<uint32_t, int> by_tags;
    std::map<int, int> by_rank;
};
/// Throws ConfigError naming the option and the bad entry (syntax, unknown tag, a tag set
/// without `train`, a duplicate key, P out of range). Ranks are checked against the world size
/// by check_roles.
TrainPriority parse_train_priority(const std::string& spec);
/// Rank `rank`'s train priority: 0 without the train tag, else its rank entry, its tag set's
/// entry, or 1.
int train_priority(const TrainPriority& prio, int rank, uint32_t tags);

/// The mode of a run without --mode: the one its checkpoint was written with when it resumes
/// (`ckpt_mode`, "" for a fresh run), else config::Mode::kDefault. `why` gets a line for the
/// log when the choice is not the default. Throws ConfigError when `ckpt_mode` names no mode.
config::Mode default_mode(const std::string& ckpt_mode, std::string& why);

/// --rollout-ahead: new samples a generator in the multiplex train group may start per policy
/// version, in whole groups: ceil(F x threshold / generators) rounded up to groups. Only when
/// every generator is in the train group (`training_generators` == `generators`): then nothing
/// generates while the group trains, and a sample beyond the step's need waits a whole step and
/// may go stale. With rollout-only generators the pool refills during training and fast train
/// ranks' extra samples shorten the wait for complete groups: no cap. 0 = no cap.
int64_t rollout_quota(const config::Options& opt, int64_t threshold, int64_t generators, int64_t training_generators);

/// --admission staleness: how many samples may be started and not yet consumed by a training
/// step (in flight on the generators, or pooled) before a generating rank waits. Consumed in the
/// order they start at `rate` samples per policy version (measured by the caller), the sample at
/// position p behind the next step's first is trained p / rate versions after the version it starts
/// under, so a new group of G samples is trained within --staleness (eta) versions while
/// started-and-unconsumed + G <= (eta + 1) x rate. Never below the threshold rounded up to whole
/// groups (a step must be able to fill). Returns 0 (no bound) under --admission off or outside
/// the async modes.
int64_t admission_budget(const config::Options& opt, double rate, int64_t threshold);

/// --admission staleness's estimate of the samples a training step trains per policy version:
/// a moving mean, 0.7 x `rate` + 0.3 x `trained` after a step that trained `trained` samples, or
/// `trained` itself after the first step (`rate` <= 0). One odd step moves it little. The samples
/// the step dropped are not counted: they would raise the budget, so more would be started ahead,
/// age more and be dropped in turn (a loop: share/doc/train.md, Admission).
double next_admission_rate(double rate, int64_t trained, int64_t dropped);

/// The most samples a generator may have granted and not yet delivered: its engine's `max_batch`
/// sequences rounded up to whole groups, and one group more, so it never waits for the next grant
/// while its engine has room.
int64_t admission_cap(int64_t max_batch, int64_t group_size);

/// Per generator, the most samples grant_groups lets it hold granted and not yet delivered.
/// `trains[i]`: generator i also trains (multiplex: a member of the train group, whose generation
/// pauses for every step), so its groups advance only in the gaps between steps, and one that
/// spans more than --staleness steps is dropped. Where some generator does not train, a training
/// one is granted at most `member_groups[i]` groups (its allowance, next_member_cap), and at
/// least one once the coordinator has waited idle with nothing of its own to generate since the
/// last step (the others did not keep training busy). Every other generator (and every one where
/// all train): `cap` (admission_cap).
std::vector<int64_t> grant_caps(const std::vector<uint8_t>& trains, const std::vector<int64_t>& member_groups,
                                bool coordinator_idle, int64_t group_size, int64_t cap);

/// A training generator's group allowance (grant_caps) after a step: halved (down to 0) when the
/// step dropped `dropped` > 0 of its samples as stale; doubled (at least 1, at most `max_groups`)
/// when it dropped none and `delivered` > 0: it delivered since the step before and the
/// coordinator waited idle in that time (the caller passes 0 otherwise: the trainer did not wait
/// for samples, so more member generation would only be paused); else unchanged. The coordinator
/// and the simulator start every allowance at 0: a member earns what it finishes in time.
int64_t next_member_cap(int64_t groups, int64_t dropped, int64_t delivered, int64_t max_groups);

/// After a step took its batch: each training generator's allowance (`trains[i]`: next_member_cap)
/// from the samples the step dropped (`dropped_ids`; generator = id / G % generators, the built-in
/// tasks' numbering) and those it delivered since the last step (`arrived` - `arrived_at_step`,
/// counted only when `coordinator_idle`); then `arrived_at_step` = `arrived`. The async
/// coordinator and the simulator both call it.
void update_member_caps(std::vector<int64_t>& member_groups, std::vector<int64_t>& arrived_at_step,
                        const std::vector<uint8_t>& trains, const std::vector<int64_t>& arrived,
                        const std::vector<int64_t>& dropped_ids, int64_t group_size, bool coordinator_idle,
                        int64_t max_groups);

/// --admission staleness's grants, one group at a time while `outstanding` + G <= `budget`: each
/// to the generator with the fewest samples granted and not yet delivered (granted[i] x G -
/// arrived[i]; least_loaded, so the fastest generator is granted the most) whose load stays within
/// its `caps[i]` (grant_caps). `granted` counts groups per generator since the start, `arrived`
/// their samples delivered. Updates `granted` and returns the samples outstanding after the
/// grants. The async scheduler (sched/async_admission.cpp) and the simulator both grant with it.
int64_t grant_groups(std::vector<int64_t>& granted, const std::vector<int64_t>& arrived, int64_t outstanding,
                     int64_t budget, int64_t group_size, const std::vector<int64_t>& caps);

/// Where the next piece of work goes: the index of the smallest of `loads` among those at most
/// their `limits` (the first on a tie), or loads.size() when none has room (or the sizes differ).
/// Admission grants and --data assignments go one group at a time this way, so the fastest
/// generator is handed the most.
size_t least_loaded(const std::vector<int64_t>& loads, const std::vector<int64_t>& limits);

/// A sample's response-length draw is a hash of the seed and the sample id (so every mode, rank
/// count and the simulator see the same lengths): sample_hash and its uniform in (0, 1).
uint64_t mix64(uint64_t x);
uint64_t sample_hash(uint64_t seed, int64_t id);
double unit_interval(uint64_t hash);
/// Lognormal response length of sample `id`: median m, p99 = ratio x m (sigma = ln(ratio) /
/// z_0.99), rounded, in [1, cap]. --response-lengths lognormal:M:R and `tagflow sim --lengths
/// lognormal` both draw with it.
int32_t lognormal_length(double median, double p99_ratio, double cap, uint64_t seed, int64_t id);

/// Ranks that --min-rollout-frac keeps in rollout in a job of n ranks: the fraction rounded down.
int min_rollout_ranks(const config::Options& opt, int n);

/// The train group (world ranks, ascending; the coordinator first): disaggregated: every rank
/// tagged train; multiplex: the same minus the ranks of train priority 0 (they never leave
/// rollout) and then, until --min-rollout-frac of the ranks stay in rollout, the multi-tag ranks
/// of the lowest priority (among equals the highest rank); the coordinator always trains;
/// sync: every rank tagged train. Fixed for the whole run, unless --rebalance-every (multiplex):
/// then the ranks that may train, every one of them at the start (choose_train_group).
std::vector<int> train_group(const config::Options& opt, const std::vector<uint32_t>& all_tags);

/// --rebalance-every: what the coordinator measured over the last steps, the model of a training
/// step it predicts with.
struct StepModel {
    std::map<int, double> gen_rate;  ///< per generating rank, samples delivered per second of generating
    /// Per member, its compute seconds per step (its train spans: the waits in the collectives
    /// are idle) while the group had `measured_members` ranks: with k members its share, and so
    /// its time, is measured_members / k of that.
    std::map<int, double> train_s;
    int measured_members = 1;
    double overhead_s = 0;  ///< the rest of a step: the batch broadcast, the reductions
    int64_t threshold = 0;  ///< samples per step
    /// The share of a training step in which the generators outside the group go on delivering at
    /// their rates, 0 to 1. Admission grants only between steps (at most --staleness steps' samples
    /// ahead), so while a long step trains the fast ranks finish their grants and wait for the next
    /// and what is left in flight is the slow groups' tails; the generation a step needs then
    /// follows it instead of overlapping it. RateWindow::decide fits it to the current group's
    /// measured cycles (fit_overlap); 1 until measured.
    double overlap = 1;
};

/// The training time t of a step with train group `members`: overhead + its slowest member's
/// share (compute scales as 1/k; a rank never measured counts as the measured ones' mean).
double predict_train_seconds(const StepModel& m, const std::vector<int>& members);

/// Seconds per step with train group `members`: t (predict_train_seconds), then the time all
/// generators need for what of `threshold` samples the ranks outside the group did not deliver
/// while it trained (at their rates for overlap x t): t + max(0, threshold - overlap x t x outside
/// rates) / all rates. At overlap 1 this is max(t, (threshold + t x the members' rates) / all
/// rates): the members' generation pauses for t, the others' does not.
double predict_step_seconds(const StepModel& m, const std::vector<int>& members);

/// The overlap (StepModel::overlap) at which predict_step_seconds gives group `members`
/// `cycle_s`, its measured seconds from one step's start to the next, in [0, 1]: 1 when the cycle
/// is no longer than t (training was all of it) or shorter than even overlap 1 predicts, 0 when
/// longer than overlap 0 does; m.overlap when no generator outside the group delivers or t is 0
/// (the cycle says nothing about it then).
double fit_overlap(const StepModel& m, const std::vector<int>& members, double cycle_s);

/// The coordinator's re-split decision (--rebalance-every): among the groups of `eligible`
/// (train_group(), the coordinator first) that hold the coordinator and every rank that cannot
/// roll out, the one with the smallest predicted step (predict_step_seconds; on a tie the higher
/// total --train-priority). With up to 12 other eligible ranks every subset is a candidate; with
/// more, for every k the k best by priority, measured compute and generation rate (the search stays
/// linear at hundreds of ranks). `members` is that group when it beats `current` by more than
/// `hysteresis` (a fraction of current's time), and does at m.overlap 1 too, else `current`.
struct GroupChoice {
    std::vector<int> members;
    double current_s = 0, best_s = 0;  ///< the predictions for `current` and for the best group
};
GroupChoice choose_train_group(const config::Options& opt, const std::vector<uint32_t>& all_tags,
                               const std::vector<int>& eligible, const std::vector<int>& current, const StepModel& m,
                               double hysteresis);

/// --rebalance-every: what the coordinator measures between two decisions, and the decision. The
/// async scheduler and `tagflow sim` feed it the same figures (a generator's samples delivered and
/// seconds generating, a member's compute seconds of a step, a step's whole seconds) and act on the
/// same choice.
struct RateWindow {
    std::map<int, double> delivered;     ///< per generating rank, samples received
    std::map<int, double> rollout_s;     ///< per generating rank, seconds generating
    std::map<int, double> train_s;       ///< per member, compute seconds in training steps
    std::map<int, double> member_steps;  ///< per member, steps it trained
    int64_t steps = 0;                   ///< steps since the last decision
    double trained = 0;                  ///< steps behind step_s (decayed like it)
    double step_s = 0;                   ///< seconds of those steps (the new group's forming excluded)
    /// Whole cycles of the current group (from one step's start to the next one's, its waits for
    /// samples included) and their seconds, decayed like the rest. The first cycle is left out,
    /// as the first step is: it warms up; so is the first after new_group(): it holds the
    /// hand-over and the old group's pool.
    double cycles = 0, cycle_s = 0;
    bool skip_cycle = true;
    double overlap = 1;  ///< StepModel::overlap as last fitted
    /// Per rank that has trained beside others: its compute seconds per step over the other
    /// members' mean, as last measured (its speed relative to theirs). While the rank is not a
    /// member it stands in as that multiple of the members' mean now, so it keeps its measured
    /// speed (a slow trainer is not asked back at the next decision) and follows a change of the
    /// workload that every rank sees alike (responses that lengthen slow it with the members).
    std::map<int, double> relative_s;

    /// One training step of `members` that took `seconds`.
    void add_step(double seconds, const std::vector<int>& members);
    /// A step starts `seconds` after the last one started (called before decide at that step).
    void add_cycle(double seconds);
    /// A new group trains from now on: its steps take other times (the rates stay).
    void new_group();
    /// Every --rebalance-every steps with something measured (else nullopt): the model of what
    /// was measured (every generator that delivered, with over 1 ms of generating), then every
    /// figure halves, so the next decision weighs what is measured until then as much as
    /// everything before (rates follow a changing workload within a few decisions; one window's
    /// noise moves them half as much), with the overlap fitted to the current group's cycles
    /// when some were measured (else as last fitted), then choose_train_group with 10% hysteresis.
    std::optional<GroupChoice> decide(const config::Options& opt, const std::vector<uint32_t>& all_tags,
                                      const std::vector<int>& eligible, const std::vector<int>& current,
                                      const std::vector<int>& gens, int64_t threshold, StepModel* model = nullptr);
};

/// A rank list as sorted ranges, "0-3,6,8-9" (the run file's /steps/train_group). A text longer
/// than `max_len` is cut after the last range that fits, ending in "..." (within max_len).
std::string rank_ranges(std::vector<int> ranks, size_t max_len);

/// Throws ConfigError when the tags do not allow opt.mode (see check_async_roles), or when
/// --train-priority is malformed, given outside multiplex, or puts the coordinator at 0, or when
/// --resume-mode recompute is given in sync mode (no generation outlives a weight update there),
/// or when --rebalance-every is given outside multiplex, with --shard or with --algo ppo.
void check_roles(const config::Options& opt, const std::vector<uint32_t>& all_tags);

/// Samples that trigger a training step: --train-threshold, else prompts-per-step x group-size.
int64_t train_threshold(const config::Options& opt);

/// --stale weight: a sample older than eta gets (eta+1)/(age+1), and is dropped below this.
constexpr double kMinStaleWeight = 0.25;
/// The training weight of a sample `age` versions behind the trained one: 1 within --staleness,
/// then 0 (--stale drop) or (eta+1)/(age+1), 0 below kMinStaleWeight (--stale weight).
double stale_weight(const config::Options& opt, int64_t age);
/// A sample of weights `sample_version` is on its last chance at policy `version`: a step now can
/// train it and the next step (version + 1) drops it.
bool last_chance(const config::Options& opt, int64_t version, int64_t sample_version);
/// --late-wait: how long a step whose threshold is met may wait for `late` incomplete groups on
/// their last chance: their share of the batch (late x group size / `threshold`), but at least one
/// member's share of the train group (1 / `members`; 0 members: no such floor), at most
/// --late-wait, times `cycle_s` (the measured seconds from one step's start to the next, less any
/// wait; 0 before the first is measured). A wait so costs no larger a share of a cycle than the
/// share of a batch it saves from being dropped, or, with a small train group, than one member's
/// share of the group's work: with one or two trainers a dropped long-tail group costs about that
/// (2026-12-05: layout (c) dropped 0 instead of 1.2-2.9%). 0 when nothing is late.
double late_wait_s(const config::Options& opt, int64_t late, int64_t threshold, double cycle_s, int64_t members);
/// The next `cycle_s` (an average) after a step that began `since_last_s` after the previous one
/// and waited `held_s` of it; `cycle_s` <= 0: none measured yet.
double next_cycle(double cycle_s, double since_last_s, double held_s);

}  // namespace tagflow::sched::sched_policy
