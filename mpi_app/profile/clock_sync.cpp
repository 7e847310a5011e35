// SPDX-License-Identifier: Apache-2.0
// clock_sync: ping-pong clock offsets and the test-only skew (see clock_sync.hpp).
#include "profile/clock_sync.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>

#include "common/error.hpp"
#include "common/mpi_env.hpp"
#include "profile/timeline.hpp"

namespace tagflow::profile {

void set_clock_skew(double seconds, double rate);  // timeline.cpp

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

TestSkew parse_test_skew(const std::string& spec, int rank) {
    const std::string what = "TAGFLOW_TEST_CLOCK_SKEW_S='" + spec + "'";
    TestSkew mine;
    size_t pos = 0;
    auto number = [&](const std::string& v, double limit, const char* what_kind) {
        char* e = nullptr;
        const double x = std::strtod(v.c_str(), &e);
        if (v.empty() || *e || !std::isfinite(x) || std::fabs(x) > limit)
            throw ConfigError(what + ": '" + v + "' is not " + what_kind);
        return x;
    };
    while (pos <= spec.size()) {
        size_t end = spec.find(',', pos);
        if (end == std::string::npos) end = spec.size();
        const std::string item = spec.substr(pos, end - pos);
        const size_t colon = item.find(':');
        if (colon == std::string::npos || colon == 0 || colon + 1 == item.size())
            throw ConfigError(what + ": expected RANK:SECONDS[:RATE][,RANK:SECONDS[:RATE]...] (a test-only variable)");
        char* e = nullptr;
        errno = 0;
        const long r = std::strtol(item.c_str(), &e, 10);
        if (e != item.c_str() + colon || r < 0 || errno)
            throw ConfigError(what + ": '" + item.substr(0, colon) + "' is not a rank");
        const std::string rest = item.substr(colon + 1);
        const size_t colon2 = rest.find(':');
        TestSkew t;
        t.seconds = number(rest.substr(0, colon2), 1e6, "a number of seconds");
        if (colon2 != std::string::npos)
            t.rate = number(rest.substr(colon2 + 1), 0.1, "a drift rate (seconds per second, at most 0.1)");
        if (r == rank) mine = t;
        pos = end + 1;
    }
    return mine;
}

TestSkew init_test_clock_skew(int rank) {
    const char* spec = std::getenv("TAGFLOW_TEST_CLOCK_SKEW_S");
    const TestSkew s = spec && *spec ? parse_test_skew(spec, rank) : TestSkew{};
    set_clock_skew(s.seconds, s.rate);
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

ClockOffset ping_peer(MPI_Comm comm, int peer, int tag, int rounds) {
    rounds = std::max(rounds, 1);
    std::vector<PingRound> got(static_cast<size_t>(rounds));
    for (int k = 0; k < rounds; ++k) {
        PingRound& p = got[static_cast<size_t>(k)];
        const int32_t left = rounds - k;  // this one included: the peer stops answering after 1
        p.t_send = unix_now();
        TAGFLOW_MPI_CHECK(MPI_Send(&left, 1, MPI_INT32_T, peer, tag, comm));
        TAGFLOW_MPI_CHECK(MPI_Recv(&p.t_ref, 1, MPI_DOUBLE, peer, tag, comm, MPI_STATUS_IGNORE));
        p.t_recv = unix_now();
    }
    // best_offset: seconds added to this rank's clock to read the peer's; the peer's to read ours
    // is its negative, within the same bound.
    ClockOffset c = best_offset(got);
    c.offset_s = -c.offset_s;
    return c;
}

bool clock_ping_waiting(MPI_Comm comm, int from, int tag) {
    int flag = 0;
    TAGFLOW_MPI_CHECK(MPI_Iprobe(from, tag, comm, &flag, MPI_STATUS_IGNORE));
    return flag != 0;
}

void answer_clock_pings(MPI_Comm comm, int from, int tag) {
    for (;;) {
        int32_t left = 0;
        TAGFLOW_MPI_CHECK(MPI_Recv(&left, 1, MPI_INT32_T, from, tag, comm, MPI_STATUS_IGNORE));
        const double t = unix_now();
        TAGFLOW_MPI_CHECK(MPI_Send(&t, 1, MPI_DOUBLE, from, tag, comm));
        if (left <= 1) return;
    }
}

}  // namespace tagflow::profile
