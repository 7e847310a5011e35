/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_spank_hostile: spank_tagflow.c (which runs as root in slurmstepd) fed arbitrary user
 * strings as --rl-tags, against tests/spank/fake_spank.c. For every hostile value, in the
 * client (sbatch/srun, as the user) the option is refused with one printable line, and in
 * slurmstepd (remote, as root) nothing is asked or exported and only task_init fails, with one
 * printable line: no crash, no format-string interpretation (the fake logs with vsnprintf,
 * and glibc's fortify check aborts on a %n in a writable format), no raw control bytes, bounded.
 * Also hostile plugstack arguments and tag-map files (very long, binary, a directory, /dev/zero).
 * Does not cover the parser's grammar (tests/spank) or random inputs (tests/fuzz).
 * Groups: rl_tags, plugstack, map_files (ctest Hostile.spank.<group>).
 */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fake_spank.h"
#include "tf_test.h"

static char g_map_arg[1100];

/* one line of printable ASCII (no control bytes, no bytes >= 0x80), not cut off */
static int printable_line(const char* s) {
    size_t n = strlen(s);
    if (n == 0 || n >= sizeof(fake.last_error) - 1) return 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] > 0x7e) return 0;
    return 1;
}

#define CHECK_LINE(s)                                                                     \
    do {                                                                                  \
        CHECK(printable_line(s));                                                         \
        if (!printable_line(s)) fprintf(stderr, "  not one printable line: \"%s\"\n", s); \
    } while (0)

static char* long_value(size_t n, const char* unit) {
    char* s = malloc(n + 1);
    size_t u = strlen(unit);
    if (s == NULL) abort();
    for (size_t i = 0; i < n; i++) s[i] = unit[i % u];
    s[n] = '\0';
    return s;
}

static void hostile_value(const char* v) {
    char* av[] = {g_map_arg};

    /* client: refused, one line */
    fake_reset(S_CTX_ALLOCATOR);
    CHECK(slurm_spank_init(NULL, 1, av) == 0 && fake.opt != NULL);
    if (fake.opt == NULL) return;
    CHECK(fake.opt->cb(0, v, 0) == -1);
    CHECK(fake.errors == 1);
    CHECK_HAS(fake.last_error, "tagflow: invalid --rl-tags value: ");
    CHECK_LINE(fake.last_error);
    CHECK(slurm_spank_init_post_opt(NULL, 1, av) == 0); /* nothing accepted: a plain job */
    CHECK(fake.setenv_calls == 0);
    slurm_spank_exit(NULL, 1, av);

    /* slurmstepd (root): never fails before the task, never asks slurmctld, never exports */
    fake_reset(S_CTX_REMOTE);
    CHECK(slurm_spank_init(NULL, 1, av) == 0 && fake.opt != NULL);
    fake.node_features = "h100";
    fake.node_gres = "gpu:h100:2(IDX:0-1)";
    CHECK(fake.opt->cb(0, v, 1) == 0);
    CHECK(slurm_spank_init_post_opt(NULL, 1, av) == 0);
    CHECK(slurm_spank_user_init(NULL, 1, av) == 0);
    CHECK(fake.errors == 0);
    CHECK(slurm_spank_task_init(NULL, 1, av) == -1);
    CHECK(fake.errors == 1);
    CHECK_HAS(fake.last_error, "tagflow: invalid --rl-tags value: ");
    CHECK_LINE(fake.last_error);
    CHECK(fake.describe_calls == 0 && fake.setenv_calls == 0);
    slurm_spank_exit(NULL, 1, av);
}

static void test_rl_tags(void) {
    static const char* values[] = {
        "rollout\ntrain",   "rollout\r\n",
        "rollout=train",    "0=rollout;1=train",
        "rollout;train",    "rollout train",
        " rollout",         "rollout,",
        "\xff\xfe",         "roll\xc3\x28out",
        "\xe2\x82",         "rol\x1b[31mlout",
        "%n%n%n%n",         "%s%s%s%s%s%s%s%s",
        "%999999999d%n",    "%x%x%x%x%p%p",
        "rollout,%n",       "auto,%s",
        "\x01\x02\x03",     "train,train,%n",
        "$(reboot)",        "`id`",
        "../../etc/passwd", "TAGFLOW_TAGS=critic",
    };
    for (size_t i = 0; i < sizeof(values) / sizeof(values[0]); i++) hostile_value(values[i]);
    /* long: just over the limit, 64 KiB, 1 MiB; with newlines and %n inside */
    size_t lens[] = {129, 4096, 65536, 1 << 20};
    const char* units[] = {"r", "rollout,", "%n\n", "\xff"};
    for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++)
        for (size_t j = 0; j < sizeof(units) / sizeof(units[0]); j++) {
            char* v = long_value(lens[i], units[j]);
            hostile_value(v);
            free(v);
        }
    /* still works after all that: a good value in the same process */
    char* av[] = {g_map_arg};
    fake_reset(S_CTX_REMOTE);
    CHECK(slurm_spank_init(NULL, 1, av) == 0);
    fake.node_features = "h100";
    fake.node_gres = "gpu:h100:2(IDX:0-1)";
    CHECK(fake.opt->cb(0, "rollout,train", 1) == 0);
    CHECK(slurm_spank_init_post_opt(NULL, 1, av) == 0 && slurm_spank_user_init(NULL, 1, av) == 0);
    CHECK(slurm_spank_task_init(NULL, 1, av) == 0);
    CHECK_STR(fake.env_tags, "rollout,train");
    slurm_spank_exit(NULL, 1, av);
}

/* hostile plugstack arguments (root-written, but must still fail cleanly, never crash) */
static void test_plugstack(void) {
    char* big = long_value(1 << 16, "x");
    char* bigmap = long_value(4096, "/a");
    char bigmap_arg[4200];
    snprintf(bigmap_arg, sizeof(bigmap_arg), "map=%s", bigmap);
    char* cases[][2] = {
        {"map=relative.map", NULL},
        {"default=%n%s%s", NULL},
        {"default=rollout\ntrain", NULL},
        {"map=", NULL},
        {"bogus=1", NULL},
        {big, NULL},
        {bigmap_arg, NULL},
        {"default=\xff", NULL},
        {g_map_arg, "map=/etc/other.map"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int ac = cases[i][1] ? 2 : 1;
        /* client of a tagflow job: refused with one line; the plugin's init never fails */
        fake_reset(S_CTX_ALLOCATOR);
        CHECK(slurm_spank_init(NULL, ac, cases[i]) == 0);
        if (fake.opt == NULL) continue;
        CHECK(fake.opt->cb(0, "auto", 0) == 0);
        CHECK(slurm_spank_init_post_opt(NULL, ac, cases[i]) == -1);
        CHECK_HAS(fake.last_error, "tagflow: bad plugstack.conf line");
        CHECK_LINE(fake.last_error);
        slurm_spank_exit(NULL, ac, cases[i]);
        /* a job without --rl-tags: untouched */
        fake_reset(S_CTX_REMOTE);
        CHECK(slurm_spank_init(NULL, ac, cases[i]) == 0);
        CHECK(slurm_spank_init_post_opt(NULL, ac, cases[i]) == 0);
        CHECK(slurm_spank_user_init(NULL, ac, cases[i]) == 0);
        CHECK(slurm_spank_task_init(NULL, ac, cases[i]) == 0);
        CHECK(fake.errors == 0 && fake.setenv_calls == 0 && fake.describe_calls == 0);
        slurm_spank_exit(NULL, ac, cases[i]);
    }
    free(big);
    free(bigmap);
}

/* hostile map files: the task fails with one line naming the file, nothing exported */
static void map_case(const char* path, const char* needle) {
    char arg[1100];
    snprintf(arg, sizeof(arg), "map=%s", path);
    char* av[] = {arg};
    fake_reset(S_CTX_REMOTE);
    CHECK(slurm_spank_init(NULL, 1, av) == 0);
    fake.node_features = "h100";
    CHECK(fake.opt->cb(0, "auto", 1) == 0);
    CHECK(slurm_spank_init_post_opt(NULL, 1, av) == 0 && slurm_spank_user_init(NULL, 1, av) == 0);
    CHECK(slurm_spank_task_init(NULL, 1, av) == -1);
    CHECK_HAS(fake.last_error, path);
    CHECK_HAS(fake.last_error, needle);
    CHECK_LINE(fake.last_error);
    CHECK(fake.setenv_calls == 0);
    slurm_spank_exit(NULL, 1, av);
}

static void write_file(const char* path, const char* data, size_t n) {
    FILE* f = fopen(path, "wb");
    if (f == NULL) abort();
    CHECK(fwrite(data, 1, n, f) == n);
    fclose(f);
}

static void test_map_files(void) {
    char path[256];
    snprintf(path, sizeof(path), "/tmp/tf_hostile_%ld.map", (long)getpid());
    /* binary garbage with NUL bytes and invalid UTF-8 */
    static const char bin[] = "rule \xff\xfe -> rollout\n\0\0\x01hardware \x80\n";
    write_file(path, bin, sizeof(bin) - 1);
    map_case(path, ":1:");
    /* a line far beyond the line limit, control bytes and format specifiers in a rule */
    char* line = long_value(8192, "%n");
    write_file(path, line, strlen(line));
    map_case(path, "longer than");
    free(line);
    static const char fmt[] = "rule feature=%n%s%s%s\x1b[2J -> rollout\n";
    write_file(path, fmt, sizeof(fmt) - 1);
    map_case(path, ":1:");
    /* more than the size limit (a few MiB) */
    char* huge = long_value(3u << 20, "# padding line of a huge file\n");
    write_file(path, huge, strlen(huge));
    map_case(path, "larger than");
    free(huge);
    unlink(path);
    map_case("/tmp", "cannot read tag map");
    map_case("/dev/zero", "larger than");
}

int main(int argc, char** argv) {
    static const struct tf_test_group groups[] = {
        {"rl_tags", test_rl_tags},
        {"plugstack", test_plugstack},
        {"map_files", test_map_files},
    };
    snprintf(g_map_arg, sizeof(g_map_arg), "map=%s/share/tagflow.map", TAGFLOW_SOURCE_DIR);
    return tf_test_main(argc, argv, groups, (int)(sizeof(groups) / sizeof(groups[0])));
}
