/* SPDX-License-Identifier: Apache-2.0 */
/*
 * spank_tagflow: SPANK entry points. Registers --rl-tags, validates it in the
 * clients (sbatch/srun/salloc), and in slurmstepd turns this node's features
 * and GRES into TAGFLOW_TAGS / TAGFLOW_TAG_SOURCE for every task of the step.
 * Opt-in: for jobs without --rl-tags nothing is read, asked or exported.
 * Configuration problems (plugstack arguments, tag map) never fail
 * slurm_spank_init: they are kept and reported only to jobs that use
 * --rl-tags (refused by the client, or failed in task_init on the node), so
 * other users are never affected. Parsing and evaluation live in tagmap.c,
 * the slurmctld queries in stepd.c.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <slurm/spank.h>

#include "stepd.h"
#include "tagmap.h"

/* Declared extern first so they keep external linkage whatever the compiler. */
extern const char plugin_name[];
extern const char plugin_type[];
extern const unsigned int plugin_version;
extern const unsigned int spank_plugin_version;
SPANK_PLUGIN(tagflow, 1);

#define TF_ENV_TAGS "TAGFLOW_TAGS"
#define TF_ENV_SOURCE "TAGFLOW_TAG_SOURCE"

/* Everything the hooks share; one copy per process (sbatch, srun, slurmstepd, slurmd). */
static struct {
    int args_ok; /* plugstack arguments parsed */
    struct tf_args args;
    char cfg_err[2 * TF_ERR_LEN]; /* bad arguments or bad map: fails tagflow jobs only */
    struct tf_map* map;           /* loaded lazily, only for tagflow jobs */
    int map_tried;
    int opt_set;        /* --rl-tags seen (and valid) */
    unsigned requested; /* its tags, TF_TAG_ALL for auto */
    char opt_value[TF_OPT_MAX + 1];
    char opt_err[2 * TF_ERR_LEN];  /* remote only: value the client should have refused */
    char node_err[3 * TF_ERR_LEN]; /* remote: this node cannot serve the job */
    char tags[TF_TAGS_STR_LEN];    /* remote: what we export */
    const char* source;
} tf;

static int tf_opt_cb(int val, const char* optarg, int remote);

static struct spank_option tf_option = {"rl-tags",
                                        "LIST",
                                        "tagflow capability tags this job may use on each node: comma list of "
                                        "rollout,train,critic, or auto for all; each node exports its tag-map tags "
                                        "intersected with LIST as TAGFLOW_TAGS",
                                        1,
                                        0,
                                        tf_opt_cb};

/*
 * Option callback: runs in sbatch/srun/salloc when the option is parsed
 * (remote == 0) and again in slurmstepd (remote == 1), as the job user in the
 * client and as root in slurmstepd. Only stores the value. A bad value makes
 * the client exit non-zero before anything is submitted; in slurmstepd it is
 * kept and reported in task_init, so it never drains a node.
 */
static int tf_opt_cb(int val, const char* optarg, int remote) {
    char err[TF_ERR_LEN];
    unsigned mask = 0;

    (void)val;
    tf.opt_set = 0;
    tf.opt_err[0] = '\0';
    if (tf_tags_parse(optarg, 1, 0, &mask, err, sizeof(err)) != 0) {
        if (!remote) {
            slurm_error("tagflow: invalid --rl-tags value: %s", err);
            return -1;
        }
        snprintf(tf.opt_err, sizeof(tf.opt_err), "invalid --rl-tags value: %s", err);
        tf.opt_set = 1; /* the job asked for tagflow: fail its tasks */
        return 0;
    }
    tf.requested = mask;
    tf.opt_set = 1;
    tf_strlcpy(tf.opt_value, optarg, sizeof(tf.opt_value)); /* fits: parse bounded it */
    return 0;
}

/* Parse plugstack arguments; on error remember the message (never fatal). */
static void tf_parse_args(int ac, char** av) {
    char err[TF_ERR_LEN];

    tf.args_ok = 0;
    tf.cfg_err[0] = '\0';
    if (tf_args_parse(ac, av, &tf.args, err, sizeof(err)) != 0) {
        snprintf(tf.cfg_err, sizeof(tf.cfg_err), "bad plugstack.conf line for spank_tagflow.so: %s", err);
        return;
    }
    tf.args_ok = 1;
}

/*
 * Load the map once per process. Returns 0 when usable; -1 with tf.cfg_err
 * set otherwise. *open_errno tells a missing/unreadable file from a bad one.
 */
static int tf_load_map(int* open_errno) {
    char err[TF_ERR_LEN];

    *open_errno = 0;
    if (!tf.args_ok) return -1;
    if (tf.args.map[0] == '\0' || tf.map != NULL) return 0;
    if (tf.map_tried && tf.cfg_err[0]) return -1;
    tf.map_tried = 1;
    tf.map = malloc(sizeof(*tf.map));
    if (tf.map == NULL) {
        snprintf(tf.cfg_err, sizeof(tf.cfg_err), "out of memory loading the tag map");
        return -1;
    }
    if (tf_map_load(tf.map, tf.args.map, open_errno, err, sizeof(err)) != 0) {
        snprintf(tf.cfg_err, sizeof(tf.cfg_err), "bad tag map: %s", err);
        free(tf.map);
        tf.map = NULL;
        return -1;
    }
    return 0;
}

/*
 * slurm_spank_init: every context. Client contexts (sbatch, salloc, srun) and
 * slurmstepd run it as the user / as root before options are parsed; slurmd
 * runs it as root at start-up. Registers --rl-tags where options exist and
 * parses the plugstack arguments. Never fails for configuration problems.
 */
int slurm_spank_init(spank_t sp, int ac, char** av) {
    spank_context_t ctx = spank_context();
    spank_err_t rc;
    int open_errno;

    free(tf.map);
    memset(&tf, 0, sizeof(tf));
    tf_parse_args(ac, av);

    if (ctx == S_CTX_SLURMD) {
        /* tell the admin early, in the slurmd log; jobs without --rl-tags are unaffected */
        if (tf.args_ok) tf_load_map(&open_errno);
        if (tf.cfg_err[0])
            slurm_error("tagflow: %s; jobs using --rl-tags will fail on this node until it is fixed", tf.cfg_err);
        return 0;
    }
    if (ctx != S_CTX_LOCAL && ctx != S_CTX_REMOTE && ctx != S_CTX_ALLOCATOR) return 0;

    if ((rc = spank_option_register(sp, &tf_option)) != ESPANK_SUCCESS) {
        slurm_error("tagflow: spank_option_register(--rl-tags): %s", spank_strerror(rc));
        return -1;
    }
    if (tf.cfg_err[0]) slurm_verbose("tagflow: %s", tf.cfg_err);
    return 0;
}

/*
 * slurm_spank_init_post_opt: after option parsing. In sbatch/salloc/srun (as
 * the user) it refuses a tagflow job whose configuration is broken, naming
 * file, line and problem; a map that does not exist or is unreadable on the
 * submit host is left to the nodes. In slurmstepd (remote, still root) it
 * loads the map so a root-only map file works.
 */
int slurm_spank_init_post_opt(spank_t sp, int ac, char** av) {
    spank_context_t ctx = spank_context();
    int open_errno = 0;

    (void)sp;
    (void)ac;
    (void)av;
    if (!tf.opt_set) return 0;

    if (ctx == S_CTX_LOCAL || ctx == S_CTX_ALLOCATOR) {
        if (!tf.args_ok) {
            slurm_error("tagflow: %s", tf.cfg_err);
            return -1;
        }
        if (tf_load_map(&open_errno) != 0) {
            if (open_errno == ENOENT || open_errno == EACCES) {
                slurm_verbose("tagflow: %s (checked on the compute nodes instead)", tf.cfg_err);
                return 0;
            }
            slurm_error("tagflow: %s", tf.cfg_err);
            return -1;
        }
        slurm_verbose("tagflow: --rl-tags=%s accepted", tf.opt_value);
        return 0;
    }
    if (ctx == S_CTX_REMOTE && tf.args_ok) tf_load_map(&open_errno); /* error kept in cfg_err */
    return 0;
}

/*
 * slurm_spank_user_init: remote context (slurmstepd), once per step per node,
 * before tasks are forked, with the job user's effective uid. Asks slurmctld
 * for this node's features and the job's GRES here, evaluates the map and
 * exports the result. Never returns an error: a failure here would drain the
 * node for batch jobs; problems are reported by task_init instead.
 */
int slurm_spank_user_init(spank_t sp, int ac, char** av) {
    struct tf_node node;
    struct tf_result res;
    char err[TF_ERR_LEN];
    char desc[TF_ERR_LEN];
    char maptags[TF_TAGS_STR_LEN];
    char req[TF_TAGS_STR_LEN];
    spank_err_t rc;

    (void)ac;
    (void)av;
    if (!tf.opt_set || tf.cfg_err[0] || tf.opt_err[0] || !tf.args_ok) return 0;

    if (tf_stepd_describe_node(sp, &node, err, sizeof(err)) != 0) {
        snprintf(tf.node_err, sizeof(tf.node_err), "cannot read node and job information: %s", err);
        return 0;
    }
    tf_evaluate(tf.map, &tf.args, &node, tf.requested, &res);
    tf_node_describe(&node, desc, sizeof(desc));
    tf_tags_format(res.map_tags, maptags, sizeof(maptags));
    tf_tags_format(tf.requested, req, sizeof(req));
    if (res.tags == 0) {
        if (res.from_default && !res.has_default)
            snprintf(tf.node_err, sizeof(tf.node_err), "node %s (%s): no tag-map rule matches and there is no default",
                     node.name, desc);
        else
            snprintf(tf.node_err, sizeof(tf.node_err),
                     "node %s (%s): the %s gives tags '%s' but --rl-tags=%s allows only '%s': "
                     "no tag in common",
                     node.name, desc, res.from_default ? "default" : "tag map", maptags, tf.opt_value, req);
        return 0;
    }
    tf_tags_format(res.tags, tf.tags, sizeof(tf.tags));
    tf.source = tf_source_name(res.source);
    if (res.rule >= 0)
        slurm_verbose("tagflow: node %s (%s): %s:%d gives %s; exporting %s (source %s)", node.name, desc, tf.map->file,
                      tf.map->rule[res.rule].line, maptags, tf.tags, tf.source);
    else
        slurm_verbose("tagflow: node %s (%s): no rule matched, default %s; exporting %s", node.name, desc, maptags,
                      tf.tags);
    /* overwrite: srun steps inherit the batch step's values from the batch node */
    if ((rc = spank_setenv(sp, TF_ENV_TAGS, tf.tags, 1)) != ESPANK_SUCCESS ||
        (rc = spank_setenv(sp, TF_ENV_SOURCE, tf.source, 1)) != ESPANK_SUCCESS) {
        snprintf(tf.node_err, sizeof(tf.node_err), "spank_setenv(%s): %s", TF_ENV_TAGS, spank_strerror(rc));
        return 0;
    }
    return 0;
}

/*
 * slurm_spank_task_init: remote context, in each forked task just before
 * exec, as the job user. The safe place to fail a tagflow job: the task exits
 * 1, the job is FAILED and the node stays in service. On success it sets the
 * variables again in the task's own environment.
 */
int slurm_spank_task_init(spank_t sp, int ac, char** av) {
    const char* why = NULL;
    spank_err_t rc;

    (void)ac;
    (void)av;
    if (!tf.opt_set) return 0;
    if (tf.cfg_err[0]) why = tf.cfg_err;
    else if (tf.opt_err[0]) why = tf.opt_err;
    else if (tf.node_err[0]) why = tf.node_err;
    else if (tf.source == NULL) why = "internal error: tags were not computed for this step";
    if (why != NULL) {
        /* in the task, slurm_error goes to the job's stderr ("slurmstepd-NODE: error: ...") */
        slurm_error("tagflow: %s", why);
        return -1;
    }
    if ((rc = spank_setenv(sp, TF_ENV_TAGS, tf.tags, 1)) != ESPANK_SUCCESS ||
        (rc = spank_setenv(sp, TF_ENV_SOURCE, tf.source, 1)) != ESPANK_SUCCESS) {
        slurm_error("tagflow: spank_setenv(%s): %s", TF_ENV_TAGS, spank_strerror(rc));
        return -1;
    }
    return 0;
}

/* slurm_spank_exit: every context, at the end; releases the map. */
int slurm_spank_exit(spank_t sp, int ac, char** av) {
    (void)sp;
    (void)ac;
    (void)av;
    free(tf.map);
    tf.map = NULL;
    return 0;
}
