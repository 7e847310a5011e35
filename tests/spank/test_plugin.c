/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_plugin: spank_tagflow.c's hooks against fake_spank.c, one group per
 * context: the clients refuse bad --rl-tags values and broken configuration
 * only for tagflow jobs; slurmstepd makes no RPC and sets nothing for other
 * jobs, exports tags for tagflow jobs and fails only in task_init.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fake_spank.h"
#include "tf_test.h"

static char g_map_path[1024];
static char g_bad_map[64];

static int run_init(spank_context_t ctx, int ac, char** av) {
    fake_reset(ctx);
    return slurm_spank_init(NULL, ac, av);
}

/* "map=PATH" in its own buffer: argv entries built in one test must not alias each other */
static char* map_arg(const char* path) {
    static char pool[16][1100];
    static int next;
    char* buf = pool[next];
    next = (next + 1) % 16;
    snprintf(buf, sizeof(pool[0]), "map=%s", path);
    return buf;
}

static void test_client_ok(void) {
    char* av[] = {map_arg(g_map_path)};
    CHECK(run_init(S_CTX_ALLOCATOR, 1, av) == 0);
    CHECK(fake.opt != NULL);
    if (fake.opt == NULL) return;
    CHECK_STR(fake.opt->name, "rl-tags");
    CHECK(fake.opt->has_arg == 1);
    CHECK(strlen(fake.opt->name) <= SPANK_OPTION_MAXLEN);
    CHECK(fake.opt->cb(0, "rollout,train", 0) == 0);
    CHECK(slurm_spank_init_post_opt(NULL, 1, av) == 0);
    CHECK(fake.errors == 0);
    CHECK(fake.setenv_calls == 0); /* the client never sets the job's environment */
    slurm_spank_exit(NULL, 1, av);
    /* local (srun) context registers too */
    CHECK(run_init(S_CTX_LOCAL, 1, av) == 0 && fake.opt != NULL);
    CHECK(run_init(S_CTX_REMOTE, 1, av) == 0 && fake.opt != NULL);
    slurm_spank_exit(NULL, 1, av);
}

static void test_client_bad_value(void) {
    char* av[] = {map_arg(g_map_path)};
    const char* bad[] = {"bogus", "", "rollout,bogus", "rollout,,train", "auto,train", "train,train"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        CHECK(run_init(S_CTX_ALLOCATOR, 1, av) == 0);
        CHECK(fake.opt->cb(0, bad[i], 0) == -1);
        CHECK_HAS(fake.last_error, "tagflow: invalid --rl-tags value");
    }
    CHECK(run_init(S_CTX_LOCAL, 1, av) == 0);
    CHECK(fake.opt->cb(0, "bogus", 0) == -1);
    CHECK_HAS(fake.last_error, "unknown tag 'bogus' (allowed: rollout,train,critic or auto)");
    /* overlong value: refused without copying it whole */
    char longv[4096];
    memset(longv, 'r', sizeof(longv) - 1);
    longv[sizeof(longv) - 1] = '\0';
    CHECK(fake.opt->cb(0, longv, 0) == -1);
    CHECK_HAS(fake.last_error, "too long");
    slurm_spank_exit(NULL, 1, av);
}

static void test_client_bad_args(void) {
    char* av[] = {map_arg(g_map_path), "mode=union"};
    /* init never fails: jobs without --rl-tags keep working */
    CHECK(run_init(S_CTX_ALLOCATOR, 2, av) == 0);
    CHECK(fake.errors == 0);
    CHECK(slurm_spank_init_post_opt(NULL, 2, av) == 0);
    CHECK(fake.errors == 0);
    /* a tagflow job is refused, naming the problem */
    CHECK(run_init(S_CTX_ALLOCATOR, 2, av) == 0);
    CHECK(fake.opt->cb(0, "auto", 0) == 0);
    CHECK(slurm_spank_init_post_opt(NULL, 2, av) == -1);
    CHECK_HAS(fake.last_error, "unknown plugstack argument 'mode=union'");
    char* none[] = {NULL};
    CHECK(run_init(S_CTX_LOCAL, 0, none) == 0);
    CHECK(fake.opt->cb(0, "auto", 0) == 0);
    CHECK(slurm_spank_init_post_opt(NULL, 0, none) == -1);
    CHECK_HAS(fake.last_error, "needs map=FILE");
    slurm_spank_exit(NULL, 0, none);
}

static void test_client_bad_map(void) {
    char* av[] = {map_arg(g_bad_map)};
    char expect[128];
    CHECK(run_init(S_CTX_ALLOCATOR, 1, av) == 0);
    CHECK(slurm_spank_init_post_opt(NULL, 1, av) == 0); /* not a tagflow job */
    CHECK(fake.errors == 0);
    CHECK(run_init(S_CTX_ALLOCATOR, 1, av) == 0);
    CHECK(fake.opt->cb(0, "train", 0) == 0);
    CHECK(slurm_spank_init_post_opt(NULL, 1, av) == -1);
    snprintf(expect, sizeof(expect), "%s:3: unknown condition 'colour=red'", g_bad_map);
    CHECK_HAS(fake.last_error, expect);
    slurm_spank_exit(NULL, 1, av);
    /* missing on the submit host: left to the compute nodes */
    char* missing[] = {"map=/nonexistent/tagflow.map"};
    CHECK(run_init(S_CTX_ALLOCATOR, 1, missing) == 0);
    CHECK(fake.opt->cb(0, "train", 0) == 0);
    CHECK(slurm_spank_init_post_opt(NULL, 1, missing) == 0);
    CHECK_HAS(fake.last_verbose, "checked on the compute nodes");
    slurm_spank_exit(NULL, 1, missing);
}

/* remote context: the full step sequence for one node */
static int run_step(char** av, int ac, const char* opt, const char* feats, const char* gres, int* task_rc) {
    int rc = run_init(S_CTX_REMOTE, ac, av);
    fake.node_features = feats;
    fake.node_gres = gres;
    if (opt != NULL) CHECK(fake.opt->cb(0, opt, 1) == 0);
    rc |= slurm_spank_init_post_opt(NULL, ac, av);
    rc |= slurm_spank_user_init(NULL, ac, av);
    *task_rc = slurm_spank_task_init(NULL, ac, av);
    slurm_spank_exit(NULL, ac, av);
    return rc;
}

static void test_remote_opt_out(void) {
    char* av[] = {map_arg(g_map_path)};
    int trc;
    CHECK(run_step(av, 1, NULL, "h100", "gpu:h100:2", &trc) == 0 && trc == 0);
    CHECK(fake.describe_calls == 0); /* no RPC */
    CHECK(fake.setenv_calls == 0);   /* no environment */
    CHECK(fake.errors == 0);
    /* even with a broken configuration, non-tagflow steps are untouched */
    char* bad[] = {map_arg(g_bad_map)};
    CHECK(run_step(bad, 1, NULL, "h100", NULL, &trc) == 0 && trc == 0);
    CHECK(fake.describe_calls == 0 && fake.setenv_calls == 0 && fake.errors == 0);
}

static void test_remote_tags(void) {
    char* av[] = {map_arg(g_map_path)};
    int trc;
    CHECK(run_step(av, 1, "auto", "h100,nvlink", "gpu:h100:2(IDX:0-1)", &trc) == 0 && trc == 0);
    CHECK(fake.describe_calls == 1);
    CHECK_STR(fake.env_tags, "rollout,train,critic");
    CHECK_STR(fake.env_source, "map");
    CHECK(run_step(av, 1, "auto", "t4", "gpu:t4:1(IDX:0)", &trc) == 0 && trc == 0);
    CHECK_STR(fake.env_tags, "rollout");
    CHECK_STR(fake.env_source, "map");
    CHECK(run_step(av, 1, "rollout,train", "h100", NULL, &trc) == 0 && trc == 0);
    CHECK_STR(fake.env_tags, "rollout,train");
    CHECK_STR(fake.env_source, "option");
    CHECK(run_step(av, 1, "auto", "cpu_only", NULL, &trc) == 0 && trc == 0);
    CHECK_STR(fake.env_tags, "rollout");
    CHECK_STR(fake.env_source, "default");
    char* def[] = {map_arg(g_map_path), "default=critic"};
    CHECK(run_step(def, 2, "auto", "cpu_only", NULL, &trc) == 0 && trc == 0);
    CHECK_STR(fake.env_tags, "critic");
    CHECK_STR(fake.env_source, "default");
    char* only_def[] = {"default=rollout,train"};
    CHECK(run_step(only_def, 1, "train", "anything", NULL, &trc) == 0 && trc == 0);
    CHECK_STR(fake.env_tags, "train");
}

static void test_remote_failures(void) {
    char* av[] = {map_arg(g_map_path)};
    int trc;
    /* empty intersection: user_init succeeds (never drain), task_init fails naming node and tags */
    fake_reset(S_CTX_REMOTE);
    CHECK(run_step(av, 1, "train", "t4", "gpu:t4:1(IDX:0)", &trc) == 0);
    CHECK(trc == -1);
    CHECK_HAS(fake.last_error, "node node1");
    CHECK_HAS(fake.last_error, "gives tags 'rollout' but --rl-tags=train allows only 'train'");
    CHECK(fake.setenv_calls == 0);
    /* broken map on the node: fails the task with file:line, no RPC made */
    char* bad[] = {map_arg(g_bad_map)};
    CHECK(run_step(bad, 1, "auto", "h100", NULL, &trc) == 0 && trc == -1);
    CHECK(fake.describe_calls == 0);
    CHECK_HAS(fake.last_error, ":3: unknown condition");
    char* missing[] = {"map=/nonexistent/tagflow.map"};
    CHECK(run_step(missing, 1, "auto", "h100", NULL, &trc) == 0 && trc == -1);
    CHECK_HAS(fake.last_error, "/nonexistent/tagflow.map: cannot open tag map");
    char* badargs[] = {"map=relative.map"};
    CHECK(run_step(badargs, 1, "auto", "h100", NULL, &trc) == 0 && trc == -1);
    CHECK_HAS(fake.last_error, "must be absolute");
    /* a value the client should have refused */
    CHECK(run_init(S_CTX_REMOTE, 1, av) == 0);
    CHECK(fake.opt->cb(0, "bogus", 1) == 0); /* never fail in slurmstepd's option parsing */
    CHECK(slurm_spank_init_post_opt(NULL, 1, av) == 0);
    CHECK(slurm_spank_user_init(NULL, 1, av) == 0);
    CHECK(slurm_spank_task_init(NULL, 1, av) == -1);
    CHECK_HAS(fake.last_error, "invalid --rl-tags value");
    CHECK(fake.describe_calls == 0);
    slurm_spank_exit(NULL, 1, av);
    /* slurmctld unreachable */
    CHECK(run_init(S_CTX_REMOTE, 1, av) == 0);
    fake.describe_fails = 1;
    CHECK(fake.opt->cb(0, "auto", 1) == 0);
    CHECK(slurm_spank_init_post_opt(NULL, 1, av) == 0);
    CHECK(slurm_spank_user_init(NULL, 1, av) == 0);
    CHECK(slurm_spank_task_init(NULL, 1, av) == -1);
    CHECK_HAS(fake.last_error, "cannot read node and job information: slurm_load_job(42)");
    slurm_spank_exit(NULL, 1, av);
    /* no rule and no default */
    char tmpl[] = "/tmp/tf_nodefXXXXXX";
    int fd = mkstemp(tmpl);
    if (fd >= 0) {
        const char* text = "rule feature=h100 -> train\n";
        CHECK(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
        close(fd);
        char* nd[] = {map_arg(tmpl)};
        CHECK(run_step(nd, 1, "auto", "cpu_only", NULL, &trc) == 0 && trc == -1);
        CHECK_HAS(fake.last_error,
                  "node node1 (features=cpu_only gres=(none)): no tag-map rule matches and there is no default");
        unlink(tmpl);
    }
}

static void test_slurmd(void) {
    char* bad[] = {map_arg(g_bad_map)};
    CHECK(run_init(S_CTX_SLURMD, 1, bad) == 0); /* slurmd keeps running */
    CHECK(fake.opt == NULL);
    CHECK(fake.errors == 1);
    CHECK_HAS(fake.last_error, "jobs using --rl-tags will fail on this node");
    slurm_spank_exit(NULL, 1, bad);
    char* av[] = {map_arg(g_map_path)};
    CHECK(run_init(S_CTX_SLURMD, 1, av) == 0 && fake.errors == 0);
    slurm_spank_exit(NULL, 1, av);
    CHECK(run_init(S_CTX_JOB_SCRIPT, 1, bad) == 0 && fake.errors == 0 && fake.opt == NULL);
}

int main(int argc, char** argv) {
    static const struct tf_test_group groups[] = {
        {"client_ok", test_client_ok},
        {"client_bad_value", test_client_bad_value},
        {"client_bad_args", test_client_bad_args},
        {"client_bad_map", test_client_bad_map},
        {"remote_opt_out", test_remote_opt_out},
        {"remote_tags", test_remote_tags},
        {"remote_failures", test_remote_failures},
        {"slurmd", test_slurmd},
    };
    snprintf(g_map_path, sizeof(g_map_path), "%s/share/tagflow.map", TAGFLOW_SOURCE_DIR);
    snprintf(g_bad_map, sizeof(g_bad_map), "/tmp/tf_badmap_%ld.map", (long)getpid());
    FILE* f = fopen(g_bad_map, "w");
    if (f == NULL) return 2;
    fputs("# broken on purpose\nhardware h100 compute=989 membw=3.35\nrule colour=red -> rollout\n", f);
    fclose(f);
    int rc = tf_test_main(argc, argv, groups, (int)(sizeof(groups) / sizeof(groups[0])));
    unlink(g_bad_map);
    return rc;
}
