/* SPDX-License-Identifier: Apache-2.0 */
/* fake_spank: see fake_spank.h. Not thread-safe; one test at a time. */
#include "fake_spank.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "stepd.h"

struct fake_spank fake;

void fake_reset(spank_context_t ctx) {
    memset(&fake, 0, sizeof(fake));
    fake.ctx = ctx;
    fake.node_name = "node1";
}

spank_context_t spank_context(void) { return fake.ctx; }

spank_err_t spank_option_register(spank_t sp, struct spank_option* opt) {
    (void)sp;
    fake.opt = opt;
    return ESPANK_SUCCESS;
}

spank_err_t spank_setenv(spank_t sp, const char* var, const char* val, int overwrite) {
    (void)sp;
    if (!overwrite) return ESPANK_BAD_ARG; /* the plugin must always overwrite */
    fake.setenv_calls++;
    if (strcmp(var, "TAGFLOW_TAGS") == 0) snprintf(fake.env_tags, sizeof(fake.env_tags), "%s", val);
    if (strcmp(var, "TAGFLOW_TAG_SOURCE") == 0) snprintf(fake.env_source, sizeof(fake.env_source), "%s", val);
    return ESPANK_SUCCESS;
}

const char* spank_strerror(spank_err_t err) { return err == ESPANK_SUCCESS ? "Success" : "fake error"; }

void slurm_error(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(fake.last_error, sizeof(fake.last_error), fmt, ap);
    va_end(ap);
    fake.errors++;
}

void slurm_verbose(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(fake.last_verbose, sizeof(fake.last_verbose), fmt, ap);
    va_end(ap);
}

int tf_stepd_describe_node(spank_t sp, struct tf_node* node, char* err, size_t errlen) {
    (void)sp;
    fake.describe_calls++;
    tf_node_init(node, fake.node_name);
    if (fake.describe_fails) {
        snprintf(err, errlen, "slurm_load_job(42): Invalid job id specified");
        return -1;
    }
    if (tf_node_add_features(node, fake.node_features, err, errlen) != 0) return -1;
    return tf_node_add_gres(node, fake.node_gres, err, errlen);
}
