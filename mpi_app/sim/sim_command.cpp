// SPDX-License-Identifier: Apache-2.0
// sim_command: see the header.
#include "sim/sim_command.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "cluster/tags.hpp"
#include "common/error.hpp"
#include "sched/sched_policy.hpp"

namespace tagflow::sim {

namespace {

std::vector<std::string> split(const std::string& s, char sep) {
    std::vector<std::string> out;
    std::stringstream ss(s);
    std::string item;
    while (std::getline(ss, item, sep)) out.push_back(item);
    return out;
}

double to_double(const std::string& opt, const std::string& v, double lo, bool lo_open) {
    char* end = nullptr;
    const double x = std::strtod(v.c_str(), &end);
    if (v.empty() || *end != '\0' || !std::isfinite(x) || x < lo || (lo_open && x == lo))
        throw ConfigError("--" + opt + " '" + v + "': expected a number " + (lo_open ? "> " : ">= ") +
                          std::to_string(lo).substr(0, std::to_string(lo).find_last_not_of('0') + 2));
    return x;
}

int64_t to_int(const std::string& opt, const std::string& v, int64_t lo, int64_t hi) {
    char* end = nullptr;
    const long long x = std::strtoll(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0' || x < lo || x > hi)
        throw ConfigError("--" + opt + " '" + v + "': expected a whole number in [" + std::to_string(lo) + ", " +
                          std::to_string(hi) + "]");
    return x;
}

}  // namespace

std::string sim_help() {
    return "usage: tagflow sim [options]   (runs on one process: no MPI, virtual time)\n"
           "Simulates sync, disaggregated and multiplex on N nodes with the scheduler's own decisions\n"
           "(sched/sched_policy.hpp) and a cost model; see share/doc/sim.md.\n"
           "  --nodes LIST           node counts, e.g. 8,32,64,128,200,256 (default)\n"
           "  --hw SPEC              TYPE:TAGS:SHARE;... (default h100:rollout,train:0.5;t4:rollout:0.5);\n"
           "                         nodes are numbered in this order (the coordinator is the first train node)\n"
           "  --modes LIST           sync,disaggregated,multiplex (default: all three)\n"
           "  --lengths KIND         lognormal (default), longtail (tagflow's longtail task's targets) or\n"
           "                         file:PATH (measured response lengths, integers, drawn uniformly)\n"
           "  --median N             lognormal median response tokens (default 32)\n"
           "  --p99-ratio R          lognormal p99 / median (default 10)\n"
           "  --max-new N            cap on response tokens (default 4 x p99; longtail 121)\n"
           "  --prompt-tokens N      prompt tokens per sample (default 7)\n"
           "  --batch-per-node N     samples per training step per node, weak scaling (default 64)\n"
           "  --batch N              fixed samples per training step instead (strong scaling)\n"
           "  --group-size N         samples per prompt (default 8)\n"
           "  --steps N              training steps (default 20)\n"
           "  --staleness N          eta, as tagflow train (default 1)\n"
           "  --stale drop|weight    as tagflow train (default drop)\n"
           "  --min-rollout-frac F   as tagflow train (default 0.1)\n"
           "  --rollout-ahead F      as tagflow train, multiplex only (default 1; 0 = no cap)\n"
           "  --admission MODE       staleness or off, as tagflow train, async modes (default staleness)\n"
           "  --train-priority LIST  as tagflow train, multiplex only (KEY=P;..., KEY a tag set or a node)\n"
           "  --rebalance-every N    as tagflow train, multiplex only (default 0: the train group is fixed)\n"
           "  --late-wait F          as tagflow train, async modes (default 0.5; 0: a step starts at once)\n"
           "  --seed N               response-length seed (default 1)\n"
           "  --cost FILE.json       cost file (tests/bench/sim_calibrate.sh writes one for type cpu)\n"
           "  --model-bytes B        bytes of weights (overrides the cost file's)\n"
           "  --print-cost           print the cost model as JSON and exit\n"
           "  --json OUT             also write the results as JSON\n";
}

SimArgs parse_sim_args(int argc, const char* const* argv) {
    SimArgs a;
    a.base.work.max_new = -1;  // unset
    bool print_cost = false;
    for (int i = 1; i < argc; ++i) {
        std::string k = argv[i], v;
        if (k == "-h" || k == "--help") {
            a.help = true;
            return a;
        }
        if (k == "--print-cost") {
            print_cost = true;
            continue;
        }
        if (k.rfind("--", 0) != 0) throw ConfigError("unexpected argument '" + k + "' (try `tagflow sim --help`)");
        const size_t eq = k.find('=');
        if (eq != std::string::npos) {
            v = k.substr(eq + 1);
            k = k.substr(0, eq);
        } else {
            if (i + 1 >= argc) throw ConfigError(k + ": missing value");
            v = argv[++i];
        }
        const std::string o = k.substr(2);
        if (o == "nodes") {
            a.nodes.clear();
            for (const auto& s : split(v, ',')) a.nodes.push_back(static_cast<int>(to_int(o, s, 1, 100000)));
            if (a.nodes.empty()) throw ConfigError("--nodes '" + v + "': empty list");
        } else if (o == "modes") {
            a.modes.clear();
            for (const auto& s : split(v, ',')) {
                if (!config::is_mode_name(s))
                    throw ConfigError("--modes '" + v + "': unknown mode '" + s + "' (" + config::mode_names() + ")");
                a.modes.push_back(config::Mode(s));
            }
            if (a.modes.empty()) throw ConfigError("--modes '" + v + "': empty list");
        } else if (o == "hw") {
            parse_hw(v);  // validates now, one line
            a.hw = v;
        } else if (o == "lengths") {
            if (v.rfind("file:", 0) == 0) {
                a.base.work.length_file = v.substr(5);
                a.base.work.length_table = load_lengths(a.base.work.length_file);
                a.base.work.lengths = "file";
            } else if (v == "lognormal" || v == "longtail") {
                a.base.work.lengths = v;
            } else {
                throw ConfigError("--lengths '" + v + "': expected lognormal, longtail or file:PATH");
            }
        } else if (o == "median") {
            a.base.work.median = to_double(o, v, 1, false);
        } else if (o == "p99-ratio") {
            a.base.work.p99_ratio = to_double(o, v, 1, false);
        } else if (o == "max-new") {
            a.base.work.max_new = static_cast<int32_t>(to_int(o, v, 1, 1 << 20));
        } else if (o == "prompt-tokens") {
            a.base.work.prompt_tokens = static_cast<int32_t>(to_int(o, v, 0, 1 << 20));
        } else if (o == "batch-per-node") {
            a.base.work.batch_per_node = to_int(o, v, 1, 1 << 24);
        } else if (o == "batch") {
            a.base.work.batch = to_int(o, v, 1, 1 << 30);
        } else if (o == "group-size") {
            a.base.work.group_size = static_cast<int32_t>(to_int(o, v, 1, 4096));
        } else if (o == "steps") {
            a.base.steps = to_int(o, v, 1, 1000000);
        } else if (o == "staleness") {
            a.base.staleness = static_cast<int32_t>(to_int(o, v, 0, 1000000));
        } else if (o == "stale") {
            if (v != "drop" && v != "weight") throw ConfigError("--stale '" + v + "': expected drop or weight");
            a.base.stale = v;
        } else if (o == "min-rollout-frac") {
            a.base.min_rollout_frac = to_double(o, v, 0, false);
            if (a.base.min_rollout_frac >= 1) throw ConfigError("--min-rollout-frac '" + v + "': must be below 1");
        } else if (o == "admission") {
            if (v != "staleness" && v != "off") throw ConfigError("--admission '" + v + "': expected staleness or off");
            a.base.admission = v;
        } else if (o == "rollout-ahead") {
            a.base.rollout_ahead = to_double(o, v, 0, false);
        } else if (o == "train-priority") {
            sched::sched_policy::parse_train_priority(v);  // the syntax now; nodes are checked per run
            a.base.train_priority = v;
        } else if (o == "rebalance-every") {
            a.base.rebalance_every = to_int(o, v, 0, INT32_MAX);
        } else if (o == "late-wait") {
            a.base.late_wait = to_double(o, v, 0, false);
            if (a.base.late_wait > 10) throw ConfigError("--late-wait '" + v + "': must be between 0 and 10");
        } else if (o == "seed") {
            a.base.seed = static_cast<uint64_t>(to_int(o, v, 0, INT64_MAX));
        } else if (o == "cost") {
            a.cost_file = v;
        } else if (o == "model-bytes") {
            a.model_bytes = to_double(o, v, 0, true);
        } else if (o == "json") {
            a.json_out = v;
        } else {
            throw ConfigError("unknown option '" + k + "' (try `tagflow sim --help`)");
        }
    }
    if (a.base.work.max_new < 0) a.base.work.max_new = 0;
    a.print_cost = print_cost;
    return a;
}

std::vector<ModeResult> run_sims(const SimArgs& a, const CostModel& cost) {
    std::vector<ModeResult> out;
    const std::vector<NodeGroup> hw = parse_hw(a.hw);
    for (int n : a.nodes)
        for (const auto& m : a.modes) {
            SimConfig c = a.base;
            c.mode = m;
            c.nodes = n;
            c.hw = hw;
            try {
                out.push_back(simulate(c, cost));
            } catch (const ConfigError& e) {
                throw ConfigError(std::string(e.what()) + " [" + m.name() + ", " + std::to_string(n) + " nodes]");
            }
        }
    return out;
}

std::string format_table(const SimArgs& a, const CostModel& cost, const std::vector<ModeResult>& rs) {
    const std::vector<NodeGroup> hw = parse_hw(a.hw);
    const Workload& w = a.base.work;
    std::string s, detail;
    if (w.lengths == "lognormal") {
        detail = " median " + std::to_string(static_cast<int>(w.median)) + " p99 x" +
                 std::to_string(w.p99_ratio).substr(0, 4);
    } else if (w.lengths == "file") {
        double sum = 0;
        for (int32_t x : w.length_table) sum += x;
        char m[64];
        snprintf(m, sizeof m, "%.1f", sum / static_cast<double>(w.length_table.size()));
        detail = " " + w.length_file + " (" + std::to_string(w.length_table.size()) + " lengths, mean " + m + ")";
    }
    char buf[1024];
    snprintf(buf, sizeof buf,
             "tagflow sim: hw %s; lengths %s%s; prompt %d tok; %s; group %d; %lld steps; eta %d (%s); admission %s; "
             "seed %llu;\n"
             "             costs: %s; model %.3g bytes; link %.3g s + bytes / %.3g B/s\n",
             a.hw.c_str(), w.lengths.c_str(), detail.c_str(), w.prompt_tokens,
             w.batch > 0 ? ("batch " + std::to_string(w.batch)).c_str()
                         : ("batch " + std::to_string(w.batch_per_node) + "/node").c_str(),
             w.group_size, static_cast<long long>(a.base.steps), a.base.staleness, a.base.stale.c_str(),
             a.base.admission.c_str(), static_cast<unsigned long long>(a.base.seed), cost.source.c_str(),
             cost.model_bytes, cost.latency_s, cost.bandwidth_Bps);
    s += buf;
    snprintf(buf, sizeof buf, "%6s %-14s %11s %12s %8s %7s %6s %6s %8s", "nodes", "mode", "samples/s", "tokens/s",
             "vs sync", "eff", "train", "stale", "dropped");
    s += buf;
    for (const auto& g : hw) s += "  idle[" + g.label + "]";
    s += "\n";
    for (const auto& r : rs) {
        double sync = 0, base = 0;
        for (const auto& o : rs) {
            if (o.nodes == r.nodes && o.mode == config::Mode::kSync) sync = o.samples_per_s;
            if (o.nodes == a.nodes.front() && o.mode == r.mode) base = o.samples_per_s / o.nodes;
        }
        const double eff = base > 0 ? (r.samples_per_s / r.nodes) / base : 0;
        snprintf(buf, sizeof buf, "%6d %-14s %11.1f %12.0f %8s %6.1f%% %6d %6.2f %8lld", r.nodes, r.mode.name(),
                 r.samples_per_s, r.tokens_per_s,
                 sync > 0 ? (std::to_string(r.samples_per_s / sync).substr(0, 5) + "x").c_str() : "-", 100 * eff,
                 r.train_group_size, r.staleness_mean, static_cast<long long>(r.dropped));
        s += buf;
        for (size_t g = 0; g < hw.size(); ++g) {
            const int width = static_cast<int>(hw[g].label.size()) + 8;
            if (r.group_nodes[g] == 0) snprintf(buf, sizeof buf, "%*s", width, "-");
            else snprintf(buf, sizeof buf, "%*.1f%%", width - 1, 100 * r.idle_frac[g]);
            s += buf;
        }
        s += "\n";
    }
    s += "eff: samples/s per node relative to " + std::to_string(a.nodes.front()) +
         " nodes, same mode; train: train-group nodes (at the end); stale: mean staleness of trained samples\n";
    for (const auto& r : rs)
        if (a.base.rebalance_every > 0 && r.mode == config::Mode::kMultiplex) {
            snprintf(buf, sizeof buf, "--rebalance-every %lld at %d nodes: %lld train group change%s\n",
                     static_cast<long long>(a.base.rebalance_every), r.nodes, static_cast<long long>(r.regroups),
                     r.regroups == 1 ? "" : "s");
            s += buf;
        }
    for (const auto& r : rs)
        if (a.base.late_wait > 0 && r.mode != config::Mode::kSync) {
            snprintf(buf, sizeof buf, "--late-wait %g, %s at %d nodes: %lld step%s waited %.2f s in all\n",
                     a.base.late_wait, r.mode.name(), r.nodes, static_cast<long long>(r.holds), r.holds == 1 ? "" : "s",
                     r.held_s);
            s += buf;
        }
    return s;
}

std::string results_json(const SimArgs& a, const CostModel& cost, const std::vector<ModeResult>& rs) {
    nlohmann::json j;
    const Workload& w = a.base.work;
    std::vector<std::string> modes;
    for (const config::Mode m : a.modes) modes.emplace_back(m.name());
    j["config"] = {{"hw", a.hw},
                   {"nodes", a.nodes},
                   {"modes", modes},
                   {"lengths", w.lengths},
                   {"length_file", w.length_file},
                   {"median", w.median},
                   {"p99_ratio", w.p99_ratio},
                   {"max_new", w.max_new},
                   {"prompt_tokens", w.prompt_tokens},
                   {"batch_per_node", w.batch_per_node},
                   {"batch", w.batch},
                   {"group_size", w.group_size},
                   {"steps", a.base.steps},
                   {"staleness", a.base.staleness},
                   {"stale", a.base.stale},
                   {"min_rollout_frac", a.base.min_rollout_frac},
                   {"rollout_ahead", a.base.rollout_ahead},
                   {"admission", a.base.admission},
                   {"train_priority", a.base.train_priority},
                   {"rebalance_every", a.base.rebalance_every},
                   {"late_wait", a.base.late_wait},
                   {"seed", a.base.seed}};
    j["cost"] = nlohmann::json::parse(to_json(cost));
    j["results"] = nlohmann::json::array();
    const std::vector<NodeGroup> hw = parse_hw(a.hw);
    for (const auto& r : rs) {
        nlohmann::json idle;
        for (size_t g = 0; g < hw.size(); ++g)
            if (r.group_nodes[g] > 0) idle[hw[g].label] = r.idle_frac[g];
        j["results"].push_back({{"mode", r.mode.name()},
                                {"nodes", r.nodes},
                                {"steps", r.steps},
                                {"wall_s", r.wall},
                                {"samples_per_s", r.samples_per_s},
                                {"tokens_per_s", r.tokens_per_s},
                                {"generated", r.generated},
                                {"trained", r.trained},
                                {"dropped", r.dropped},
                                {"weighted", r.weighted},
                                {"leftover", r.leftover},
                                {"discarded", r.discarded},
                                {"staleness_mean", r.staleness_mean},
                                {"train_group_size", r.train_group_size},
                                {"regroups", r.regroups},
                                {"holds", r.holds},
                                {"held_s", r.held_s},
                                {"idle_frac", idle}});
    }
    return j.dump(1);
}

int sim_command(int argc, char** argv, bool root) {
    const SimArgs a = parse_sim_args(argc, argv);
    if (!root) return 0;
    if (a.help) {
        std::fputs(sim_help().c_str(), stdout);
        return 0;
    }
    CostModel cost = default_costs();
    if (!a.cost_file.empty()) merge_cost_file(cost, a.cost_file);
    if (a.model_bytes > 0) cost.model_bytes = a.model_bytes;
    if (a.print_cost) {
        std::printf("%s\n", to_json(cost).c_str());
        return 0;
    }
    for (const auto& g : parse_hw(a.hw)) cost.at(g.hw);  // unknown type: one line, before any run
    const std::vector<ModeResult> rs = run_sims(a, cost);
    std::fputs(format_table(a, cost, rs).c_str(), stdout);
    if (!a.json_out.empty()) {
        std::ofstream f(a.json_out);
        if (!f) throw ConfigError("--json " + a.json_out + ": cannot write");
        f << results_json(a, cost, rs) << "\n";
    }
    std::fflush(stdout);
    return 0;
}

}  // namespace tagflow::sim
