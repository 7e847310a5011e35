// SPDX-License-Identifier: Apache-2.0
// traj_bench: operations/s of the trajectory manager (mpi_app/traj/) on one core. One
// operation = longest_prefix_match(input) + insert() of one request of about `size`/4 tokens
// that extends an earlier request (its whole sequence + tool tokens, then a model turn) or
// branches from one at a random point. Baseline in the same run: a flat store, std::map from
// each request's full token sequence to its logprobs/versions (LPM = lower_bound + the common
// prefix with both neighbours). #wrong: trajectories that do not rebuild to their request,
// plus LPM lengths that differ from the baseline's. Each rank runs its own manager.
#include <time.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <vector>

#include "bench_common.hpp"
#include "common/error.hpp"
#include "traj/trajectory_manager.hpp"

using namespace tagflow;
using namespace tagflow::bench;
using traj::Span;
using traj::Token;

namespace {

/// The workload, generated untimed: every request's full sequence (input + output) is
/// materialised in one pool so both stores get the same contiguous spans.
struct Work {
    std::vector<Token> pool;
    std::vector<size_t> start;                  // pool offset of request i
    std::vector<int32_t> n_in, n_out;           // its input and output lengths
    std::vector<int32_t> version;               // policy version of its output tokens
    std::vector<std::vector<int32_t>> ver_buf;  // ver_buf[v]: max_out copies of v
    std::vector<float> lp_buf;                  // logprobs (shared by every request)
    traj::Request request(size_t i) const {
        traj::Request r;
        const Token* p = pool.data() + start[i];
        const size_t ni = static_cast<size_t>(n_in[i]), no = static_cast<size_t>(n_out[i]);
        r.input = Span<Token>(p, ni);
        r.output = Span<Token>(p + ni, no);
        r.logprobs = Span<float>(lp_buf.data(), no);
        r.versions = Span<int32_t>(ver_buf[static_cast<size_t>(version[i])].data(), no);
        r.t_start = r.t_end = static_cast<double>(i);
        return r;
    }
};

/// Length of the common prefix of a[0, na) and b[0, nb): 32-token blocks by memcmp, then one
/// by one (the same comparison kernel the tree uses, so the baseline is not slowed by a scalar
/// std::lexicographical_compare).
size_t common_prefix(const Token* a, size_t na, const Token* b, size_t nb) {
    const size_t n = std::min(na, nb);
    size_t k = 0;
    while (k + 32 <= n && std::memcmp(a + k, b + k, 32 * sizeof(Token)) == 0) k += 32;
    while (k < n && a[k] == b[k]) ++k;
    return k;
}
bool less(const Token* a, size_t na, const Token* b, size_t nb) {
    const size_t k = common_prefix(a, na, b, nb);
    return k < na && k < nb ? a[k] < b[k] : na < nb;
}

/// Orders stored sequences, also against a query span (transparent comparator for std::map).
struct SeqLess {
    using is_transparent = void;
    bool operator()(const std::vector<Token>& a, const std::vector<Token>& b) const {
        return less(a.data(), a.size(), b.data(), b.size());
    }
    bool operator()(const std::vector<Token>& a, Span<Token> b) const {
        return less(a.data(), a.size(), b.data(), b.size());
    }
    bool operator()(Span<Token> a, const std::vector<Token>& b) const {
        return less(a.data(), a.size(), b.data(), b.size());
    }
};
struct FlatEntry {
    std::vector<float> logprobs;
    std::vector<int32_t> versions;
};
using FlatStore = std::map<std::vector<Token>, FlatEntry, SeqLess>;

size_t lcp(const std::vector<Token>& a, Span<Token> q) { return common_prefix(a.data(), a.size(), q.data(), q.size()); }

/// Baseline: LPM of the input among every stored full sequence, then store the request flat.
size_t flat_op(FlatStore& store, const traj::Request& r, std::vector<Token>& full) {
    size_t best = 0;
    auto it = store.lower_bound(r.input);
    if (it != store.end()) best = lcp(it->first, r.input);
    if (it != store.begin()) best = std::max(best, lcp(std::prev(it)->first, r.input));
    full.assign(r.input.begin(), r.input.end());
    full.insert(full.end(), r.output.begin(), r.output.end());
    FlatEntry e;
    e.logprobs.assign(r.input.size(), std::nanf(""));
    e.logprobs.insert(e.logprobs.end(), r.logprobs.begin(), r.logprobs.end());
    e.versions.assign(r.input.size(), -1);
    e.versions.insert(e.versions.end(), r.versions.begin(), r.versions.end());
    store.emplace(full, std::move(e));
    return best;
}

struct Data {
    Work w;
    size_t ops = 0;
    traj::TrajectoryManager tree;
    std::vector<int64_t> matched;  // tree LPM length per op (last run)
    std::vector<traj::NodeId> traj;
    bool map = true;
    double cpu_sec = 0;  // this thread's CPU time in run() (robust on a shared machine)
    int runs = 0;
};

double cpu_now() {
    timespec t{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

void setup(BenchState& s) {
    Data& d = s.emplace<Data>();
    const size_t L = std::max<size_t>(s.count, 32);  // tokens per request
    const long budget = s.args->opt_int("tokens", 8L << 20);
    const long ops_default = std::max<long>(64, budget / static_cast<long>(L));
    d.ops = static_cast<size_t>(s.args->opt_int("ops", ops_default));
    const size_t sessions = static_cast<size_t>(s.args->opt_int("sessions", 64));
    const long extend = s.args->opt_int("extend", 50);  // percent of ops that extend
    const int tool = static_cast<int>(s.args->opt_int("tool", 32));
    const int turn = static_cast<int>(s.args->opt_int("turn", 96));
    const long vocab = s.args->opt_int("vocab", 32000);
    d.map = s.args->opt_int("map", 1) != 0;
    if (d.ops < 1 || sessions < 1 || extend < 0 || extend > 100 || tool < 0 || turn < 1 || vocab < 4)
        throw ConfigError(
            "traj_bench: need ops >= 1, sessions >= 1, 0 <= extend <= 100, "
            "tool >= 0, turn >= 1, vocab >= 4");
    std::mt19937_64 rng(1234567u + static_cast<unsigned>(s.rank));
    auto fresh = [&](std::vector<Token>& v, size_t n) {
        for (size_t i = 0; i < n; ++i) v.push_back(static_cast<Token>(2 + rng() % static_cast<uint64_t>(vocab - 2)));
    };
    Work& w = d.w;
    const size_t cap = L + L / 4;  // extensions stop growing a session beyond this
    w.pool.reserve(d.ops * (cap + static_cast<size_t>(tool + turn)));
    size_t max_out = 0;
    for (size_t i = 0; i < d.ops; ++i) {
        const size_t at = w.pool.size();
        w.start.push_back(at);
        w.version.push_back(static_cast<int32_t>(i / 256));
        size_t n_in = 0, n_out = 0;
        if (i < sessions) {  // a new session: a prompt (after a shared BOS) and an answer
            n_in = L / 2;
            n_out = L - n_in;
            w.pool.push_back(1);
            fresh(w.pool, n_in - 1 + n_out);
        } else {
            const size_t j = rng() % i;
            const size_t len = static_cast<size_t>(w.n_in[j] + w.n_out[j]);
            const size_t base = w.start[j];
            const bool ext = static_cast<long>(rng() % 100) < extend && len + tool + turn <= cap;
            if (ext) {  // next turn: the whole earlier sequence, tool output, a model turn
                for (size_t k = 0; k < len; ++k) w.pool.push_back(w.pool[base + k]);
                fresh(w.pool, static_cast<size_t>(tool));
                n_in = len + static_cast<size_t>(tool);
                n_out = static_cast<size_t>(turn);
            } else {  // branch at a random point: a prefix as input, a new answer
                n_in = 1 + rng() % (len - 1);
                for (size_t k = 0; k < n_in; ++k) w.pool.push_back(w.pool[base + k]);
                n_out = std::max<size_t>(16, L > n_in ? L - n_in : 0);
            }
            fresh(w.pool, n_out);
        }
        w.n_in.push_back(static_cast<int32_t>(n_in));
        w.n_out.push_back(static_cast<int32_t>(n_out));
        max_out = std::max(max_out, n_out);
    }
    for (int32_t v = 0; v <= w.version.back(); ++v) w.ver_buf.emplace_back(max_out, v);
    for (size_t k = 0; k < max_out; ++k) w.lp_buf.push_back(-static_cast<float>(rng() % 4000) / 1000.f);
    d.matched.assign(d.ops, 0);
    d.traj.assign(d.ops, -1);
}

void run(BenchState& s) {
    Data& d = s.data<Data>();
    const double c0 = cpu_now();
    d.tree.clear();
    for (size_t i = 0; i < d.ops; ++i) {
        const traj::Request r = d.w.request(i);
        d.matched[i] = d.tree.longest_prefix_match(r.input).length;
        d.traj[i] = d.tree.insert(r).traj;
    }
    d.cpu_sec += cpu_now() - c0;
    ++d.runs;
}

int64_t check(BenchState& s) {
    Data& d = s.data<Data>();
    int64_t wrong = 0;
    traj::Trajectory t;
    for (size_t i = 0; i < d.ops; ++i) {
        d.tree.rebuild_into(d.traj[i], t);
        const traj::Request r = d.w.request(i);
        const size_t ni = r.input.size(), n = ni + r.output.size();
        bool ok = t.tokens.size() == n;
        for (size_t k = 0; ok && k < n; ++k)
            ok = t.tokens[k] == (k < ni ? r.input[k] : r.output[k - ni]) &&
                 (k < ni || (t.versions[k] == r.versions[k - ni] && t.loss_mask[k] == 1));
        wrong += ok ? 0 : 1;
    }
    if (d.map) {  // the baseline's LPM lengths (untimed here; timed in extras)
        FlatStore store;
        std::vector<Token> full;
        for (size_t i = 0; i < d.ops; ++i)
            wrong += static_cast<int64_t>(flat_op(store, d.w.request(i), full)) != d.matched[i];
    }
    return wrong;
}

void extras(BenchState& s, double sec) {
    Data& d = s.data<Data>();
    const traj::Stats st = d.tree.stats();
    double map_sec = NAN;
    if (d.map) {
        const int reps = std::max(1, std::min(s.args->iters, 3));
        std::vector<Token> full;
        double c0 = cpu_now();
        for (int rep = 0; rep < reps; ++rep) {
            FlatStore store;
            for (size_t i = 0; i < d.ops; ++i) flat_op(store, d.w.request(i), full);
        }
        map_sec = (cpu_now() - c0) / reps;
    }
    int64_t matched = 0, total = 0;
    for (size_t i = 0; i < d.ops; ++i) {
        matched += d.matched[i];
        total += d.w.n_in[i];
    }
    const double ops = static_cast<double>(d.ops), cpu = d.cpu_sec / d.runs;
    s.extra = {ops / sec,
               ops / cpu,
               ops / map_sec,
               map_sec / cpu,
               st.saved_vs_requests(),
               st.saved_vs_leaves(),
               total ? static_cast<double>(matched) / static_cast<double>(total) : 0.0,
               static_cast<double>(st.memory_bytes) / 1e6,
               ops};
}

void bw(const BenchState& s, double sec, double* algbw, double* busbw) {
    const Data& d = const_cast<BenchState&>(s).data<Data>();
    int64_t tokens = 0;
    for (size_t i = 0; i < d.ops; ++i) tokens += d.w.n_in[i] + d.w.n_out[i];
    *algbw = *busbw = sec > 0 ? 4.0 * static_cast<double>(tokens) / sec / 1e9 : 0;
}

BenchOp make_op() {
    BenchOp op;
    op.name = "traj";
    op.description = "trajectory manager: LPM + insert of one request (size = request tokens x 4 B)";
    op.type = "token";
    op.elem_size = 4;
    op.setup = setup;
    op.run = run;
    op.check = check;
    op.bw = bw;
    op.extra_columns = {"ops/s",      "ops/cpu_s",  "map/cpu_s", "tree/map", "saved",
                        "saved_leaf", "in_matched", "MB",        "ops"};
    op.extras = extras;
    op.op_options = {"-O ops=N        requests per timed iteration (default: tokens / request length, >= 64)",
                     "-O tokens=N     request tokens per iteration when ops is not given (default 8M)",
                     "-O sessions=N   first N requests start new sessions (default 64)",
                     "-O extend=P     percent of later requests that extend a session (default 50); the rest "
                     "branch from a random earlier request at a random point",
                     "-O tool=N -O turn=N  tool tokens and model tokens of an extension (default 32, 96)",
                     "-O vocab=N      token ids drawn from [2, N) (default 32000)",
                     "-O map=0        skip the std::map flat-store baseline"};
    return op;
}

}  // namespace

TAGFLOW_BENCH_MAIN(make_op)
