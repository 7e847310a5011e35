/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stepd: fills a tf_node for this slurmstepd from slurmctld (remote context
 * only). Uses slurm_load_node_single() and slurm_load_job(); the symbols come
 * from the libslurmfull already loaded in slurmstepd, so the plugin does not
 * link libslurm. Does not cache anything between steps.
 */
#include "stepd.h"

#include <errno.h>
#include <inttypes.h>
#include <slurm/slurm.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Position of node in a hostlist expression ("node[1-3]"), -1 if absent. */
static int tf_node_index(const char* nodes, const char* node) {
    hostlist_t hl;
    int idx;

    if (nodes == NULL || *nodes == '\0') return -1;
    hl = slurm_hostlist_create(nodes);
    if (hl == NULL) return -1;
    idx = slurm_hostlist_find(hl, node);
    slurm_hostlist_destroy(hl);
    return idx;
}

/*
 * Find the job record holding this node. For a heterogeneous job the step's
 * job id is the component's; the component record is preferred, any record of
 * the response that lists the node is accepted.
 */
static job_info_t* tf_find_job(job_info_msg_t* msg, uint32_t job_id, const char* node, int* idx) {
    job_info_t* fallback = NULL;
    int fallback_idx = -1;

    for (uint32_t i = 0; i < msg->record_count; i++) {
        job_info_t* j = &msg->job_array[i];
        int k = tf_node_index(j->nodes, node);
        if (k < 0) continue;
        if (j->job_id == job_id) {
            *idx = k;
            return j;
        }
        if (fallback == NULL) {
            fallback = j;
            fallback_idx = k;
        }
    }
    *idx = fallback_idx;
    return fallback;
}

int tf_stepd_describe_node(spank_t sp, struct tf_node* node, char* err, size_t errlen) {
    node_info_msg_t* nmsg = NULL;
    job_info_msg_t* jmsg = NULL;
    const char* name = getenv("SLURMD_NODENAME"); /* slurmstepd's own, never the step env's */
    char namebuf[TF_NAME_MAX];
    uint32_t job_id = 0;
    spank_err_t src;
    int rv = -1;
    int idx = -1;
    job_info_t* job;

    if (name == NULL || tf_strlcpy(namebuf, name, sizeof(namebuf)) != 0) {
        snprintf(err, errlen, "cannot tell this node's name (SLURMD_NODENAME %s in slurmstepd)",
                 name == NULL ? "unset" : "too long");
        return -1;
    }
    tf_node_init(node, namebuf);
    if ((src = spank_get_item(sp, S_JOB_ID, &job_id)) != ESPANK_SUCCESS) {
        snprintf(err, errlen, "spank_get_item(S_JOB_ID): %s", spank_strerror(src));
        return -1;
    }

    if (slurm_load_node_single(&nmsg, namebuf, SHOW_ALL) != 0 || nmsg == NULL || nmsg->record_count < 1) {
        snprintf(err, errlen, "slurm_load_node_single(%s): %s", namebuf, slurm_strerror(slurm_get_errno()));
        goto fail;
    }
    {
        node_info_t* n = &nmsg->node_array[0];
        const char* feats = (n->features_act && *n->features_act) ? n->features_act : n->features;
        if (tf_node_add_features(node, feats, err, errlen) != 0) goto fail;
    }

    if (slurm_load_job(&jmsg, job_id, SHOW_DETAIL) != 0 || jmsg == NULL) {
        snprintf(err, errlen, "slurm_load_job(%" PRIu32 "): %s", job_id, slurm_strerror(slurm_get_errno()));
        goto fail;
    }
    job = tf_find_job(jmsg, job_id, namebuf, &idx);
    if (job == NULL && jmsg->record_count > 0 && jmsg->job_array[0].het_job_id != 0 &&
        jmsg->job_array[0].het_job_id != job_id) {
        /* component record without this node: ask for the whole heterogeneous job */
        uint32_t leader = jmsg->job_array[0].het_job_id;
        slurm_free_job_info_msg(jmsg);
        jmsg = NULL;
        if (slurm_load_job(&jmsg, leader, SHOW_DETAIL) != 0 || jmsg == NULL) {
            snprintf(err, errlen, "slurm_load_job(%" PRIu32 "): %s", leader, slurm_strerror(slurm_get_errno()));
            goto fail;
        }
        job = tf_find_job(jmsg, job_id, namebuf, &idx);
    }
    if (job == NULL) {
        snprintf(err, errlen, "job %" PRIu32 " has no allocation on node %s", job_id, namebuf);
        goto fail;
    }
    if (job->gres_detail_str != NULL && idx >= 0 && (uint32_t)idx < job->gres_detail_cnt &&
        tf_node_add_gres(node, job->gres_detail_str[idx], err, errlen) != 0)
        goto fail;
    rv = 0;
fail:
    if (jmsg) slurm_free_job_info_msg(jmsg);
    if (nmsg) slurm_free_node_info_msg(nmsg);
    return rv;
}
