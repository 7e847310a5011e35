#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# e2e.sh STATEFILE CASE: one end-to-end test of spank_tagflow.so on the
# loopback cluster started by cluster.sh (ctest fixture Slurm.cluster_start).
# Nodes: node1 h100x2 (features h100,nvlink), node2 a100x2, node3 t4x1,
# node4 cpu_only; map: share/tagflow.map (root-only copy in the cluster dir).
# Env: TFTEST_MPI_TAGS (tests/slurm/mpi_tags) for the MPI cases.
# Does not start or stop daemons.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/slurm/lib.sh
source "$HERE/lib.sh"

[[ $# -eq 2 ]] || tf_fail "usage: e2e.sh STATEFILE CASE"
tf_cluster "$1"
CASE=$2
tf_outdir "$CASE"
unset TAGFLOW_TAGS TAGFLOW_TAG_SOURCE

sb() { sbatch --parsable -t 2 -o "$T_OUT/%j.out" "$@"; }

case_help() {
    local tool
    for tool in sbatch srun salloc; do
        "$tool" --help > "$T_OUT/$tool.help" 2>&1 || true
        tf_expect_has "$T_OUT/$tool.help" "--rl-tags=LIST"
        tf_expect_has "$T_OUT/$tool.help" "rollout,train,critic"
    done
    tf_ok "--rl-tags in sbatch/srun/salloc --help"
}

# --constraint=h100 via #SBATCH lines; stale values in the submit environment are overwritten
case_constraint_h100() {
    cat > job.sh <<'EOF'
#!/bin/bash
#SBATCH --constraint=h100
#SBATCH --rl-tags=auto
echo "TAGS=$TAGFLOW_TAGS SRC=$TAGFLOW_TAG_SOURCE NODE=$SLURMD_NODENAME"
EOF
    local j
    j=$(TAGFLOW_TAGS=stale TAGFLOW_TAG_SOURCE=stale sb job.sh)
    tf_expect_state "$j" "COMPLETED 0:0"
    tf_expect_has "$j.out" "TAGS=rollout,train,critic SRC=map NODE=node1"
    tf_ok "-C h100 gets rollout,train,critic (source map)"
}

case_constraint_t4() {
    local j
    j=$(sb -C t4 --gres=gpu:t4:1 --rl-tags=auto --wrap 'echo "TAGS=$TAGFLOW_TAGS SRC=$TAGFLOW_TAG_SOURCE CVD=$CUDA_VISIBLE_DEVICES"')
    tf_expect_state "$j" "COMPLETED 0:0"
    tf_expect_has "$j.out" "TAGS=rollout SRC=map CVD=0"
    tf_ok "-C t4 gets rollout"
}

# GRES type and count: gres=gpu:a100:2 needs both A100s of node2
case_gres_count() {
    local j1 j2
    j1=$(sb -C a100 --gres=gpu:a100:2 --rl-tags=auto --wrap 'echo "TAGS=$TAGFLOW_TAGS SRC=$TAGFLOW_TAG_SOURCE"')
    j2=$(sb -C a100 --gres=gpu:a100:1 --rl-tags=auto --wrap 'echo "TAGS=$TAGFLOW_TAGS SRC=$TAGFLOW_TAG_SOURCE"')
    tf_expect_state "$j1" "COMPLETED 0:0"
    tf_expect_state "$j2" "COMPLETED 0:0"
    tf_expect_has "$j1.out" "TAGS=rollout,train SRC=map"
    tf_expect_has "$j2.out" "TAGS=rollout,critic SRC=map"
    tf_ok "gpu:a100:2 -> rollout,train; gpu:a100:1 -> rollout,critic"
}

# srun inside a 4-node batch job: each node its own tags (not the batch node's)
case_multinode() {
    cat > job.sh <<'EOF'
#!/bin/bash
#SBATCH -N4
#SBATCH --rl-tags=auto
echo "batch $SLURMD_NODENAME $TAGFLOW_TAGS $TAGFLOW_TAG_SOURCE"
srun -l bash -c 'echo "step $SLURMD_NODENAME $TAGFLOW_TAGS $TAGFLOW_TAG_SOURCE"' | sort
srun --rl-tags=rollout,train -l bash -c 'echo "narrow $SLURMD_NODENAME $TAGFLOW_TAGS $TAGFLOW_TAG_SOURCE"' | sort
EOF
    local j
    j=$(sb job.sh)
    tf_expect_state "$j" "COMPLETED 0:0"
    tf_expect_has "$j.out" "batch node1 rollout,train,critic map"
    tf_expect_has "$j.out" "0: step node1 rollout,train,critic map"
    tf_expect_has "$j.out" "1: step node2 rollout,critic map"
    tf_expect_has "$j.out" "2: step node3 rollout map"
    tf_expect_has "$j.out" "3: step node4 rollout default"
    tf_expect_has "$j.out" "0: narrow node1 rollout,train option"
    tf_expect_has "$j.out" "1: narrow node2 rollout option"
    tf_expect_has "$j.out" "2: narrow node3 rollout map"
    tf_expect_has "$j.out" "3: narrow node4 rollout default"
    tf_ok "per-node tags for srun in a 4-node batch job; sources map/option/default"
}

# --rl-tags=train on a T4: the task fails with a message, the node stays in service
case_mismatch() {
    local j rc=0
    j=$(sb -C t4 --rl-tags=train --wrap 'echo SHOULD-NOT-RUN')
    tf_expect_state "$j" "FAILED 1:0"
    tf_expect_has "$j.out" "tagflow: node node3"
    tf_expect_has "$j.out" "the tag map gives tags 'rollout' but --rl-tags=train allows only 'train': no tag in common"
    tf_expect_not "$j.out" "SHOULD-NOT-RUN"
    tf_node_idle node3
    srun -t 2 -C t4 --rl-tags=train true > srun.err 2>&1 || rc=$?
    [[ $rc -eq 1 ]] || { cat srun.err >&2; tf_fail "srun exit code $rc, expected 1"; }
    tf_expect_has srun.err "no tag in common"
    tf_node_idle node3
    tf_nodes_healthy
    tf_ok "empty intersection fails the task (exit 1), node3 idle, not drained"
}

# Bad values are refused by the client; nothing is submitted
case_bogus() {
    local before after rc
    before=$(tf_job_count)
    printf '#!/bin/bash\n#SBATCH --rl-tags=bogus\ntrue\n' > bogus.sh
    local -a cmds=(
        "sbatch --rl-tags=bogus --wrap true"
        "sbatch --rl-tags= --wrap true"
        "sbatch --rl-tags=rollout,,train --wrap true"
        "sbatch bogus.sh"
        "srun --rl-tags=rollout,bogus true"
        "salloc --rl-tags=bogus true"
    )
    local c
    for c in "${cmds[@]}"; do
        rc=0
        $c > out.txt 2>&1 || rc=$?
        [[ $rc -ne 0 ]] || { cat out.txt >&2; tf_fail "'$c' exited 0"; }
        tf_expect_has out.txt "tagflow: invalid --rl-tags value"
    done
    after=$(tf_job_count)
    [[ $before -eq $after ]] || tf_fail "jobs were submitted: $before -> $after"
    tf_ok "bogus/empty --rl-tags refused by sbatch, srun and salloc; nothing submitted"
}

# A job by a non-root user; the map is root-only (read by slurmstepd as root)
case_nonroot() {
    local j
    j=$(runuser -u nobody -- sbatch --parsable -t 2 -o "$T_OUT/%j.out" --chdir="$T_OUT" -C t4 \
        --gres=gpu:1 --rl-tags=auto --wrap 'echo "USER=$(id -un) TAGS=$TAGFLOW_TAGS SRC=$TAGFLOW_TAG_SOURCE"')
    tf_expect_state "$j" "COMPLETED 0:0"
    tf_expect_has "$j.out" "USER=nobody TAGS=rollout SRC=map"
    tf_ok "job of user nobody gets its tags"
}

# Jobs without --rl-tags: nothing set, inherited values untouched
case_opt_out() {
    local j1 j2
    j1=$(sb -N2 --wrap 'echo "A=${TAGFLOW_TAGS-unset} B=${TAGFLOW_TAG_SOURCE-unset}"; srun -l bash -c '\''echo "S=${TAGFLOW_TAGS-unset}"'\''')
    j2=$(TAGFLOW_TAGS=mine sb -C h100 --wrap 'echo "A=${TAGFLOW_TAGS-unset} B=${TAGFLOW_TAG_SOURCE-unset}"')
    tf_expect_state "$j1" "COMPLETED 0:0"
    tf_expect_state "$j2" "COMPLETED 0:0"
    tf_expect_has "$j1.out" "A=unset B=unset"
    tf_expect_has "$j1.out" "0: S=unset"
    tf_expect_has "$j1.out" "1: S=unset"
    tf_expect_has "$j2.out" "A=mine B=unset"
    tf_ok "jobs without --rl-tags get no TAGFLOW_* and keep inherited values"
}

restore_conf() {
    cp "$TFTEST_SLURM_DIR/etc/tagflow.map.good" "$TFTEST_SLURM_DIR/etc/tagflow.map"
    cp "$TFTEST_SLURM_DIR/etc/plugstack.conf.good" "$TFTEST_SLURM_DIR/etc/plugstack.conf"
}

# A broken map: tagflow jobs fail at submission (file:line) or at start; others run
case_broken_map() {
    local map=$TFTEST_SLURM_DIR/etc/tagflow.map j rc=0 held
    trap restore_conf EXIT
    printf 'hardware h100 compute=989 membw=3.35\n\nrule gres=gpu:h100:0 -> train\n' > "$map"
    sbatch --rl-tags=auto --wrap true > out.txt 2>&1 || rc=$?
    [[ $rc -ne 0 ]] || tf_fail "sbatch with a broken map exited 0"
    tf_expect_has out.txt "$map:3: bad GRES count in 'gres=gpu:h100:0'"
    j=$(sb -C h100 --wrap 'echo plain-ok')
    tf_expect_state "$j" "COMPLETED 0:0"
    tf_expect_has "$j.out" "plain-ok"
    # broken after submission: the job fails at start, on the node, naming file and line
    restore_conf
    held=$(sb -H -C h100 --rl-tags=auto --wrap 'echo SHOULD-NOT-RUN')
    printf '# broken\nrule colour=red -> train\n' > "$map"
    scontrol release "$held"
    tf_expect_state "$held" "FAILED 1:0"
    tf_expect_has "$held.out" "$map:2: unknown condition 'colour=red'"
    tf_expect_not "$held.out" "SHOULD-NOT-RUN"
    # unreadable map on the node (missing file)
    restore_conf
    held=$(sb -H -C t4 --rl-tags=auto --wrap 'echo SHOULD-NOT-RUN')
    rm -f "$map"
    scontrol release "$held"
    tf_expect_state "$held" "FAILED 1:0"
    tf_expect_has "$held.out" "$map: cannot open tag map: No such file or directory"
    j=$(sb -C t4 --wrap 'echo plain-ok')
    tf_expect_state "$j" "COMPLETED 0:0"
    tf_node_idle node1
    tf_node_idle node3
    tf_nodes_healthy
    tf_ok "broken/missing map: tagflow jobs refused or failed with file:line, plain jobs run"
}

# A bad plugstack argument: same contract
case_bad_plugstack() {
    local conf=$TFTEST_SLURM_DIR/etc/plugstack.conf j rc=0 held
    trap restore_conf EXIT
    sed -i 's/$/ mode=union/' "$conf"
    sbatch --rl-tags=auto --wrap true > out.txt 2>&1 || rc=$?
    [[ $rc -ne 0 ]] || tf_fail "sbatch with a bad plugstack argument exited 0"
    tf_expect_has out.txt "unknown plugstack argument 'mode=union'"
    j=$(sb --wrap 'echo plain-ok')
    tf_expect_state "$j" "COMPLETED 0:0"
    tf_expect_has "$j.out" "plain-ok"
    restore_conf
    held=$(sb -H --rl-tags=auto --wrap 'echo SHOULD-NOT-RUN')
    sed -i 's/$/ mode=union/' "$conf"
    scontrol release "$held"
    tf_expect_state "$held" "FAILED 1:0"
    tf_expect_has "$held.out" "unknown plugstack argument 'mode=union'"
    tf_nodes_healthy
    tf_ok "bad plugstack argument: tagflow jobs refused/failed, plain jobs run"
}

# MPI under srun --mpi=pmix across three virtual nodes: every rank sees its node's tags
# pmix_job [#SBATCH-LINES [SRUN-ARGS...]]: a batch script running mpi_tags in one
# `srun --mpi=pmix` step, its lines sorted. Slurm's PMIx plugin sporadically fails to wire
# up the stepds of a multi-node step (notably a heterogeneous one) and then hangs until
# PMIxTimeout (upstream: openpmix/openpmix#3098; seen twice in ~100 runs here, under load).
# That is not what these tests check: a step gets 1 minute and one retry, every failed
# attempt is reported in the job output, and a second failure fails the test.
pmix_job() {
    local header=${1:-}
    shift || true
    printf '#!/bin/bash\n%s\n' "$header"
    cat <<EOS
for attempt in 1 2; do
    srun --mpi=pmix -K1 -t 1 $* $TFTEST_MPI_TAGS > ranks.\$attempt && { sort ranks.\$attempt; exit 0; }
    echo "pmix step attempt \$attempt failed (exit \$?)" >&2
done
exit 1
EOS
}

case_mpi_pmix() {
    [[ -x ${TFTEST_MPI_TAGS:-} ]] || tf_fail "TFTEST_MPI_TAGS not set to the mpi_tags binary"
    local j
    pmix_job > job.sh
    j=$(sb -t 5 -N3 -w 'node[1-3]' --ntasks-per-node=1 --rl-tags=auto job.sh)
    tf_expect_state "$j" "COMPLETED 0:0" 240
    tf_expect_has "$j.out" "rank 0/3 node node1 tags rollout,train,critic source map allreduce ok"
    tf_expect_has "$j.out" "rank 1/3 node node2 tags rollout,critic source map allreduce ok"
    tf_expect_has "$j.out" "rank 2/3 node node3 tags rollout source map allreduce ok"
    tf_ok "srun --mpi=pmix: ranks on node1..3 see their own tags"
}

# Heterogeneous job (rollout pool on T4 + train pool on H100) with one PMIx MPI_COMM_WORLD
case_hetjob_pmix() {
    [[ -x ${TFTEST_MPI_TAGS:-} ]] || tf_fail "TFTEST_MPI_TAGS not set to the mpi_tags binary"
    pmix_job '#SBATCH --rl-tags=auto
#SBATCH --constraint=t4 --gres=gpu:t4:1 --ntasks=1
#SBATCH hetjob
#SBATCH --constraint=h100 --gres=gpu:h100:2 --ntasks=2' --het-group=0,1 > job.sh
    local j
    j=$(sb -t 5 job.sh)
    tf_expect_state "$j" "COMPLETED 0:0" 240
    tf_expect_has "$j.out" "rank 0/3 node node3 tags rollout source map allreduce ok"
    tf_expect_has "$j.out" "rank 1/3 node node1 tags rollout,train,critic source map allreduce ok"
    tf_expect_has "$j.out" "rank 2/3 node node1 tags rollout,train,critic source map allreduce ok"
    tf_ok "hetjob + srun --het-group=0,1 --mpi=pmix: one world, per-pool tags"
}

# ---- the shipped jobscripts, running the real tagflow binary (TFTEST_TAGFLOW_BIN) ----
JOBSCRIPTS=$(cd "$HERE/../../jobscripts" && pwd)

need_tagflow() {
    [[ -x ${TFTEST_TAGFLOW_BIN:-} ]] || tf_fail "TFTEST_TAGFLOW_BIN not set to the tagflow binary"
    /usr/bin/python3 -c 'import h5py' 2> /dev/null || tf_fail "/usr/bin/python3 has no h5py (python3-h5py)"
}

# Single pool: -C 'h100|t4' puts one rank on node1 (H100) and one on node3 (T4)
case_jobscript_single_pool() {
    need_tagflow
    local j
    j=$(TF_BIN=$TFTEST_TAGFLOW_BIN TF_OUT=$T_OUT/run TF_STEPS=2 \
        sbatch --parsable -t 6 -o "$T_OUT/%j.out" --constraint='h100|t4' --nodes=2 \
        --ntasks-per-node=1 --cpus-per-task=1 --gres=gpu:1 "$JOBSCRIPTS/grpo_single_pool.sbatch")
    tf_expect_state "$j" "COMPLETED 0:0" 360
    "$HERE/check_run.py" "$T_OUT/run/tagflow.h5" --expect "0=rollout,train,critic;1=rollout" ||
        tf_fail "run file check failed (job output: $T_OUT/$j.out)"
    tf_ok "grpo_single_pool.sbatch: tag_source map on every rank, the T4 rank never trains"
}

# Hetjob: the script with its pool sizes adapted to this cluster (one T4 node, 2 cores in all)
case_jobscript_hetjob() {
    need_tagflow
    sed -e 's/--nodes=[0-9]*/--nodes=1/g' -e 's/--cpus-per-task=[0-9]*/--cpus-per-task=1/g' \
        -e 's/--ntasks-per-node=[0-9]*/--ntasks-per-node=1/g' \
        -e 's/--time=[0-9:]*/--time=6/' "$JOBSCRIPTS/grpo_hetjob.sbatch" > het.sbatch
    grep -q '^#SBATCH hetjob' het.sbatch || tf_fail "grpo_hetjob.sbatch has no '#SBATCH hetjob'"
    local j
    j=$(TF_BIN=$TFTEST_TAGFLOW_BIN TF_OUT=$T_OUT/run TF_STEPS=2 \
        sbatch --parsable -o "$T_OUT/%j.out" het.sbatch)
    tf_expect_state "$j" "COMPLETED 0:0" 360
    "$HERE/check_run.py" "$T_OUT/run/tagflow.h5" --expect "0=rollout;1=rollout,train,critic" ||
        tf_fail "run file check failed (job output: $T_OUT/$j.out)"
    tf_ok "grpo_hetjob.sbatch: T4 pool rank 0 rollout-only and never trains, H100 pool trains"
}

# ---- requeue and lost ranks (share/doc/failures.md) ----
# tf_wait_file FILE [TIMEOUT_S]: wait until FILE exists
tf_wait_file() {
    local t
    for ((t = 0; t < ${2:-60} * 10; t++)); do
        [[ -e $1 ]] && return 0
        sleep 0.1
    done
    tf_fail "$1 not there after ${2:-60}s"
}

# submit_requeue_fake [SBATCH-ARGS...]: the shipped single-pool jobscript on two nodes with
# fake_tagflow_requeue.sh as its tagflow binary; prints the job id
submit_requeue_fake() {
    TF_BIN=$HERE/fake_tagflow_requeue.sh TF_OUT=$T_OUT/run \
        sbatch --parsable -o "$T_OUT/%j.out" --constraint='h100|t4' --nodes=2 \
        --ntasks-per-node=1 --cpus-per-task=1 --gres=gpu:1 "$@" "$JOBSCRIPTS/grpo_single_pool.sbatch"
}

# skip_requeue_delay JOBID: slurmctld makes a requeued job wait 2 minutes (its BeginTime); once
# the job is pending again after a restart, move its start to now so the test does not idle
skip_requeue_delay() { # JOBID [TIMEOUT_S=60]
    local j=$1 t u line
    for ((t = 0; t < ${2:-60} * 10; t++)); do
        line=$(scontrol show job -o "$j" 2> /dev/null || true)
        if [[ $line == *JobState=PENDING* && $line != *Restarts=0* ]]; then
            echo "requeued: $(grep -oE '(Restarts|BeginTime)=[^ ]*' <<< "$line" | tr '\n' ' ')"
            # the old incarnation's steps (same job and step ids) must be gone from the nodes
            for ((u = 0; u < 300; u++)); do
                sinfo -h -N -o '%t' | grep -q comp || break
                sleep 0.1
            done
            sleep 2
            scontrol update JobId="$j" StartTime=now
            return 0
        fi
        [[ $line == *JobState=COMPLETED* || $line == *JobState=FAILED* ]] && return 0
        sleep 0.1
    done
    tf_fail "job $j was not requeued within ${2:-60} s: $line"
}

check_requeued_fake() { # JOBID [REQUEUE_TIMEOUT_S]
    local j=$1 r
    skip_requeue_delay "$j" "${2:-60}"
    tf_expect_state "$j" "COMPLETED 0:0" 200
    for r in 0 1; do
        [[ -f $T_OUT/run/checkpoint.$r ]] || tf_fail "rank $r wrote no checkpoint (job output: $T_OUT/$j.out)"
        [[ -f $T_OUT/run/finished.$r ]] || tf_fail "rank $r did not resume (job output: $T_OUT/$j.out)"
        tf_expect_has "$T_OUT/run/finished.$r" "restart 1"
    done
    tf_expect_has "$T_OUT/$j.out" "step exited 75 after SIGUSR1 (restart 0)"
    tf_expect_has "$T_OUT/$j.out" "checkpointed; requeueing"
    tf_expect_has "$T_OUT/$j.out" "step exited 0 (restart 1)"
    scontrol show job "$j" | grep -q 'Restarts=1' || tf_fail "job $j: Restarts is not 1: $(scontrol show job -o "$j")"
}

# SIGUSR1 to the batch shell only (what --signal=B:USR1 does): forwarded to every task, which
# checkpoints and exits 75; the script requeues; the second run resumes and completes.
case_requeue_fake_usr1() {
    local j t0
    j=$(submit_requeue_fake -t 3)
    tf_wait_file "$T_OUT/run/started.0" 60
    tf_wait_file "$T_OUT/run/started.1" 60
    t0=$(date +%s.%N)
    scancel -s USR1 -b "$j"
    check_requeued_fake "$j"
    echo "measured: USR1 to batch shell -> requeued run completed after $(echo "$(date +%s.%N) - $t0" | bc) s"
    tf_ok "B:USR1 forwarded to both tasks, exit 75, requeued, resumed (fake tagflow)"
}

# The same through the time limit: -t 3 with --signal=B:USR1@90 (Slurm sends it 90-150 s early)
case_requeue_fake_timelimit() {
    local j
    j=$(submit_requeue_fake -t 3 --signal=B:USR1@90)
    check_requeued_fake "$j" 170
    tf_ok "--signal=B:USR1 before the time limit: checkpoint, requeue, resume (fake tagflow)"
}

# rank_pid JOBID PROCID EXE: pid of that task's process running EXE (waits up to 30 s)
rank_pid() {
    local j=$1 r=$2 exe t pid env
    exe=$(readlink -f "$3")
    for ((t = 0; t < 300; t++)); do
        for pid in $(pgrep -f "$exe" 2> /dev/null || true); do
            [[ $(readlink -f "/proc/$pid/exe" 2> /dev/null) == "$exe" ]] || continue
            env=$({ tr '\0' '\n' < "/proc/$pid/environ"; } 2> /dev/null || true)
            if grep -qx "SLURM_JOB_ID=$j" <<< "$env" && grep -qx "SLURM_PROCID=$r" <<< "$env"; then
                echo "$pid"
                return 0
            fi
        done
        sleep 0.1
    done
    tf_fail "no process $exe of job $j rank $r"
}

# lost_job WHAT: submits a 2-node job whose step (srun --mpi=pmix -K1) runs WHAT (tagflow: a
# real `tagflow train`; probe: watchdog_probe_mpi), heartbeat timeout 5 s; waits until it made
# progress; sets LOST_JOB, LOST_EXE, LOST_PID (rank 1's pid)
lost_job() {
    local what=$1 t progress
    command -v bc > /dev/null || tf_fail "bc not found"
    if [[ $what == tagflow ]]; then
        need_tagflow
        LOST_EXE=$TFTEST_TAGFLOW_BIN
        progress='^step +3/'
        cat > job.sh <<EOS
#!/bin/bash
srun --mpi=pmix --kill-on-bad-exit=1 $TFTEST_TAGFLOW_BIN train --out $T_OUT/run --steps 100000 \\
    --prompts-per-step 4 --group-size 4 --eval-every 0 --eval-prompts 8 --gemm-check false \\
    --max-batch 16 --threads 1 --heartbeat-timeout 5
rc=\$?
echo "job.sh: step exited \$rc"
exit \$rc
EOS
    else
        [[ -x ${TFTEST_HEALTH_PROBE:-} ]] || tf_fail "TFTEST_HEALTH_PROBE not set to watchdog_probe_mpi"
        LOST_EXE=$TFTEST_HEALTH_PROBE
        progress='^tick 5 '
        mkdir -p "$T_OUT/run"
        cat > job.sh <<EOS
#!/bin/bash
srun --mpi=pmix --kill-on-bad-exit=1 $TFTEST_HEALTH_PROBE --out $T_OUT/run/.heartbeat --timeout 5
rc=\$?
echo "job.sh: step exited \$rc"
exit \$rc
EOS
    fi
    LOST_JOB=$(sb -t 5 --constraint='h100|t4' --nodes=2 --ntasks-per-node=1 --cpus-per-task=1 --gres=gpu:1 job.sh)
    for ((t = 0; t < 1800; t++)); do
        grep -qE "$progress" "$LOST_JOB.out" 2> /dev/null && break
        sleep 0.1
    done
    grep -qE "$progress" "$LOST_JOB.out" || { cat "$LOST_JOB.out" >&2; tf_fail "job $LOST_JOB made no progress"; }
    LOST_PID=$(rank_pid "$LOST_JOB" 1 "$LOST_EXE")
    LOST_PID0=$(rank_pid "$LOST_JOB" 0 "$LOST_EXE")
}

# lost_end WHAT T0 [node]: within 60 s of T0 the step ends (the batch script prints
# "job.sh: step exited") or, with a lost node, rank 0's process is gone (srun may then wait for
# the dead node's slurmstepd until slurmctld declares the node down: SlurmdTimeout, 60 s here);
# the job ends (FAILED, CANCELLED or NODE_FAIL), rank 1's process is gone, and (tagflow) the
# run file opens with h5py with the steps flushed before
lost_end() {
    local what=$1 t0=$2 st dt dt_step t ended=0 line
    for ((t = 0; t < 600; t++)); do
        if [[ ${3:-} == node ]]; then
            [[ -d /proc/$LOST_PID0 && $(readlink -f "/proc/$LOST_PID0/exe" 2> /dev/null) == $(readlink -f "$LOST_EXE") ]] ||
                { ended=1; break; }
        else
            grep -q '^job.sh: step exited' "$T_OUT/$LOST_JOB.out" 2> /dev/null && { ended=1; break; }
        fi
        sleep 0.1
    done
    dt_step=$(echo "$(date +%s.%N) - $t0" | bc)
    ((ended)) || { cat "$T_OUT/$LOST_JOB.out" >&2; tf_fail "job $LOST_JOB still running 60 s after the failure"; }
    if [[ ${3:-} == node ]]; then
        # slurmctld declares the node down after SlurmdTimeout; a job still running then is
        # requeued (JobRequeue=1) and would resume from its checkpoint: cancel it here
        for ((t = 0; t < 1800; t++)); do
            line=$(scontrol show job -o "$LOST_JOB" 2> /dev/null || true)
            [[ $line =~ JobState=(COMPLETED|FAILED|CANCELLED|NODE_FAIL|TIMEOUT) ]] && break
            if [[ $line != *Restarts=0* && $line == *JobState=PENDING* ]]; then
                scancel "$LOST_JOB"
                echo "job $LOST_JOB requeued by slurmctld after the node failure: $(grep -oE 'Restarts=[0-9]+' <<< "$line")"
                break
            fi
            sleep 0.1
        done
    fi
    st=$(tf_wait "$LOST_JOB" 60)
    dt=$(echo "$(date +%s.%N) - $t0" | bc)
    LOST_MEASURED="$([[ ${3:-} == node ]] && echo "rank 0 gone" || echo "step ended") after $dt_step s, job $LOST_JOB $st after $dt s"
    [[ $st == FAILED* || $st == CANCELLED* || $st == NODE_FAIL* ]] || tf_fail "job $LOST_JOB ended as '$st'"
    sleep 1
    if [[ -d /proc/$LOST_PID ]] && [[ $(readlink -f "/proc/$LOST_PID/exe" 2> /dev/null) == $(readlink -f "$LOST_EXE") ]]; then
        kill -KILL "$LOST_PID" 2> /dev/null || true
        tf_fail "rank 1 (pid $LOST_PID) still there after the job ended"
    fi
    [[ $what == tagflow ]] || return 0
    /usr/bin/python3 - "$T_OUT/run/tagflow.h5" <<'EOP' || tf_fail "run file not readable after the lost rank"
import sys
import h5py
with h5py.File(sys.argv[1], "r") as f:
    n = len(f["steps"]["step"])
    assert n >= 2, f"only {n} steps flushed"
    print(f"run file opens in h5py with {n} flushed steps")
EOP
}

expect_watchdog_named_rank1() {
    grep -qE 'tagflow: rank 1 \(host [^)]+\) stopped answering: no heartbeat for [0-9]+ s; aborting the job' \
        "$T_OUT/$LOST_JOB.out" || { cat "$T_OUT/$LOST_JOB.out" >&2; tf_fail "no watchdog message naming rank 1"; }
}

# SIGKILL of rank 1: srun -K1 ends the step at once and names the task
lost_kill() { # WHAT
    local t0
    lost_job "$1"
    t0=$(date +%s.%N)
    kill -KILL "$LOST_PID"
    lost_end "$1" "$t0"
    echo "measured: srun ($1): SIGKILL of rank 1 -> $LOST_MEASURED"
    tf_expect_has "$T_OUT/$LOST_JOB.out" "task 1: Killed"
    tf_ok "SIGKILL of rank 1 under srun -K1 ($1): the job ends, srun names task 1"
}

# SIGSTOP of rank 1: nobody but the heartbeat watchdog notices; it names rank 1
lost_stop() { # WHAT
    local t0
    lost_job "$1"
    t0=$(date +%s.%N)
    kill -STOP "$LOST_PID"
    lost_end "$1" "$t0"
    echo "measured: srun ($1): SIGSTOP of rank 1 -> $LOST_MEASURED"
    expect_watchdog_named_rank1
    tf_ok "SIGSTOP of rank 1 under srun -K1 ($1): the watchdog names rank 1, the job ends"
}

# A node lost: rank 1's slurmd, its slurmstepd and its task are SIGKILLed together, so no exit
# status ever reaches srun; the heartbeat watchdog of rank 0 must end the job. The node's
# slurmd is started again afterwards.
lost_node() { # WHAT
    local stepd node t0 t
    lost_job "$1"
    stepd=$(awk '{print $4}' "/proc/$LOST_PID/stat")
    node=$({ tr '\0' '\n' < "/proc/$LOST_PID/environ"; } | sed -n 's/^SLURMD_NODENAME=//p')
    [[ -n $node && -r $TFTEST_SLURM_DIR/run/slurmd.$node.pid ]] || tf_fail "rank 1's node unknown ($node)"
    t0=$(date +%s.%N)
    kill -KILL "$(cat "$TFTEST_SLURM_DIR/run/slurmd.$node.pid")" "$stepd" "$LOST_PID"
    # shellcheck disable=SC2064 # expanded now: $node is local
    trap "slurmd -N '$node' -f '$SLURM_CONF'" EXIT  # the node comes back even if the test fails
    lost_end "$1" "$t0" node
    echo "measured: srun ($1): node $node lost (slurmd, stepd, rank 1 killed) -> $LOST_MEASURED"
    trap - EXIT
    slurmd -N "$node" -f "$SLURM_CONF"
    for ((t = 0; t < 600; t++)); do
        scontrol show node -o "$node" | grep -qE 'State=IDLE( |$)' && break
        sleep 0.1
    done
    expect_watchdog_named_rank1
    tf_ok "node $node lost ($1): rank 0's watchdog names rank 1, the job ends"
}

case_srun_kill_rank() { lost_kill tagflow; }
case_srun_stop_rank() { lost_stop tagflow; }
case_srun_node_lost() { lost_node tagflow; }
case_srun_probe_kill() { lost_kill probe; }
case_srun_probe_stop() { lost_stop probe; }
case_srun_probe_node_lost() { lost_node probe; }

# The shipped jobscript with the real tagflow: SIGUSR1 to the batch shell after 3 steps; every
# rank checkpoints and exits 75, the job requeues itself, the second run resumes and finishes.
# The run file must then hold every step once, in order, and one /resumes row.
case_requeue_tagflow_usr1() {
    need_tagflow
    local j t steps=30
    j=$(TF_BIN=$TFTEST_TAGFLOW_BIN TF_OUT=$T_OUT/run TF_STEPS=$steps TAGFLOW_PROMPTS_PER_STEP=4 \
        TAGFLOW_GROUP_SIZE=4 TAGFLOW_EVAL_EVERY=0 TAGFLOW_EVAL_PROMPTS=8 TAGFLOW_GEMM_CHECK=false \
        TAGFLOW_MAX_BATCH=16 TAGFLOW_CKPT_EVERY=5 \
        sbatch --parsable -t 8 -o "$T_OUT/%j.out" --constraint='h100|t4' --nodes=2 \
        --ntasks-per-node=1 --cpus-per-task=1 --gres=gpu:1 "$JOBSCRIPTS/grpo_single_pool.sbatch")
    for ((t = 0; t < 2400; t++)); do
        grep -qE '^step +3/' "$T_OUT/$j.out" 2> /dev/null && break
        sleep 0.1
    done
    grep -qE '^step +3/' "$T_OUT/$j.out" || { cat "$T_OUT/$j.out" >&2; tf_fail "job $j did not reach step 3"; }
    scancel -s USR1 -b "$j"
    skip_requeue_delay "$j"
    tf_expect_state "$j" "COMPLETED 0:0" 360
    tf_expect_has "$T_OUT/$j.out" "step exited 75 after SIGUSR1 (restart 0)"
    tf_expect_has "$T_OUT/$j.out" "checkpointed; requeueing"
    tf_expect_has "$T_OUT/$j.out" "step exited 0 (restart 1)"
    /usr/bin/python3 - "$T_OUT/run/tagflow.h5" "$steps" <<'EOP' || tf_fail "run file after requeue (job output: $T_OUT/$j.out)"
import sys
import h5py
import numpy as np
path, n = sys.argv[1], int(sys.argv[2])
with h5py.File(path, "r") as f:
    steps = f["steps"]["step"][()]
    assert np.array_equal(np.sort(steps), np.arange(1, n + 1)) or np.array_equal(np.sort(steps), np.arange(n)), \
        f"steps not each once: {steps.tolist()}"
    assert np.all(np.diff(steps) > 0), f"steps not increasing: {steps.tolist()}"
    r = f["resumes"]
    assert len(r["from_step"]) == 1, f"{len(r['from_step'])} /resumes rows, expected 1"
    print(f"run file: {len(steps)} steps once each, resumed once from step {int(r['from_step'][0])}")
EOP
    tf_ok "real tagflow: B:USR1 -> checkpoint, exit 75, requeue, resume, all $steps steps once"
}

# A real `tagflow train` of a non-root user (nobody) through sbatch + srun --mpi=pmix -K1 on two
# nodes: a sync run with checkpoints, then a disaggregated run with --gateway (node3's T4 rank
# is rollout-only: it serves the gateway and answers one authenticated request). Everything the
# runs create belongs to nobody: run directories 0750 (tagflow makes them, nested), the
# checkpoint, gateway.token 0600; nobody reads the run files with h5py.
case_nonroot_train() {
    need_tagflow
    local j u=$T_OUT/nobody
    mkdir -p "$u"
    chown nobody: "$u"
    chmod 0700 "$u"
    cat > "$u/job.sh" <<EOS
#!/bin/bash
run() { # OUT ARGS...: one srun step of tagflow train
    local out=\$1
    shift
    srun --mpi=pmix -K1 $TFTEST_TAGFLOW_BIN train --out "\$out" --prompts-per-step 4 --group-size 4 \\
        --eval-every 0 --eval-prompts 8 --gemm-check false --max-batch 16 --threads 1 --heartbeat-timeout 10 "\$@"
    echo "job.sh: \$(basename "\$out") exited \$? as \$(id -un) umask \$(umask)"
}
run $u/runs/sync --mode sync --steps 4 --ckpt-every 2
# enough steps that the run outlives the client's two requests (3 steps took 0.2 s)
run $u/runs/gw --mode disaggregated --gateway 127.0.0.1:0 --steps 60 --max-new-tokens 8 &
for ((t = 0; t < 600; t++)); do [[ -s $u/runs/gw/gateway.url ]] && break; sleep 0.1; done
if [[ -s $u/runs/gw/gateway.url ]]; then
    url=\$(cat $u/runs/gw/gateway.url)
    /usr/bin/python3 - "\$url" "\$(cat $u/runs/gw/gateway.token)" <<'EOP'
import http.client, json, sys
url, token = sys.argv[1], sys.argv[2]
hostport = url.split("://", 1)[1].split("/", 1)[0]
host, port = hostport.rsplit(":", 1)
def post(auth):
    c = http.client.HTTPConnection(host, int(port), timeout=60)
    h = {"Content-Type": "application/json"}
    if auth:
        h["Authorization"] = "Bearer " + token
    body = {"model": "tagflow-policy", "prompt": [10, 3, 1, 4, 11], "max_tokens": 4, "stop_token_ids": [12]}
    c.request("POST", "/v1/completions", json.dumps(body), h)
    r = c.getresponse()
    return r.status, r.read()
print(f"gateway: without token {post(False)[0]}, with token {post(True)[0]}")
EOP
else
    echo "gateway: no gateway.url"
fi
wait
EOS
    chmod 0755 "$u/job.sh"
    j=$(runuser -u nobody -- sbatch --parsable -t 3 -o "$u/%j.out" --chdir="$u" --constraint='h100|t4' --nodes=2 \
        --ntasks-per-node=1 --cpus-per-task=1 --gres=gpu:1 --rl-tags=auto "$u/job.sh")
    tf_expect_state "$j" "COMPLETED 0:0" 240
    tf_expect_has "$u/$j.out" "job.sh: sync exited 0 as nobody"
    tf_expect_has "$u/$j.out" "job.sh: gw exited 0 as nobody"
    tf_expect_has "$u/$j.out" "gateway: without token 401, with token 200"
    grep -E '^(job.sh|gateway):' "$u/$j.out"
    # owners and modes: tagflow made runs/ and runs/*, 0750 whatever the umask
    local p want bad=""
    for p in runs runs/sync runs/gw runs/sync/checkpoint runs/sync/tagflow.h5 runs/sync/checkpoint/manifest.txt \
             runs/gw/tagflow.h5 runs/gw/gateway.token; do
        [[ -e $u/$p ]] || tf_fail "$u/$p missing (job output: $u/$j.out)"
        [[ $(stat -c %U "$u/$p") == nobody ]] || bad+=" $p:owner=$(stat -c %U "$u/$p")"
    done
    for p in runs runs/sync runs/gw; do
        [[ $(stat -c %a "$u/$p") == 750 ]] || bad+=" $p:mode=$(stat -c %a "$u/$p")"
    done
    [[ $(stat -c %a "$u/runs/gw/gateway.token") == 600 ]] || bad+=" gateway.token:mode=$(stat -c %a "$u/runs/gw/gateway.token")"
    [[ -z $bad ]] || tf_fail "owners/modes:$bad"
    runuser -u nobody -- /usr/bin/python3 - "$u/runs" <<'EOP' || tf_fail "run files not readable by nobody with h5py"
import sys
import h5py
for name, n in (("sync", 4), ("gw", 60)):
    with h5py.File(f"{sys.argv[1]}/{name}/tagflow.h5", "r") as f:
        steps = len(f["steps"]["step"])
        assert f.attrs["format"] in (b"tagflow", "tagflow") and steps == n, f"{name}: {steps} steps, expected {n}"
        print(f"{name}: nobody reads tagflow.h5 with h5py: {steps} steps, {len(f['samples']['id'])} samples")
EOP
    tf_ok "user nobody: tagflow train (sync + checkpoint, disaggregated + gateway) under srun; dirs 0750, token 0600, all owned by nobody"
}

fn=case_$CASE
declare -F "$fn" > /dev/null || tf_fail "unknown case '$CASE'"
"$fn"
