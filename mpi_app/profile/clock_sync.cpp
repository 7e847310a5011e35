// SPDX-License-Identifier: Apache-2.0
// clock_sync: ping-pong clock offsets and the test-only skew (see clock_sync.hpp).
#include "profile/clock_sync.hpp"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "common/error.hpp"
#include "common/mpi_env.hpp"
#include "profile/timeline.hpp"

namespace tagflow::profile {

void set_clock_skew(double seconds);  // timeline.cpp

ClockOffset best_offset(const std::vector<PingRound>& rounds) {
    ClockOffset best;
    best.error_s = std::numeric_limits<double>::infinity();
    for (const PingRound& p : rounds) {
        const double half = 0.5 * (p.t_recv - p.t_send);
        if (!(half >= 0) || half >= best.error_s) continue;  // a clock step backwards: unusable
        best.error_s = half;
        best.offset_s = p.t_ref - 0.5 * (p.t_send + p.t_recv);
    }
    return best;
}

double parse_test_skew(const std::string& spec, int rank) {
    const std::string what = "TAGFLOW_TEST_CLOCK_SKEW_S='" + spec + "'";
    double mine = 0;
    size_t pos = 0;
    while (pos <= spec.size()) {
        size_t end = spec.find(',', pos);
        if (end == std::string::npos) end = spec.size();
        const std::string item = spec.substr(pos, end - pos);
        const size_t colon = item.find(':');
        if (colon == std::string::npos || colon == 0 || colon + 1 == item.size())
            throw ConfigError(what + ": expected RANK:SECONDS[,RANK:SECONDS...] (a test-only variable)");
        char* e = nullptr;
        errno = 0;
        const long r = std::strtol(item.c_str(), &e, 10);
        if (e != item.c_str() + colon || r < 0 || errno)
            throw ConfigError(what + ": '" + item.substr(0, colon) + "' is not a rank");
        const char* v = item.c_str() + colon + 1;
        const double s = std::strtod(v, &e);
        if (*e || !std::isfinite(s) || std::fabs(s) > 1e6)
            throw ConfigError(what + ": '" + std::string(v) + "' is not a number of seconds");
        if (r == rank) mine = s;
        pos = end + 1;
    }
    return mine;
}

double init_test_clock_skew(int rank) {
    const char* spec = std::getenv("TAGFLOW_TEST_CLOCK_SKEW_S");
    const double s = spec && *spec ? parse_test_skew(spec, rank) : 0.0;
    set_clock_skew(s);
    return s;
}

std::vector<ClockOffset> measure_clock_offsets(MPI_Comm comm, int ref, int rounds) {
    MPI_Comm c = MPI_COMM_NULL;
    TAGFLOW_MPI_CHECK(MPI_Comm_dup(comm, &c));
    Comm own = Comm::adopt(c);
    const int rank = own.rank(), size = own.size();
    rounds = std::max(rounds, 1);
    const int kTag = 1;
    ClockOffset mine;  // the reference's own: 0, 0
    if (rank == ref) {
        for (int r = 0; r < size; ++r) {
            if (r == ref) continue;
            for (int k = 0; k < rounds; ++k) {
                char ping = 0;
                TAGFLOW_MPI_CHECK(MPI_Recv(&ping, 1, MPI_CHAR, r, kTag, c, MPI_STATUS_IGNORE));
                const double t = unix_now();
                TAGFLOW_MPI_CHECK(MPI_Send(&t, 1, MPI_DOUBLE, r, kTag, c));
            }
        }
    } else {
        std::vector<PingRound> got(static_cast<size_t>(rounds));
        for (PingRound& p : got) {
            char ping = 0;
            p.t_send = unix_now();
            TAGFLOW_MPI_CHECK(MPI_Send(&ping, 1, MPI_CHAR, ref, kTag, c));
            TAGFLOW_MPI_CHECK(MPI_Recv(&p.t_ref, 1, MPI_DOUBLE, ref, kTag, c, MPI_STATUS_IGNORE));
            p.t_recv = unix_now();
        }
        mine = best_offset(got);
    }
    std::vector<double> flat(2 * static_cast<size_t>(size));
    double m[2] = {mine.offset_s, mine.error_s};
    TAGFLOW_MPI_CHECK(MPI_Allgather(m, 2, MPI_DOUBLE, flat.data(), 2, MPI_DOUBLE, c));
    std::vector<ClockOffset> all(static_cast<size_t>(size));
    for (size_t r = 0; r < all.size(); ++r) all[r] = {flat[2 * r], flat[2 * r + 1]};
    return all;
}

}  // namespace tagflow::profile
