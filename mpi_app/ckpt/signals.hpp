// SPDX-License-Identifier: Apache-2.0
// signals: the requeue signals of `tagflow train`. SIGTERM and SIGUSR1 (what SLURM sends before
// a time limit or preemption), SIGINT and SIGHUP (Ctrl-C, a closed terminal) only set a flag here
// (async-signal-safe); the schedulers read it
// at step boundaries, agree on it across ranks, write a checkpoint and exit with kExitRequeue.
// Does not talk to other ranks or write anything (the schedulers do).
#pragma once

namespace tagflow::ckpt {

/// Exit status after a checkpoint forced by a signal: EX_TEMPFAIL. Jobscripts requeue on it.
inline constexpr int kExitRequeue = 75;

/// Installs the handlers for SIGTERM, SIGUSR1, SIGINT and SIGHUP (SA_RESTART), then unblocks them. Idempotent.
void install_requeue_signals();
/// Blocks those four signals in this thread. The mask survives exec(), so one that arrives
/// before install_requeue_signals() (e.g. across main()'s OpenBLAS re-exec) stays pending and
/// is delivered to the handler then, instead of killing the process.
void hold_requeue_signals();
/// The last requeue signal received (one of the four), 0 if none.
int requeue_signal();
/// Forgets a received signal (tests).
void clear_requeue_signal();
/// "SIGTERM", "SIGUSR1", "SIGINT", "SIGHUP", or "signal N".
const char* signal_name(int sig);

}  // namespace tagflow::ckpt
