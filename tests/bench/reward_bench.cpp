// SPDX-License-Identifier: Apache-2.0
// reward_bench: reward throughput of the --reward-fn worker pool (mpi_app/reward) against the
// baseline of calling the same Python function in one process over the same samples, measured
// in the same run; prints both and the ratio (issue 18's goal: >= 1.5x with 2 workers on a
// function costing ~1 ms). The function is tests/reward/slow_reward.py (a gsm8k-style check plus
// ~1 ms of CPU). Both sides time only the scoring: the baseline after its import and JSON
// parsing, the pool after its workers are up (JSON framing and pipes are counted against it).
// Both sides' scores must agree (#wrong). Not an MPI program, not a timed test: ctest runs it
// once with few samples (Bench.reward) as a smoke test.
//
//   reward_bench [-n samples] [-w workers] [-b batch] [-r repeats] [-f FILE.py[:NAME]]
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "reward/scorer.hpp"

using namespace tagflow::reward;

namespace {

const char* kBaseline = R"PY(
import importlib.util, json, os, sys, time
path, name, data = sys.argv[1], sys.argv[2], sys.argv[3]
sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
spec = importlib.util.spec_from_file_location("custom_module", path)
mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
fn = getattr(mod, name)
rows = [json.loads(l) for l in open(data)]
t0 = time.perf_counter()
scores = [fn(data_source=r["data_source"], solution_str=r["solution_str"], ground_truth=r["ground_truth"],
             extra_info=r["extra_info"]) for r in rows]
t = time.perf_counter() - t0
print(json.dumps({"seconds": t, "sum": sum(float(s) for s in scores), "python": sys.version.split()[0]}))
)PY";

std::string run_baseline(const std::string& path, const std::string& name, const std::string& data) {
    int fds[2];
    if (pipe(fds) != 0) return "";
    const pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 1);
        close(fds[0]);
        execl("/usr/bin/python3", "python3", "-c", kBaseline, path.c_str(), name.c_str(), data.c_str(),
              static_cast<char*>(nullptr));
        _exit(127);
    }
    close(fds[1]);
    std::string out;
    char buf[4096];
    ssize_t n;
    while ((n = read(fds[0], buf, sizeof buf)) > 0) out.append(buf, static_cast<std::size_t>(n));
    close(fds[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    return out;
}

double json_number(const std::string& s, const std::string& key) {
    const auto at = s.find("\"" + key + "\": ");
    return at == std::string::npos ? NAN : std::strtod(s.c_str() + at + key.size() + 4, nullptr);
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
    int n = 2000, workers = 2, batch = 16, repeats = 3;
    std::string fn = std::string(TAGFLOW_SOURCE_DIR) + "/tests/reward/slow_reward.py";
    int c;
    while ((c = getopt(argc, argv, "n:w:b:r:f:")) != -1) {
        switch (c) {
            case 'n': n = std::atoi(optarg); break;
            case 'w': workers = std::atoi(optarg); break;
            case 'b': batch = std::atoi(optarg); break;
            case 'r': repeats = std::atoi(optarg); break;
            case 'f': fn = optarg; break;
            default:
                std::fprintf(stderr,
                             "usage: reward_bench [-n samples] [-w workers] [-b batch] [-r repeats] "
                             "[-f FILE.py[:NAME]]\n");
                return 2;
        }
    }
    if (n < 1 || workers < 1 || batch < 1 || repeats < 1) {
        std::fprintf(stderr, "reward_bench: -n, -w, -b and -r must be positive\n");
        return 2;
    }
    std::string path = fn, name = "compute_score";
    if (const auto colon = fn.rfind(':'); colon != std::string::npos && fn.find('/', colon) == std::string::npos) {
        path = fn.substr(0, colon);
        name = fn.substr(colon + 1);
    }

    // The same samples for both sides: gsm8k-style answers, right, wrong and missing.
    std::vector<Request> reqs;
    const std::string data = "/tmp/reward_bench_" + std::to_string(getpid()) + ".jsonl";
    {
        std::ofstream f(data);
        unsigned x = 12345;
        for (int i = 0; i < n; ++i) {
            x = x * 1103515245u + 12345u;
            const int a = static_cast<int>((x >> 8) % 1000), b = static_cast<int>((x >> 18) % 1000);
            Request r;
            r.id = static_cast<std::uint64_t>(i);
            r.row = i;
            r.data_source = "openai/gsm8k";
            r.solution_str = std::to_string(a) + " + " + std::to_string(b) + " makes\n#### " +
                             std::to_string(i % 3 == 0 ? a + b + 1 : a + b);
            r.ground_truth = "\"" + std::to_string(a + b) + "\"";
            r.extra_info = "{\"index\": " + std::to_string(i) + "}";
            f << "{\"data_source\": \"openai/gsm8k\", \"solution_str\": \"" << std::to_string(a) << " + "
              << std::to_string(b) << " makes\\n#### " << (i % 3 == 0 ? a + b + 1 : a + b)
              << "\", \"ground_truth\": " << r.ground_truth << ", \"extra_info\": " << r.extra_info << "}\n";
            reqs.push_back(std::move(r));
        }
    }

    Options o;
    o.fn = fn;
    o.workers = workers;
    o.batch = batch;
    o.timeout_s = 60;
    std::vector<double> base_s, pool_s;
    double base_sum = NAN, pool_sum = 0;
    std::string python = "?";
    int wrong = 0;
    std::unique_ptr<Scorer> s;
    try {
        s = make_scorer(o);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "reward_bench: %s\n", e.what());
        std::remove(data.c_str());
        return 2;
    }
    for (int rep = 0; rep < repeats; ++rep) {
        // Baseline and pool alternate, so a change of machine load hits both.
        const std::string out = run_baseline(path, name, data);
        base_s.push_back(json_number(out, "seconds"));
        base_sum = json_number(out, "sum");
        if (const auto at = out.find("\"python\": \""); at != std::string::npos)
            python = out.substr(at + 11, out.find('"', at + 11) - at - 11);
        const auto t0 = std::chrono::steady_clock::now();
        s->submit(reqs);
        std::vector<Result> res;
        s->drain(res);
        pool_s.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        pool_sum = 0;
        for (const Result& r : res) {
            if (!r.ok) ++wrong;
            pool_sum += r.score;
        }
    }
    std::remove(data.c_str());
    if (!(std::fabs(pool_sum - base_sum) < 1e-3)) ++wrong;

    const double b = median(base_s), p = median(pool_s);
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    std::printf("# reward_bench: %d samples of %s:%s, python %s, %ld cores, median of %d runs\n", n, path.c_str(),
                name.c_str(), python.c_str(), cores, repeats);
    std::printf("#  %-22s %8s %6s %10s %12s %10s\n", "path", "workers", "batch", "seconds", "samples/s", "ms/sample");
    std::printf("   %-22s %8s %6s %10.3f %12.1f %10.3f\n", "direct (one process)", "-", "-", b, n / b, 1e3 * b / n);
    std::printf("   %-22s %8d %6d %10.3f %12.1f %10.3f\n", "pool", workers, batch, p, n / p, 1e3 * p / n);
    std::printf("# ratio pool/direct: %.2fx (goal >= 1.5x with 2 workers)\n", b / p);
    std::printf("# #wrong: %d%s\n", wrong, wrong ? " FAILED" : "");
    return wrong ? 1 : 0;
}
