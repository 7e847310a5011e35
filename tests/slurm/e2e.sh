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

fn=case_$CASE
declare -F "$fn" > /dev/null || tf_fail "unknown case '$CASE'"
"$fn"
