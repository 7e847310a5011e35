// SPDX-License-Identifier: Apache-2.0
// bench_common: the benchmark harness (nccl-tests style). Owns the shared flags
// (-b/-e/-f/-n/-w/-c/-a/-J, plus -d dir and -O key=value for the op), the size sweep, timing
// (MPI_Wtime between barriers, per-rank times reduced with MAX by default), the #wrong check,
// the rank-0 table and the JSON file. A benchmark is a BenchOp filled in one small file that
// ends with TAGFLOW_BENCH_MAIN(make_op); see share/doc/bench.md. Does not measure anything itself.
#pragma once
#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace tagflow::bench {

/// Parsed command line; the same on every rank.
struct BenchArgs {
    size_t min_bytes = 8;                     // -b, --minbytes (K/M/G suffixes, powers of 1024)
    size_t max_bytes = 32u << 20;             // -e, --maxbytes
    double step_factor = 2;                   // -f, --stepfactor: next size = size * f
    int iters = 20;                           // -n, --iters: timed iterations per size
    int warmup = 5;                           // -w, --warmup_iters
    int check = 1;                            // -c, --check: 1 = run the #wrong check at every size
    int average = 3;                          // -a, --average: 0 rank 0, 1 avg, 2 min, 3 max over ranks
    std::string json;                         // -J, --output_file: JSON results (rank 0 writes)
    std::string dir = ".";                    // -d, --dir: where benchmarks put scratch files
    std::map<std::string, std::string> opts;  // -O key=value (repeatable): op options
    /// The op option `key`, or `def` when not given.
    std::string opt(const std::string& key, const std::string& def) const;
    long opt_int(const std::string& key, long def) const;
};

/// State of one size point, passed to every BenchOp callback.
struct BenchState {
    MPI_Comm comm = MPI_COMM_NULL;  // a dup of MPI_COMM_WORLD
    int rank = 0, nranks = 1;
    const BenchArgs* args = nullptr;
    size_t bytes = 0;           // total bytes of this size point (all ranks together)
    size_t count = 0;           // total elements (bytes / elem_size)
    std::vector<double> extra;  // values of BenchOp::extra_columns (rank 0's are reported)

    /// The op's own data for this size point (created by emplace() in setup).
    template <class T, class... A>
    T& emplace(A&&... a) {
        auto p = std::make_shared<T>(std::forward<A>(a)...);
        user_ = p;
        return *p;
    }
    template <class T>
    T& data() {
        return *static_cast<T*>(user_.get());
    }
    void clear() { user_.reset(); }

    /// This rank's [first, first + n) share of `total` items split as evenly as possible.
    std::pair<size_t, size_t> share(size_t total) const;
    /// COLLECTIVE: a scratch file's path, the same on every rank: -d DIR/STEM.PID.SUFFIX with rank
    /// 0's process id, so concurrent runs do not collide.
    std::string scratch_path(const std::string& stem, const std::string& suffix) const;

private:
    std::shared_ptr<void> user_;
};

/// One benchmark. Every callback is called on every rank (they may be collective).
struct BenchOp {
    const char* name = "";                         // "h5_write": ctest Bench.h5_write, binary h5_write_bench
    const char* description = "";                  // one line in the header
    const char* type = "int8";                     // the "type" column
    size_t elem_size = 1;                          // bytes per element: count = bytes / elem_size
    void (*setup)(BenchState&) = nullptr;          // once per size, untimed (allocate, open)
    void (*init)(BenchState&, int rep) = nullptr;  // fill deterministic data for repetition rep
    void (*run)(BenchState&) = nullptr;            // one timed iteration (required)
    int64_t (*check)(BenchState&) = nullptr;       // this rank's wrong elements after init+run
    void (*teardown)(BenchState&) = nullptr;       // once per size, untimed
    /// algbw/busbw in GB/s from the reduced time; default: bytes / sec, bus factor 1.
    void (*bw)(const BenchState&, double sec, double* algbw, double* busbw) = nullptr;
    /// Extra table/JSON columns (e.g. a baseline measured in the same run); extras() fills
    /// s.extra with one value per column after the timed loop, `sec` is the reduced time.
    std::vector<const char*> extra_columns;
    void (*extras)(BenchState&, double sec) = nullptr;
    std::vector<std::string> op_options;  // "-O key=value" lines for --help
};

/// Runs `op` over the size sweep: MPI init, flags, table, JSON. Returns 0, 1 (#wrong > 0)
/// or 2 (bad usage); any exception aborts every rank with MPI_Abort.
int bench_main(int argc, char** argv, const BenchOp& op);

/// "1.5" style parse of "64K", "1M", "2G" (powers of 1024); throws on garbage.
size_t parse_size(const std::string& s);

}  // namespace tagflow::bench

/// The whole main() of a benchmark: `BenchOp make_op();` then TAGFLOW_BENCH_MAIN(make_op).
#define TAGFLOW_BENCH_MAIN(make_op) \
    int main(int argc, char** argv) { return ::tagflow::bench::bench_main(argc, argv, make_op()); }
