/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stepd: what spank_tagflow needs from slurmctld inside slurmstepd (remote
 * context): this node's active features and the GRES the job holds here.
 * Two RPCs per step per node, made only for jobs that use --rl-tags.
 * Does not evaluate the map (tagmap.c) or set the environment (spank_tagflow.c).
 */
#ifndef TAGFLOW_STEPD_H
#define TAGFLOW_STEPD_H

#include <slurm/spank.h>
#include <stddef.h>

#include "tagmap.h"

/*
 * Fill node from slurm_load_node_single() (features) and slurm_load_job()
 * (gres_detail_str at this node's index in the job node list). The node name
 * is slurmstepd's own SLURMD_NODENAME (the step environment may carry the
 * batch node's name). Returns 0, or -1 with err filled.
 */
int tf_stepd_describe_node(spank_t sp, struct tf_node* node, char* err, size_t errlen);

#endif /* TAGFLOW_STEPD_H */
