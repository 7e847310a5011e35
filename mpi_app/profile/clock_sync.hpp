// SPDX-License-Identifier: Apache-2.0
// clock_sync: how far each rank's wall clock is from the reference rank's (rank 0, whose clock
// defines the run's t0), measured over MPI by ping-pong, so that `tagflow trace` can put every
// rank's /timeline spans on one clock (/ranks clock_offset and clock_error).
//
// Method (Cristian's algorithm, best of several rounds): rank r sends a ping at its time t1, the
// reference answers with its own time tr, rank r receives the answer at t2. If the two legs took
// equally long, tr was read at r's time (t1 + t2) / 2, so offset = tr - (t1 + t2) / 2 (seconds
// *added* to r's clock to read the reference's); whatever the legs took, the true offset is within
// (t2 - t1) / 2 of it: that half round trip of the best round (the shortest) is the error bound.
// Rounds are run one rank at a time, so no answer waits behind another rank's.
//
// Two ways to run it: measure_clock_offsets, a collective, where every rank can stop for it (at
// start, and in sync mode at each checkpoint: SyncScheduler::remeasure_clocks); and ping_peer /
// answer_clock_pings, point to point, where the other ranks are busy with their own loops (the
// async coordinator at its checkpoints: the peer answers when its loop next looks, so only the
// first round waits and the best round is as good as the collective's).
//
// Test hook: TAGFLOW_TEST_CLOCK_SKEW_S="RANK:SECONDS[:RATE][,RANK:SECONDS[:RATE]...]" (for tests
// only) shifts unix_now() on the named ranks by that many seconds, as if their clocks were wrong,
// and with RATE makes the shift grow by RATE seconds per second from then on (a drifting clock);
// only init_test_clock_skew() reads it.
//
// Does not: set or slew any system clock, correct drift between two measurements, or write
// anything (train_command and the schedulers put the figures into /ranks).
#pragma once
#include <mpi.h>

#include <string>
#include <vector>

namespace tagflow::profile {

/// One rank's clock against the reference.
struct ClockOffset {
    double offset_s = 0;  // add to this rank's times to get the reference's
    double error_s = 0;   // |true offset - offset_s| <= error_s (half the best round trip)
};

/// One ping-pong round as the measuring rank saw it: its send and receive times and the
/// reference's time in the answer.
struct PingRound {
    double t_send = 0, t_ref = 0, t_recv = 0;
};

/// The estimate from the round with the shortest round trip (pure; no rounds: 0, +inf).
ClockOffset best_offset(const std::vector<PingRound>& rounds);

/// A test-only clock error: `seconds` now, growing by `rate` seconds per second.
struct TestSkew {
    double seconds = 0, rate = 0;
};

/// Parses the test-only skew spec ("1:0.25,0:-0.1:0.001") for `rank`: its skew, zero if not
/// named. Throws ConfigError naming TAGFLOW_TEST_CLOCK_SKEW_S on a malformed spec.
TestSkew parse_test_skew(const std::string& spec, int rank);

/// Reads TAGFLOW_TEST_CLOCK_SKEW_S (tests only) and applies this rank's skew to unix_now().
/// Call once, before the run's t0 is taken. Returns the skew applied (zero without the variable).
TestSkew init_test_clock_skew(int rank);

/// COLLECTIVE over `comm` (every rank calls it; it uses a duplicate of `comm`, so it cannot
/// match anyone else's messages): every rank's offset to rank `ref` of `comm`, index = rank,
/// the same vector on every rank. `rounds` ping-pongs per rank (at least 1). A rank that dies
/// meanwhile leaves the others blocked in MPI like any collective; the heartbeat watchdog
/// (health/heartbeat.hpp) ends such a job.
std::vector<ClockOffset> measure_clock_offsets(MPI_Comm comm, int ref, int rounds = 16);

/// Point to point: this rank pings rank `peer` of `comm` `rounds` times (at least 1) on `tag` and
/// returns the peer's offset to this rank's clock (add it to the peer's times to read this
/// rank's) from the round with the shortest trip. Blocks until the peer has answered every
/// round: the peer must call answer_clock_pings(comm, this rank, tag) once clock_ping_waiting
/// says a ping is there, and must not itself wait on this rank meanwhile. Use a communicator (or
/// tag) no other receive of either rank can match.
ClockOffset ping_peer(MPI_Comm comm, int peer, int tag, int rounds = 16);

/// True if rank `from` of `comm` has a ping waiting for this rank on `tag` (MPI_Iprobe).
bool clock_ping_waiting(MPI_Comm comm, int from, int tag);

/// Answers every round of the pings rank `from` sends (each says how many follow), each at once
/// with this rank's unix_now(). Returns after the last.
void answer_clock_pings(MPI_Comm comm, int from, int tag);

}  // namespace tagflow::profile
