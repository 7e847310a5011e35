// SPDX-License-Identifier: Apache-2.0
// signals: a sig_atomic_t flag written by the handler, nothing else (see signals.hpp).
#include "ckpt/signals.hpp"

#include <pthread.h>

#include <csignal>
#include <cstdio>
#include <cstring>

namespace tagflow::ckpt {
namespace {

volatile std::sig_atomic_t g_signal = 0;

// SIGTERM/SIGUSR1: what SLURM sends before a time limit or preemption. SIGINT/SIGHUP: a Ctrl-C or
// a closed terminal reaching a rank; they used to kill it outright, losing the steps since the
// last checkpoint, and now take the same path.
constexpr int kSignals[] = {SIGTERM, SIGUSR1, SIGINT, SIGHUP};

sigset_t requeue_set() {
    sigset_t set;
    sigemptyset(&set);
    for (int s : kSignals) sigaddset(&set, s);
    return set;
}

extern "C" void on_requeue_signal(int sig) { g_signal = sig; }

}  // namespace

void install_requeue_signals() {
    struct sigaction sa;
    std::memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_requeue_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    for (int s : kSignals) sigaction(s, &sa, nullptr);
    const sigset_t set = requeue_set();
    pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
}

void hold_requeue_signals() {
    const sigset_t set = requeue_set();
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

int requeue_signal() { return static_cast<int>(g_signal); }

void clear_requeue_signal() { g_signal = 0; }

const char* signal_name(int sig) {
    if (sig == SIGTERM) return "SIGTERM";
    if (sig == SIGUSR1) return "SIGUSR1";
    if (sig == SIGINT) return "SIGINT";
    if (sig == SIGHUP) return "SIGHUP";
    static thread_local char buf[32];
    std::snprintf(buf, sizeof buf, "signal %d", sig);
    return buf;
}

}  // namespace tagflow::ckpt
