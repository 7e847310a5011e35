/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fake_spank: stand-ins for the SPANK/slurm functions spank_tagflow.c calls,
 * plus a fake stepd (tf_stepd_describe_node) returning a scripted node, so the
 * plugin's hooks run in a test executable. Records environment and messages.
 */
#ifndef TAGFLOW_FAKE_SPANK_H
#define TAGFLOW_FAKE_SPANK_H

#include <slurm/spank.h>

#include "tagmap.h"

struct fake_spank {
    spank_context_t ctx;
    struct spank_option* opt;  /* last registered option */
    int describe_calls;        /* "RPCs" made */
    const char* node_features; /* scripted node */
    const char* node_gres;
    const char* node_name;
    int describe_fails;
    char env_tags[64]; /* last spank_setenv values ("" = never set) */
    char env_source[64];
    int setenv_calls;
    char last_error[4096];
    char last_verbose[4096];
    int errors;
};

extern struct fake_spank fake;

void fake_reset(spank_context_t ctx);

#endif /* TAGFLOW_FAKE_SPANK_H */
