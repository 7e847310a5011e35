// SPDX-License-Identifier: Apache-2.0
// h5_write_bench: collective append of a tokens-like int32 dataset (1-D, chunked, unlimited;
// every rank appends its share of `bytes` with one H5Dwrite, then H5Fflush(GLOBAL)), against a
// `dd conv=fdatasync` of the same bytes measured in the same run on rank 0. #wrong: the last
// append read back. Options: -O mode=coll|indep, -O flush=1|0, -O chunk=ELEMS, -O dd=1|0.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

#include "bench_common.hpp"
#include "common/error.hpp"
#include "io/h5_dataset.hpp"
#include "io/h5_file.hpp"

using namespace tagflow;
using namespace tagflow::bench;

namespace {

struct Data {
    std::string path, dd_path;
    io::File file;  // first: destroyed after the dataset
    io::Dataset ds;
    io::PropList dxpl;
    std::vector<int32_t> buf;  // this rank's share
    size_t first = 0;          // this rank's first element within one append
    hsize_t last_base = 0;     // extent before the latest append
    bool flush = true;
};

void setup(BenchState& s) {
    Data& d = s.emplace<Data>();
    d.path = s.scratch_path("h5_write_bench", "h5");
    d.dd_path = s.scratch_path("h5_write_bench", "dd");
    std::string mode = s.args->opt("mode", "coll");
    if (mode != "coll" && mode != "indep") throw ConfigError("-O mode=coll|indep");
    d.flush = s.args->opt_int("flush", 1) != 0;
    d.file = io::create_file(s.comm, d.path);
    d.ds = io::create_column(d.file.get(), "tokens", H5T_NATIVE_INT32,
                             static_cast<hsize_t>(s.args->opt_int("chunk", 65536)));
    d.dxpl = io::mpio_dxpl(mode == "coll");
    auto [first, n] = s.share(s.count);
    d.first = first;
    d.buf.resize(n);
}

int32_t value(int rep, size_t global_index) {
    return static_cast<int32_t>((static_cast<uint64_t>(rep) * 1000003u + global_index) & 0x7fffffff);
}

void init(BenchState& s, int rep) {
    Data& d = s.data<Data>();
    for (size_t i = 0; i < d.buf.size(); ++i) d.buf[i] = value(rep, d.first + i);
    // Self-test of the #wrong path: write one wrong value in the checked repetition.
    if (rep == 1 && s.rank == 0 && !d.buf.empty() && s.args->opt_int("corrupt", 0)) d.buf[0] ^= 1;
}

void run(BenchState& s) {
    Data& d = s.data<Data>();
    d.last_base = io::extent_of(d.ds.get());
    io::write_slab(d.ds.get(), d.dxpl.get(), H5T_NATIVE_INT32, d.last_base + s.count, d.last_base + d.first,
                   d.buf.size(), d.buf.data());
    if (d.flush) io::flush_file(d.file.get());
}

int64_t check(BenchState& s) {
    Data& d = s.data<Data>();
    std::vector<int32_t> got(d.buf.size(), -1);
    io::read_slab(d.ds.get(), d.dxpl.get(), H5T_NATIVE_INT32, d.last_base + d.first, got.size(), got.data());
    int64_t wrong = 0;
    for (size_t i = 0; i < got.size(); ++i) wrong += got[i] != value(1, d.first + i);
    return wrong;
}

// dd of the same bytes (fdatasync), on rank 0 while the others wait; seconds per run.
double dd_seconds(const std::string& path, size_t bytes, int reps) {
    double total = 0;
    for (int i = 0; i < reps; ++i) {
        std::string cmd = "LC_ALL=C dd if=/dev/zero of='" + path + "' bs=1M count=" + std::to_string(bytes) +
                          " iflag=count_bytes conv=fdatasync 2>&1";
        double t0 = MPI_Wtime();
        FILE* p = popen(cmd.c_str(), "r");
        if (!p) throw Error("popen(dd) failed");
        char line[512];
        double sec = -1;
        while (fgets(line, sizeof line, p)) {
            const char* c = strstr(line, "copied, ");
            if (c) sscanf(c + 8, "%lf", &sec);
        }
        int rc = pclose(p);
        if (rc != 0) throw Error("dd failed (exit " + std::to_string(rc) + "): " + cmd);
        total += sec > 0 ? sec : MPI_Wtime() - t0;  // dd's own timing excludes fork/exec
        unlink(path.c_str());
    }
    return total / reps;
}

void extras(BenchState& s, double sec) {
    Data& d = s.data<Data>();
    double dd = NAN;
    if (s.args->opt_int("dd", 1)) {
        if (s.rank == 0) dd = dd_seconds(d.dd_path, s.bytes, s.args->iters);
        MPI_Bcast(&dd, 1, MPI_DOUBLE, 0, s.comm);
    }
    double mb = static_cast<double>(s.bytes) / 1e6;
    s.extra = {mb / sec, mb / dd, dd / sec};  // h5 MB/s, dd MB/s, h5/dd (speed ratio)
}

void teardown(BenchState& s) {
    Data& d = s.data<Data>();
    d.ds.reset();
    d.dxpl.reset();
    d.file.close();  // collective; throws on failure
    if (s.rank == 0) unlink(d.path.c_str());
}

BenchOp make_op() {
    BenchOp op;
    op.name = "h5_write";
    op.description = "collective HDF5 append of int32 tokens + H5Fflush vs dd conv=fdatasync";
    op.type = "int32";
    op.elem_size = sizeof(int32_t);
    op.setup = setup;
    op.init = init;
    op.run = run;
    op.check = check;
    op.teardown = teardown;
    op.extra_columns = {"h5(MB/s)", "dd(MB/s)", "h5/dd"};
    op.extras = extras;
    op.op_options = {"-O mode=coll|indep   H5FD_MPIO transfer mode (default coll)",
                     "-O flush=1|0         H5Fflush(GLOBAL) after every append (default 1)",
                     "-O chunk=N           chunk size in elements (default 65536)",
                     "-O dd=1|0            measure the dd baseline (default 1)",
                     "-O corrupt=1         self-test: write one wrong value (exit code 1)"};
    return op;
}

}  // namespace

TAGFLOW_BENCH_MAIN(make_op)
