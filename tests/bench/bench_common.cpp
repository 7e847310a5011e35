// SPDX-License-Identifier: Apache-2.0
// bench_common: flags, size sweep, timing and reduction, rank-0 table, JSON, exit code.
#include "bench_common.hpp"

#include <getopt.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <stdexcept>

#include "common/error.hpp"
#include "common/log.hpp"
#include "common/malloc_tuning.hpp"
#include "common/mpi_env.hpp"

namespace tagflow::bench {

std::string BenchArgs::opt(const std::string& key, const std::string& def) const {
    auto it = opts.find(key);
    return it == opts.end() ? def : it->second;
}

long BenchArgs::opt_int(const std::string& key, long def) const {
    auto it = opts.find(key);
    return it == opts.end() ? def : static_cast<long>(parse_size(it->second));
}

std::pair<size_t, size_t> BenchState::share(size_t total) const {
    size_t r = static_cast<size_t>(rank), n = static_cast<size_t>(nranks);
    size_t base = total / n, rem = total % n;
    return {r * base + std::min(r, rem), base + (r < rem ? 1 : 0)};
}

std::string BenchState::scratch_path(const std::string& stem, const std::string& suffix) const {
    long pid = static_cast<long>(getpid());
    MPI_Bcast(&pid, 1, MPI_LONG, 0, comm);
    return args->dir + "/" + stem + "." + std::to_string(pid) + "." + suffix;
}

size_t parse_size(const std::string& s) {
    char* end = nullptr;
    double v = std::strtod(s.c_str(), &end);
    if (end == s.c_str() || v < 0) throw ConfigError("bad size '" + s + "'");
    double mult = 1;
    switch (*end) {
        case '\0': break;
        case 'k':
        case 'K':
            mult = 1024.0;
            ++end;
            break;
        case 'm':
        case 'M':
            mult = 1024.0 * 1024;
            ++end;
            break;
        case 'g':
        case 'G':
            mult = 1024.0 * 1024 * 1024;
            ++end;
            break;
        default: throw ConfigError("bad size '" + s + "'");
    }
    if (*end == 'B' || *end == 'b') ++end;
    if (*end != '\0') throw ConfigError("bad size '" + s + "'");
    return static_cast<size_t>(std::llround(v * mult));
}

namespace {

struct Row {
    size_t bytes, count;
    double time_us, algbw, busbw;
    int64_t wrong;
    std::vector<double> extra;
};

void usage(const char* prog, const BenchOp& op) {
    print0(
        "usage: %s [options]   (%s)\n"
        "  -b, --minbytes N       smallest total size (default 8; K/M/G suffixes)\n"
        "  -e, --maxbytes N       largest total size (default 32M)\n"
        "  -f, --stepfactor F     size multiplier between rows (default 2)\n"
        "  -n, --iters N          timed iterations per size (default 20)\n"
        "  -w, --warmup_iters N   untimed iterations first (default 5)\n"
        "  -c, --check 0|1        check results (#wrong) at every size (default 1)\n"
        "  -a, --average 0..3     time over ranks: 0 rank 0, 1 avg, 2 min, 3 max (default 3)\n"
        "  -J, --output_file F    also write the results as JSON to F\n"
        "  -d, --dir D            scratch directory for files (default .)\n"
        "  -O, --op KEY=VALUE     benchmark option (repeatable)\n",
        prog, op.description);
    for (const std::string& o : op.op_options) print0("      %s\n", o.c_str());
}

// Returns 0 to run, 1 for --help, 2 for bad usage (rank 0 printed why).
int parse(int argc, char** argv, const BenchOp& op, BenchArgs& a) {
    static const option longopts[] = {{"minbytes", required_argument, nullptr, 'b'},
                                      {"maxbytes", required_argument, nullptr, 'e'},
                                      {"stepfactor", required_argument, nullptr, 'f'},
                                      {"iters", required_argument, nullptr, 'n'},
                                      {"warmup_iters", required_argument, nullptr, 'w'},
                                      {"check", required_argument, nullptr, 'c'},
                                      {"average", required_argument, nullptr, 'a'},
                                      {"output_file", required_argument, nullptr, 'J'},
                                      {"dir", required_argument, nullptr, 'd'},
                                      {"op", required_argument, nullptr, 'O'},
                                      {"help", no_argument, nullptr, 'h'},
                                      {nullptr, 0, nullptr, 0}};
    opterr = 0;
    try {
        for (int c; (c = getopt_long(argc, argv, "b:e:f:n:w:c:a:J:d:O:h", longopts, nullptr)) != -1;) {
            std::string v = optarg ? optarg : "";
            switch (c) {
                case 'b': a.min_bytes = parse_size(v); break;
                case 'e': a.max_bytes = parse_size(v); break;
                case 'f': a.step_factor = std::stod(v); break;
                case 'n': a.iters = std::stoi(v); break;
                case 'w': a.warmup = std::stoi(v); break;
                case 'c': a.check = std::stoi(v); break;
                case 'a': a.average = std::stoi(v); break;
                case 'J': a.json = v; break;
                case 'd': a.dir = v; break;
                case 'O': {
                    size_t eq = v.find('=');
                    if (eq == std::string::npos || eq == 0) throw ConfigError("-O wants KEY=VALUE");
                    a.opts[v.substr(0, eq)] = v.substr(eq + 1);
                    break;
                }
                case 'h': usage(argv[0], op); return 1;
                default: throw ConfigError(std::string("unknown or incomplete option ") + argv[optind - 1]);
            }
        }
        if (optind < argc) throw ConfigError(std::string("unexpected argument ") + argv[optind]);
        if (a.min_bytes == 0 || a.max_bytes < a.min_bytes) throw ConfigError("need 0 < -b <= -e");
        if (a.step_factor <= 1.0) throw ConfigError("-f must be > 1");
        if (a.iters < 1 || a.warmup < 0) throw ConfigError("need -n >= 1 and -w >= 0");
        if (a.average < 0 || a.average > 3) throw ConfigError("-a must be 0..3");
    } catch (const std::exception& e) {  // std::stoi's invalid_argument too
        if (log_rank() == 0) log_error("%s: %s (try --help)", op.name, e.what());
        return 2;
    }
    return 0;
}

double reduce_time(double t, const BenchState& s) {
    double out = t;
    switch (s.args->average) {
        case 0: TAGFLOW_MPI_CHECK(MPI_Bcast(&out, 1, MPI_DOUBLE, 0, s.comm)); break;
        case 1:
            TAGFLOW_MPI_CHECK(MPI_Allreduce(&t, &out, 1, MPI_DOUBLE, MPI_SUM, s.comm));
            out /= s.nranks;
            break;
        case 2: TAGFLOW_MPI_CHECK(MPI_Allreduce(&t, &out, 1, MPI_DOUBLE, MPI_MIN, s.comm)); break;
        default: TAGFLOW_MPI_CHECK(MPI_Allreduce(&t, &out, 1, MPI_DOUBLE, MPI_MAX, s.comm)); break;
    }
    return out;
}

std::string json_escape(const std::string& s) {
    std::string o;
    for (char c : s) {
        if (c == '"' || c == '\\') o += '\\';
        if (static_cast<unsigned char>(c) < 0x20) continue;
        o += c;
    }
    return o;
}

void write_json(const BenchOp& op, const BenchArgs& a, int nranks, const std::vector<Row>& rows, int64_t wrong,
                double avg_busbw) {
    FILE* f = fopen(a.json.c_str(), "w");
    if (!f) throw Error("cannot write " + a.json);
    fprintf(f, "{\n  \"benchmark\": \"%s\",\n  \"nranks\": %d,\n", op.name, nranks);
    fprintf(f,
            "  \"args\": {\"minbytes\": %zu, \"maxbytes\": %zu, \"stepfactor\": %g, "
            "\"iters\": %d, \"warmup_iters\": %d, \"check\": %d, \"average\": %d",
            a.min_bytes, a.max_bytes, a.step_factor, a.iters, a.warmup, a.check, a.average);
    for (const auto& [k, v] : a.opts) fprintf(f, ", \"%s\": \"%s\"", json_escape(k).c_str(), json_escape(v).c_str());
    fprintf(f, "},\n  \"results\": [\n");
    for (size_t i = 0; i < rows.size(); ++i) {
        const Row& r = rows[i];
        fprintf(f,
                "    {\"size\": %zu, \"count\": %zu, \"type\": \"%s\", \"time_us\": %.3f, "
                "\"algbw\": %.6f, \"busbw\": %.6f, \"wrong\": %lld",
                r.bytes, r.count, op.type, r.time_us, r.algbw, r.busbw, static_cast<long long>(r.wrong));
        for (size_t k = 0; k < op.extra_columns.size() && k < r.extra.size(); ++k)
            if (std::isfinite(r.extra[k]))
                fprintf(f, ", \"%s\": %.6g", json_escape(op.extra_columns[k]).c_str(), r.extra[k]);
            else fprintf(f, ", \"%s\": null", json_escape(op.extra_columns[k]).c_str());
        fprintf(f, "}%s\n", i + 1 < rows.size() ? "," : "");
    }
    fprintf(f, "  ],\n  \"out_of_bounds\": %lld,\n  \"avg_busbw\": %.6f\n}\n", static_cast<long long>(wrong),
            avg_busbw);
    fclose(f);
}

int run_sweep(const BenchOp& op, const BenchArgs& a) {
    Comm comm = Comm::world().dup();
    BenchState s;
    s.comm = comm.get();
    s.rank = comm.rank();
    s.nranks = comm.size();
    s.args = &a;

    print0(
        "# tagflow bench: %s — %s\n# nranks %d  minbytes %zu  maxbytes %zu  step %gx  "
        "iters %d  warmup %d  check %d  average %s\n",
        op.name, op.description, s.nranks, a.min_bytes, a.max_bytes, a.step_factor, a.iters, a.warmup, a.check,
        a.average == 0   ? "rank0"
        : a.average == 1 ? "avg"
        : a.average == 2 ? "min"
                         : "max");
    for (const auto& [k, v] : a.opts) print0("# -O %s=%s\n", k.c_str(), v.c_str());
    std::string extra_hdr;
    for (const char* c : op.extra_columns) {
        char b[64];
        snprintf(b, sizeof b, " %11s", c);
        extra_hdr += b;
    }
    print0("#\n# %10s %12s %8s | %10s %11s %11s %7s |%s\n", "size(B)", "count", "type", "time(us)", "algbw(GB/s)",
           "busbw(GB/s)", "#wrong", extra_hdr.c_str());

    std::vector<Row> rows;
    int64_t wrong_total = 0;
    double bus_sum = 0;
    for (double next = static_cast<double>(a.min_bytes); next <= static_cast<double>(a.max_bytes) * 1.0000001;
         next = std::max(next * a.step_factor, next + 1)) {
        s.count = std::max<size_t>(1, static_cast<size_t>(next) / op.elem_size);
        s.bytes = s.count * op.elem_size;
        s.extra.assign(op.extra_columns.size(), NAN);
        if (op.setup) op.setup(s);
        if (op.init) op.init(s, 0);
        for (int i = 0; i < a.warmup; ++i) op.run(s);
        TAGFLOW_MPI_CHECK(MPI_Barrier(s.comm));
        double t0 = MPI_Wtime();
        for (int i = 0; i < a.iters; ++i) op.run(s);
        double local = (MPI_Wtime() - t0) / a.iters;
        TAGFLOW_MPI_CHECK(MPI_Barrier(s.comm));
        double sec = reduce_time(local, s);

        Row r{s.bytes, s.count, sec * 1e6, 0, 0, 0, {}};
        if (op.bw) op.bw(s, sec, &r.algbw, &r.busbw);
        else r.algbw = r.busbw = sec > 0 ? static_cast<double>(s.bytes) / sec / 1e9 : 0;
        if (a.check && op.check) {
            if (op.init) op.init(s, 1);
            op.run(s);
            int64_t mine = op.check(s);
            TAGFLOW_MPI_CHECK(MPI_Allreduce(&mine, &r.wrong, 1, MPI_INT64_T, MPI_SUM, s.comm));
        }
        if (op.extras) op.extras(s, sec);
        r.extra = s.extra;
        if (op.teardown) op.teardown(s);
        s.clear();

        std::string ex;
        for (double v : r.extra) {
            char b[32];
            snprintf(b, sizeof b, " %11.5g", v);
            ex += b;
        }
        print0("%12zu %12zu %8s | %10.1f %11.3f %11.3f %7lld |%s\n", r.bytes, r.count, op.type, r.time_us, r.algbw,
               r.busbw, static_cast<long long>(r.wrong), ex.c_str());
        wrong_total += r.wrong;
        bus_sum += r.busbw;
        rows.push_back(std::move(r));
    }
    double avg_bus = rows.empty() ? 0 : bus_sum / static_cast<double>(rows.size());
    print0("# Out of bounds values : %lld %s\n# Avg bus bandwidth    : %g\n#\n", static_cast<long long>(wrong_total),
           wrong_total ? "FAILED" : "OK", avg_bus);
    if (!a.json.empty() && s.rank == 0) write_json(op, a, s.nranks, rows, wrong_total, avg_bus);
    return wrong_total > 0 ? 1 : 0;
}

}  // namespace

int bench_main(int argc, char** argv, const BenchOp& op) {
    keep_freed_memory();  // as tagflow does: the simulator is calibrated from these benches
    MpiEnvironment env(argc, argv);
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    set_log_rank(rank, size);
    BenchArgs args;
    int rc = parse(argc, argv, op, args);  // identical on every rank: no collective needed
    if (rc == 1) return 0;
    if (rc == 2) return 2;
    try {
        if (!op.run) throw InternalError(std::string(op.name) + ": BenchOp::run is not set");
        return run_sweep(op, args);
    } catch (const std::exception& e) {
        log_error("%s: fatal on rank %d: %s", op.name, rank, e.what());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    return 1;
}

}  // namespace tagflow::bench
