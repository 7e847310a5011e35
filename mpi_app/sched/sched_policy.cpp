// SPDX-License-Identifier: Apache-2.0
// sched_policy: see the header. Moved verbatim from async_scheduler.cpp (issue 6, the simulator).
#include "sched/sched_policy.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <utility>

#include "cluster/tags.hpp"
#include "common/error.hpp"

namespace tagflow::sched::sched_policy {

std::vector<int> tagged_train(const std::vector<uint32_t>& all_tags) {
    std::vector<int> t;
    for (size_t r = 0; r < all_tags.size(); ++r)
        if (all_tags[r] & cluster::kTrain) t.push_back(static_cast<int>(r));
    return t;
}

int coordinator(const std::vector<uint32_t>& all_tags) {
    const std::vector<int> t = tagged_train(all_tags);
    return t.empty() ? -1 : t.front();
}

TrainPriority parse_train_priority(const std::string& spec) {
    TrainPriority prio;
    const std::string example = " (expected KEY=P;KEY=P with KEY a tag set or a rank, e.g. \"rollout,train=2;5=0\")";
    size_t pos = 0;
    while (pos < spec.size()) {
        size_t end = spec.find(';', pos);
        if (end == std::string::npos) end = spec.size();
        const std::string item = spec.substr(pos, end - pos);
        pos = end + 1;
        if (item.empty()) {
            if (end == spec.size()) break;  // a trailing ';'
            throw ConfigError("--train-priority: empty entry" + example);
        }
        const size_t eq = item.rfind('=');
        if (eq == std::string::npos || eq == 0 || eq + 1 == item.size())
            throw ConfigError("--train-priority: entry '" + item + "' is not KEY=P" + example);
        const std::string key = item.substr(0, eq), num = item.substr(eq + 1);
        char* e = nullptr;
        errno = 0;
        const long v = std::strtol(num.c_str(), &e, 10);
        if (errno != 0 || e == num.c_str() || *e != '\0' || v < 0 || v > 1000)
            throw ConfigError("--train-priority: entry '" + item + "': priority '" + num +
                              "' is not an integer from 0 to 1000");
        if (key.find_first_not_of("0123456789") == std::string::npos) {
            errno = 0;
            const long r = key.size() > 9 ? -1 : std::strtol(key.c_str(), nullptr, 10);
            if (r < 0) throw ConfigError("--train-priority: entry '" + item + "': rank '" + key + "' is out of range");
            if (!prio.by_rank.emplace(static_cast<int>(r), static_cast<int>(v)).second)
                throw ConfigError("--train-priority: rank " + key + " given twice");
            continue;
        }
        const uint32_t bits = cluster::parse_tag_list(key, "--train-priority");
        if (!(bits & cluster::kTrain))
            throw ConfigError("--train-priority: entry '" + item +
                              "' names a tag set without train (only ranks "
                              "tagged train have a train priority)");
        if (!prio.by_tags.emplace(bits, static_cast<int>(v)).second)
            throw ConfigError("--train-priority: tag set " + cluster::tags_to_string(bits) + " given twice");
    }
    return prio;
}

int train_priority(const TrainPriority& prio, int rank, uint32_t tags) {
    if (!(tags & cluster::kTrain)) return 0;
    const auto r = prio.by_rank.find(rank);
    if (r != prio.by_rank.end()) return r->second;
    const auto t = prio.by_tags.find(tags);
    return t == prio.by_tags.end() ? 1 : t->second;
}

uint64_t mix64(uint64_t x) {  // splitmix64's finaliser
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

uint64_t sample_hash(uint64_t seed, int64_t id) { return mix64(mix64(seed ^ 0x51a7ULL) ^ static_cast<uint64_t>(id)); }

double unit_interval(uint64_t x) { return (static_cast<double>(x >> 11) + 0.5) * (1.0 / 9007199254740992.0); }

int32_t lognormal_length(double median, double p99_ratio, double cap, uint64_t seed, int64_t id) {
    const uint64_t h = sample_hash(seed, id);
    const double sigma = std::log(p99_ratio) / 2.3263478740408408;  // Box-Muller
    const double u1 = unit_interval(h), u2 = unit_interval(mix64(h ^ 0xb0c5ULL));
    const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
    const double len = std::round(median * std::exp(sigma * z));
    return static_cast<int32_t>(std::max(1.0, std::min(cap, len)));
}

config::Mode default_mode(const std::string& ckpt_mode, std::string& why) {
    why.clear();
    if (ckpt_mode.empty()) return config::Mode::kDefault;
    const config::Mode m(ckpt_mode);
    if (m != config::Mode::kDefault) why = "mode " + ckpt_mode + ": the checkpoint this run resumes was written in it";
    return m;
}

int64_t rollout_quota(const config::Options& opt, int64_t threshold, int64_t generators, int64_t training_generators) {
    if (opt.mode != config::Mode::kMultiplex || opt.rollout_ahead <= 0 || generators < 1 ||
        training_generators < generators)
        return 0;
    const double share = opt.rollout_ahead * static_cast<double>(threshold) / static_cast<double>(generators);
    const int64_t G = opt.group_size;
    return std::max<int64_t>(1, static_cast<int64_t>(std::ceil(share / static_cast<double>(G) - 1e-9))) * G;
}

int64_t admission_budget(const config::Options& opt, double rate, int64_t threshold) {
    if (opt.admission == "off" || !opt.mode.is_async()) return 0;
    const int64_t G = opt.group_size;
    const int64_t floor_groups = (threshold + G - 1) / G * G;
    const double want = static_cast<double>(opt.staleness + 1) * std::max(rate, static_cast<double>(threshold));
    return std::max<int64_t>(floor_groups, static_cast<int64_t>(std::floor(want + 1e-9)));
}

double next_admission_rate(double rate, int64_t trained, int64_t /*dropped*/) {
    const double x = static_cast<double>(trained);
    return rate <= 0 ? x : 0.7 * rate + 0.3 * x;
}

int64_t admission_cap(int64_t max_batch, int64_t group_size) {
    return ((max_batch + group_size - 1) / group_size + 1) * group_size;
}

std::vector<int64_t> grant_caps(const std::vector<uint8_t>& trains, const std::vector<int64_t>& member_groups,
                                bool coordinator_idle, int64_t group_size, int64_t cap) {
    if (member_groups.size() != trains.size())
        throw InternalError("grant_caps: " + std::to_string(trains.size()) + " generators, " +
                            std::to_string(member_groups.size()) + " allowances");
    const bool mixed = std::count(trains.begin(), trains.end(), 0) > 0;
    std::vector<int64_t> caps(trains.size(), cap);
    for (size_t i = 0; i < trains.size(); ++i)
        if (mixed && trains[i])
            caps[i] = std::min(cap, std::max<int64_t>(member_groups[i], coordinator_idle ? 1 : 0) * group_size);
    return caps;
}

int64_t next_member_cap(int64_t groups, int64_t dropped, int64_t delivered, int64_t max_groups) {
    if (dropped > 0) return groups / 2;
    if (delivered > 0) return std::min(std::max<int64_t>(1, max_groups), std::max<int64_t>(1, 2 * groups));
    return groups;
}

void update_member_caps(std::vector<int64_t>& member_groups, std::vector<int64_t>& arrived_at_step,
                        const std::vector<uint8_t>& trains, const std::vector<int64_t>& arrived,
                        const std::vector<int64_t>& dropped_ids, int64_t group_size, bool coordinator_idle,
                        int64_t max_groups) {
    const size_t n = trains.size();
    if (member_groups.size() != n || arrived_at_step.size() != n || arrived.size() != n)
        throw InternalError("update_member_caps: " + std::to_string(n) + " generators, " +
                            std::to_string(member_groups.size()) + " allowances, " + std::to_string(arrived.size()) +
                            " arrival counts");
    if (n == 0) return;
    std::vector<int64_t> dropped(n, 0);
    for (int64_t id : dropped_ids) ++dropped[static_cast<size_t>(id / group_size % static_cast<int64_t>(n))];
    for (size_t i = 0; i < n; ++i)
        if (trains[i])
            member_groups[i] = next_member_cap(member_groups[i], dropped[i],
                                               coordinator_idle ? arrived[i] - arrived_at_step[i] : 0, max_groups);
    arrived_at_step = arrived;
}

int64_t grant_groups(std::vector<int64_t>& granted, const std::vector<int64_t>& arrived, int64_t outstanding,
                     int64_t budget, int64_t group_size, const std::vector<int64_t>& caps) {
    if (granted.size() != arrived.size() || caps.size() != granted.size())
        throw InternalError("grant_groups: " + std::to_string(granted.size()) + " generators granted, " +
                            std::to_string(arrived.size()) + " delivering, " + std::to_string(caps.size()) + " caps");
    std::vector<int64_t> load(granted.size()), limit(caps);
    for (int64_t& l : limit) l -= group_size;
    while (outstanding + group_size <= budget) {
        for (size_t i = 0; i < granted.size(); ++i) load[i] = granted[i] * group_size - arrived[i];
        const size_t best = least_loaded(load, limit);
        if (best == granted.size()) break;
        ++granted[best];
        outstanding += group_size;
    }
    return outstanding;
}

size_t least_loaded(const std::vector<int64_t>& loads, const std::vector<int64_t>& limits) {
    size_t best = loads.size();
    if (limits.size() != loads.size()) return best;
    for (size_t i = 0; i < loads.size(); ++i)
        if (loads[i] <= limits[i] && (best == loads.size() || loads[i] < loads[best])) best = i;
    return best;
}

// Rounded down: the default 10% keeps one rank in every ten out of training and none in a job of
// under ten (rounding a 2-rank colocated job's 0.2 up to a whole rank halved its training group and
// made multiplex 1.7x slower than sync on the main job).
int min_rollout_ranks(const config::Options& opt, int n) {
    return static_cast<int>(std::floor(opt.min_rollout_frac * n + 1e-9));
}

std::vector<int> train_group(const config::Options& opt, const std::vector<uint32_t>& all_tags) {
    std::vector<int> t = tagged_train(all_tags);
    if (opt.mode != config::Mode::kMultiplex || t.empty()) return t;
    const TrainPriority prio = parse_train_priority(opt.train_priority);
    const auto tags_of = [&](int r) { return all_tags[static_cast<size_t>(r)]; };
    const auto prio_of = [&](int r) { return train_priority(prio, r, tags_of(r)); };
    const int n = static_cast<int>(all_tags.size());
    const int need = min_rollout_ranks(opt, n);
    // Priority 0: never trains (the coordinator always does; check_roles refuses it at 0).
    std::vector<int> keep{t.front()};
    for (size_t k = 1; k < t.size(); ++k)
        if (prio_of(t[k]) > 0 || !(tags_of(t[k]) & cluster::kRollout)) keep.push_back(t[k]);
    t = keep;
    int staying = 0;  // ranks tagged rollout outside the train group
    for (int r = 0; r < n; ++r)
        if ((tags_of(r) & cluster::kRollout) && !std::count(t.begin(), t.end(), r)) ++staying;
    // Keep multi-tag ranks (never the coordinator) in rollout until enough stay: the lowest
    // priority first, among equals the highest rank.
    std::vector<int> order(t.begin() + 1, t.end());
    std::stable_sort(order.begin(), order.end(),
                     [&](int a, int b) { return prio_of(a) != prio_of(b) ? prio_of(a) < prio_of(b) : a > b; });
    for (int r : order) {
        if (staying >= need) break;
        if (!(tags_of(r) & cluster::kRollout)) continue;
        t.erase(std::find(t.begin(), t.end(), r));
        ++staying;
    }
    return t;
}

void check_roles(const config::Options& opt, const std::vector<uint32_t>& all_tags) {
    const TrainPriority prio = parse_train_priority(opt.train_priority);  // the syntax first
    if (!opt.train_priority.empty() && opt.mode != config::Mode::kMultiplex)
        throw ConfigError(std::string("--train-priority applies to --mode multiplex only (not ") + opt.mode.name() +
                          ")");
    if (opt.resume_mode != "keep" && !opt.mode.is_async())
        throw ConfigError("--resume-mode " + opt.resume_mode + " applies to --mode disaggregated and multiplex (" +
                          opt.mode.name() + " mode finishes every generation before the weights change)");
    if (opt.rebalance_every > 0) {
        if (opt.mode != config::Mode::kMultiplex)
            throw ConfigError(std::string("--rebalance-every applies to --mode multiplex only (not ") +
                              opt.mode.name() + "): the other modes have no multi-tag ranks to move");
        if (opt.shard != "off")
            throw ConfigError("--rebalance-every with --shard " + opt.shard +
                              ": a joining rank would need its share of the moments re-cut; use --shard off");
        if (opt.algo == "ppo")
            for (uint32_t t : all_tags)
                if (t & cluster::kCritic)
                    throw ConfigError(
                        "--rebalance-every with --algo ppo and ranks tagged critic: the critic's own ranks join "
                        "every step and are not moved; use --rebalance-every 0, or no critic tag (the critic "
                        "then lives on the train group and moves with it)");
    }
    if (!opt.mode.is_async()) return;
    const int world = static_cast<int>(all_tags.size());
    for (const auto& [r, p] : prio.by_rank) {
        if (r >= world)
            throw ConfigError("--train-priority: rank " + std::to_string(r) + " does not exist (" +
                              std::to_string(world) + " ranks)");
        if (!(all_tags[static_cast<size_t>(r)] & cluster::kTrain))
            throw ConfigError("--train-priority: rank " + std::to_string(r) + " is not tagged train (tags " +
                              cluster::tags_to_string(all_tags[static_cast<size_t>(r)]) + ")");
    }
    for (int r = 0; r < world; ++r) {
        const uint32_t b = all_tags[static_cast<size_t>(r)];
        if (!(b & cluster::kTrain) || train_priority(prio, r, b) > 0) continue;
        if (r == coordinator(all_tags))
            throw ConfigError("--train-priority: rank " + std::to_string(r) +
                              " is the coordinator (the lowest rank tagged train) and always trains: its priority "
                              "must be above 0");
        if (!(b & cluster::kRollout))
            throw ConfigError("--train-priority: rank " + std::to_string(r) + " (tags " + cluster::tags_to_string(b) +
                              ") cannot roll out, so it must train: its priority must be above 0");
    }
    const std::vector<int> t = train_group(opt, all_tags);
    const int n = static_cast<int>(all_tags.size());
    int outside = 0;
    for (int r = 0; r < n; ++r)
        if ((all_tags[static_cast<size_t>(r)] & cluster::kRollout) && !std::count(t.begin(), t.end(), r)) ++outside;
    if (opt.mode == config::Mode::kDisaggregated && outside == 0)
        throw ConfigError(
            "--mode disaggregated: every rank tagged rollout is also tagged train; the mode needs at "
            "least one rank that only rolls out (e.g. --rank-tags \"0=rollout;1=rollout,train\")");
    if (opt.mode == config::Mode::kMultiplex) {
        const int need = min_rollout_ranks(opt, n);
        if (outside < need)
            throw ConfigError("--min-rollout-frac " + std::to_string(opt.min_rollout_frac) + ": needs " +
                              std::to_string(need) + " rank(s) that never leave rollout, but only " +
                              std::to_string(outside) + " rank(s) besides the coordinator (rank " +
                              std::to_string(coordinator(all_tags)) + ") can stay there");
    }
}

double predict_train_seconds(const StepModel& m, const std::vector<int>& members) {
    double mean = 0;
    for (const auto& [r, t] : m.train_s) mean += t;
    mean = m.train_s.empty() ? 0 : mean / static_cast<double>(m.train_s.size());
    const double k = static_cast<double>(std::max<size_t>(1, members.size()));
    double slowest = 0;  // the member whose share takes longest (its compute scales with 1/k)
    for (int r : members) {
        const auto it = m.train_s.find(r);
        slowest = std::max(slowest, (it != m.train_s.end() ? it->second : mean) * m.measured_members / k);
    }
    return m.overhead_s + slowest;
}

namespace {
// All generators' rates, and those of the generators outside `members`.
std::pair<double, double> gen_rates(const StepModel& m, const std::vector<int>& members) {
    double all = 0, outside = 0;
    for (const auto& [r, g] : m.gen_rate) {
        all += g;
        if (!std::count(members.begin(), members.end(), r)) outside += g;
    }
    return {all, outside};
}

// predict_step_seconds at `overlap` instead of m.overlap.
double step_seconds(const StepModel& m, const std::vector<int>& members, double overlap) {
    const double t = predict_train_seconds(m, members);
    const auto [all, outside] = gen_rates(m, members);
    if (all <= 0) return t;
    return t + std::max(0.0, static_cast<double>(m.threshold) - overlap * t * outside) / all;
}
}  // namespace

double predict_step_seconds(const StepModel& m, const std::vector<int>& members) {
    return step_seconds(m, members, m.overlap);
}

double fit_overlap(const StepModel& m, const std::vector<int>& members, double cycle_s) {
    const double t = predict_train_seconds(m, members);
    const auto [all, outside] = gen_rates(m, members);
    if (t <= 0 || outside <= 0 || all <= 0) return m.overlap;
    if (cycle_s <= t) return 1.0;  // training is the whole cycle: any overlap that delivers enough fits
    const double o = (static_cast<double>(m.threshold) - (cycle_s - t) * all) / (t * outside);
    return std::clamp(o, 0.0, 1.0);
}

GroupChoice choose_train_group(const config::Options& opt, const std::vector<uint32_t>& all_tags,
                               const std::vector<int>& eligible, const std::vector<int>& current, const StepModel& m,
                               double hysteresis) {
    GroupChoice c;
    c.members = current;
    c.current_s = c.best_s = predict_step_seconds(m, current);
    if (eligible.empty()) return c;
    const TrainPriority prio = parse_train_priority(opt.train_priority);
    const auto tags_of = [&](int r) { return all_tags[static_cast<size_t>(r)]; };
    // The coordinator and the ranks that cannot roll out always train; the others may join them.
    // Up to 12 of them: every subset. More: ranked by --train-priority (highest first), then by
    // measured compute per step (fastest first; unmeasured ones as the measured mean), then by
    // generation rate (slowest first: it gives up least), each group of the k best for every k
    // (a prediction depends on the slowest member and the members' summed rates, so for a given
    // size those are the strongest candidates).
    std::vector<int> fixed{eligible.front()}, optional;
    for (size_t k = 1; k < eligible.size(); ++k)
        ((tags_of(eligible[k]) & cluster::kRollout) ? optional : fixed).push_back(eligible[k]);
    const auto prio_of = [&](int r) { return train_priority(prio, r, tags_of(r)); };
    const auto figure = [](const std::map<int, double>& f, int r, double unknown) {
        const auto it = f.find(r);
        return it != f.end() ? it->second : unknown;
    };
    double mean_train = 0;
    for (const auto& [r, t] : m.train_s) mean_train += t / static_cast<double>(m.train_s.size());
    std::stable_sort(optional.begin(), optional.end(), [&](int a, int b) {
        if (prio_of(a) != prio_of(b)) return prio_of(a) > prio_of(b);
        const double ta = figure(m.train_s, a, mean_train), tb = figure(m.train_s, b, mean_train);
        if (ta != tb) return ta < tb;
        return figure(m.gen_rate, a, 0) < figure(m.gen_rate, b, 0);
    });
    const bool every_subset = optional.size() <= 12;
    const uint64_t candidates = every_subset ? (uint64_t{1} << optional.size()) : optional.size() + 1;
    std::vector<int> best = current;
    double best_s = c.current_s;
    int64_t best_prio = -1;
    for (uint64_t mask = 0; mask < candidates; ++mask) {
        std::vector<int> cand = fixed;
        int64_t p = 0;
        for (size_t j = 0; j < optional.size(); ++j)
            if (every_subset ? (mask & (uint64_t{1} << j)) != 0 : j < mask)
                cand.push_back(optional[j]), p += prio_of(optional[j]);
        std::sort(cand.begin(), cand.end());
        const double d = predict_step_seconds(m, cand);
        // Among equal predictions: the higher total priority, then the larger group.
        if (d < best_s * (1 - 1e-9) || (d <= best_s * (1 + 1e-9) && p > best_prio)) {
            best_s = std::min(best_s, d);
            best = cand;
            best_prio = p;
        }
    }
    c.best_s = predict_step_seconds(m, best);
    // A fitted overlap below 1 may veto a move, never make one: the move must win at full overlap
    // too. The fit explains the current group's cycles, so a slow cycle on a busy machine raises
    // the current group's prediction and not that of a group with no rank outside it.
    const bool wins_at_full =
        m.overlap >= 1 || step_seconds(m, best, 1.0) < (1.0 - hysteresis) * step_seconds(m, current, 1.0);
    if (best != current && c.best_s < (1.0 - hysteresis) * c.current_s && wins_at_full) c.members = best;
    return c;
}

int64_t train_threshold(const config::Options& opt) {
    return opt.train_threshold > 0 ? opt.train_threshold : static_cast<int64_t>(opt.prompts_per_step) * opt.group_size;
}

double stale_weight(const config::Options& opt, int64_t age) {
    if (age <= opt.staleness) return 1.0;
    if (opt.stale == "drop") return 0.0;
    const double w = static_cast<double>(opt.staleness + 1) / static_cast<double>(age + 1);
    return w < kMinStaleWeight ? 0.0 : w;
}

bool last_chance(const config::Options& opt, int64_t version, int64_t sample_version) {
    return stale_weight(opt, version - sample_version) > 0 && stale_weight(opt, version + 1 - sample_version) <= 0;
}

double late_wait_s(const config::Options& opt, int64_t late, int64_t threshold, double cycle_s, int64_t members) {
    if (late <= 0 || cycle_s <= 0 || threshold <= 0) return 0.0;
    double share = static_cast<double>(late * opt.group_size) / static_cast<double>(threshold);
    if (members > 0) share = std::max(share, 1.0 / static_cast<double>(members));
    return std::min(opt.late_wait, share) * cycle_s;
}

double next_cycle(double cycle_s, double since_last_s, double held_s) {
    const double c = std::max(0.0, since_last_s - held_s);
    return cycle_s <= 0 ? c : 0.7 * cycle_s + 0.3 * c;
}

void RateWindow::add_step(double seconds, const std::vector<int>& members) {
    ++steps;
    ++trained;
    step_s += std::max(0.0, seconds);
    for (int r : members) member_steps[r] += 1;
}

void RateWindow::add_cycle(double seconds) {
    if (skip_cycle) {
        skip_cycle = false;
        return;
    }
    ++cycles;
    cycle_s += std::max(0.0, seconds);
}

void RateWindow::new_group() {
    trained = 0;
    step_s = 0;
    cycles = 0;
    cycle_s = 0;
    skip_cycle = true;
    train_s.clear();
    member_steps.clear();
}

std::optional<GroupChoice> RateWindow::decide(const config::Options& opt, const std::vector<uint32_t>& all_tags,
                                              const std::vector<int>& eligible, const std::vector<int>& current,
                                              const std::vector<int>& gens, int64_t threshold, StepModel* model) {
    if (opt.rebalance_every <= 0 || eligible.size() < 2 || steps < opt.rebalance_every || trained <= 0)
        return std::nullopt;
    StepModel m;
    m.threshold = threshold;
    for (int r : gens) {
        const double t = rollout_s[r], n = delivered[r];
        // Any generator that delivered: fast ones deliver a step's share in a few ms of generating
        // (2026-12-04: ~5,000 samples/s per rank here); leaving them out, as a 0.05 s floor did,
        // counted only the slow ones and predicted 1.5-3x the measured step.
        if (t > 1e-3 && n > 0) m.gen_rate[r] = n / t;
    }
    double slowest = 0, sum = 0;
    for (int r : current)
        if (member_steps[r] > 0 && train_s[r] > 0) {
            m.train_s[r] = train_s[r] / member_steps[r];
            slowest = std::max(slowest, m.train_s[r]);
            sum += m.train_s[r];
        }
    const double measured = static_cast<double>(m.train_s.size());
    if (measured > 1)
        for (const auto& [r, t] : m.train_s) relative_s[r] = t / ((sum - t) / (measured - 1));
    // A rank that trained before keeps its speed relative to the members when it leaves: as the
    // members' mean it would be asked back, if slow, at the next decision (a flap per two
    // decisions); as its seconds of then it would look ever faster while responses lengthen.
    if (measured > 0)
        for (int r : eligible)
            if (!m.train_s.count(r) && relative_s.count(r)) m.train_s[r] = relative_s[r] * sum / measured;
    m.measured_members = static_cast<int>(current.size());
    m.overhead_s = std::max(0.0, step_s / trained - slowest);
    m.overlap = overlap;
    if (cycles > 0) m.overlap = overlap = fit_overlap(m, current, cycle_s / cycles);
    for (auto* figures : {&delivered, &rollout_s, &train_s, &member_steps})
        for (auto& [r, v] : *figures) v /= 2;
    steps = 0;
    trained /= 2;
    step_s /= 2;
    cycles /= 2;
    cycle_s /= 2;
    if (model) *model = m;
    return choose_train_group(opt, all_tags, eligible, current, m, 0.1);
}

std::string rank_ranges(std::vector<int> ranks, size_t max_len) {
    std::sort(ranks.begin(), ranks.end());
    std::string out;
    for (size_t i = 0; i < ranks.size();) {
        size_t j = i;
        while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
        std::string item = std::to_string(ranks[i]);
        if (j > i) item += "-" + std::to_string(ranks[j]);
        const bool last = j + 1 == ranks.size();
        const std::string next = (out.empty() ? "" : ",") + item;
        // Room for this range, and for ",..." after it unless it is the last one (so `out` always
        // has room for ",..." when a later range does not fit).
        if (out.size() + next.size() + (last ? 0 : 4) > max_len) return out.empty() ? "..." : out + ",...";
        out += next;
        i = j + 1;
    }
    return out;
}

}  // namespace tagflow::sched::sched_policy
