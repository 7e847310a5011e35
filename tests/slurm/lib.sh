# SPDX-License-Identifier: Apache-2.0
# lib.sh: helpers for the loopback-cluster tests (sourced, not run): find the
# cluster started by cluster.sh, submit, poll `scontrol show job -o` every
# 0.1 s (sbatch --wait polls far more slowly), and assert.
# shellcheck shell=bash

# tf_cluster STATEFILE: source the cluster's env.sh (SLURM_CONF, TFTEST_SLURM_DIR, OMPI_*)
tf_cluster() {
    local state=$1
    [[ -f $state ]] || tf_fail "no test cluster: $state missing (the Slurm.cluster_start fixture did not run?)"
    # shellcheck disable=SC1091
    source "$(cat "$state")/env.sh"
    [[ -d $TFTEST_SLURM_DIR ]] || tf_fail "cluster directory $TFTEST_SLURM_DIR vanished"
}

tf_fail() {
    echo "FAIL: $*" >&2
    exit 1
}

tf_ok() { echo "ok: $*"; }

# tf_wait JOBID [TIMEOUT_S]: wait until every component of the job is finished;
# prints "STATE EXITCODE" of the first component (hetjobs: all must agree on done).
tf_wait() {
    local id=$1 timeout=${2:-60} t line states finished st
    for ((t = 0; t < timeout * 10; t++)); do
        line=$(scontrol show job -o "$id" 2> /dev/null || true)
        states=$(grep -o 'JobState=[A-Z_]*' <<< "$line" | cut -d= -f2)
        finished=1
        [[ -n $states ]] || finished=0
        for st in $states; do
            case $st in
                COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | BOOT_FAIL | DEADLINE | PREEMPTED) ;;
                *) finished=0 ;;
            esac
        done
        if ((finished)); then
            echo "$(head -n1 <<< "$states") $(grep -o 'ExitCode=[0-9:]*' <<< "$line" | head -n1 | cut -d= -f2)"
            return 0
        fi
        sleep 0.1
    done
    scontrol show job "$id" >&2 || true
    squeue -s -j "$id" >&2 || true
    if [[ -n ${T_OUT:-} && -r $T_OUT/$id.out ]]; then
        echo "--- $T_OUT/$id.out:" >&2
        cat "$T_OUT/$id.out" >&2
    fi
    # what the daemons said about this job (hetjob components have the next ids)
    local log
    for log in "$TFTEST_SLURM_DIR"/log/slurm*.log; do
        [[ -r $log ]] || continue
        echo "--- $log (job $id):" >&2
        grep -E "(\[|=|\(| )($id|$((id + 1)))([].+)]| |$)" "$log" | tail -n 25 >&2 || true
    done
    tf_fail "job $id not finished after ${timeout}s"
}

# tf_expect_state JOBID "COMPLETED 0:0"
tf_expect_state() {
    local got
    got=$(tf_wait "$1" "${3:-60}")
    [[ $got == "$2" ]] || { cat "${T_OUT:-/dev/null}"/*"$1"* >&2 2> /dev/null || true; tf_fail "job $1: expected '$2', got '$got'"; }
}

tf_expect_has() { # FILE TEXT
    grep -qF -- "$2" "$1" || { echo "--- $1:" >&2; cat "$1" >&2; tf_fail "expected '$2' in $1"; }
}

tf_expect_not() { # FILE TEXT
    if grep -qF -- "$2" "$1"; then
        echo "--- $1:" >&2
        cat "$1" >&2
        tf_fail "did not expect '$2' in $1"
    fi
}

# No node of the cluster is drained or down (the plugin must never drain one).
tf_nodes_healthy() {
    local bad
    bad=$(sinfo -h -N -o '%N %t' | grep -E 'drain|drng|down|fail|inval' || true)
    [[ -z $bad ]] || tf_fail "nodes not healthy: $bad"
}

tf_node_idle() { # NODE: waits up to 10 s for IDLE, fails on DRAIN
    local node=$1 t st
    for ((t = 0; t < 100; t++)); do
        st=$(scontrol show node -o "$node" | grep -o 'State=[A-Z_+]*' | cut -d= -f2)
        [[ $st == *DRAIN* ]] && tf_fail "node $node drained: $(scontrol show node -o "$node")"
        [[ $st == IDLE ]] && return 0
        sleep 0.1
    done
    tf_fail "node $node not idle: $st"
}

tf_job_count() { scontrol -o show jobs 2> /dev/null | grep -c '^JobId=' || true; }

# tf_outdir NAME: a fresh directory for one test's outputs, writable by nobody
tf_outdir() {
    T_OUT=$TFTEST_SLURM_DIR/out/$1
    rm -rf -- "$T_OUT"
    mkdir -p "$T_OUT"
    chmod 1777 "$T_OUT"
    cd "$T_OUT" || tf_fail "cd $T_OUT"
}
