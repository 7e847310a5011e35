/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_tagmap_node: libFuzzer target for the other inputs of slurm_plugin/tagmap*.c: a
 * node's feature list and GRES detail string (from SLURM), a --rl-tags list and the
 * plugstack arguments. Input lines: 1 features, 2 GRES detail, 3 tag list, 4.. plugstack
 * arguments (at most 8). Each line becomes a C string (it ends at a NUL byte).
 * Checks, beyond "no crash, no UB, no leak":
 *   - errors are one printable, NUL-terminated line, also in a 7-byte error buffer;
 *   - features: exactly the non-empty comma items, each within TF_NAME_MAX;
 *   - GRES: names non-empty without ':' or '(', counts 1..1000000, and the GRES part of
 *     tf_node_describe parses back to the same entries;
 *   - tags: the flags only add "auto"/"none"; a parsed list is a permutation of its canonical
 *     form (tf_tags_format), which parses back to the same mask; tf_tags_format never writes
 *     past a small buffer;
 *   - plugstack arguments: a parsed line has map= (absolute, as given) or default=;
 *   - the node evaluated against the shipped example map gives consistent results.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_check.h"
#include "tagmap.h"

#define MAX_ARGS 8

/* share/tagflow.map without its comments */
static const char kExampleMap[] =
    "hardware h100 compute=989 membw=3.35\n"
    "hardware a100 compute=312 membw=2.04\n"
    "hardware t4   compute=65  membw=0.32\n"
    "rule feature=rollout_only -> rollout\n"
    "rule gres=gpu:a100:2 -> rollout,train\n"
    "rule hardware=a100 -> rollout,critic\n"
    "rule feature=n* gres=*:t?:3 -> critic\n"
    "rule score>=0.9 feature=big -> train\n"
    "rule * -> score\n"
    "default rollout\n";

static struct tf_map example;
static int example_ok;

static int printable_line(const char* s) {
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || (unsigned char)*s >= 0x7f) return 0;
    return 1;
}

static void check_describe_bounds(const struct tf_node* n) {
    char full[4096];
    tf_node_describe(n, full, sizeof(full));
    for (size_t len = 1; len < 24; len += 5) {
        char* b = malloc(len);
        tf_node_describe(n, b, len);
        FUZZ_CHECK(memchr(b, '\0', len) != NULL && strncmp(b, full, strlen(b)) == 0, "describe into %zu bytes", len);
        free(b);
    }
}

static void check_features(const char* csv) {
    struct tf_node n, n_small;
    char* err = malloc(TF_ERR_LEN);
    char* small = malloc(7);

    small[0] = '\0';
    tf_node_init(&n, "node1");
    tf_node_init(&n_small, "node1");
    int rc = tf_node_add_features(&n, csv, err, TF_ERR_LEN);
    int rc_small = tf_node_add_features(&n_small, csv, small, 7);
    FUZZ_CHECK(rc == rc_small && memchr(small, '\0', 7), "7-byte error buffer changes the result");
    if (rc != 0) {
        FUZZ_CHECK(printable_line(err) && err[0], "feature error: %s", err);
    } else {
        /* the features are the non-empty comma items, in order */
        const char* p = csv;
        int k = 0;
        for (;;) {
            const char* comma = strchr(p, ',');
            size_t len = comma ? (size_t)(comma - p) : strlen(p);
            if (len > 0) {
                FUZZ_CHECK(k < n.nfeatures && strlen(n.features[k]) == len && memcmp(n.features[k], p, len) == 0,
                           "feature %d", k);
                k++;
            }
            if (!comma) break;
            p = comma + 1;
        }
        FUZZ_CHECK(k == n.nfeatures && n.nfeatures <= TF_MAX_FEATURES, "%d features, %d items", n.nfeatures, k);
        check_describe_bounds(&n);
    }
    free(err);
    free(small);
}

static void check_gres(const char* detail, struct tf_node* out) {
    struct tf_node n, back;
    char* err = malloc(TF_ERR_LEN);
    char* small = malloc(7);
    char desc[4096];

    small[0] = '\0';
    tf_node_init(&n, "node1");
    int rc = tf_node_add_gres(&n, detail, err, TF_ERR_LEN);
    tf_node_init(&back, "node1");
    FUZZ_CHECK(tf_node_add_gres(&back, detail, small, 7) == rc && memchr(small, '\0', 7),
               "7-byte error buffer changes the result");
    if (rc != 0) {
        FUZZ_CHECK(printable_line(err) && err[0], "GRES error: %s", err);
        tf_node_init(out, "node1");
    } else {
        FUZZ_CHECK(n.ngres >= 0 && n.ngres <= TF_MAX_GRES, "ngres %d", n.ngres);
        for (int i = 0; i < n.ngres; i++) {
            const struct tf_gres* g = &n.gres[i];
            FUZZ_CHECK(g->name[0] != '\0', "GRES %d has an empty name (detail '%s')", i, detail);
            FUZZ_CHECK(memchr(g->name, '\0', sizeof(g->name)) && !strpbrk(g->name, ":("), "GRES name");
            FUZZ_CHECK(memchr(g->type, '\0', sizeof(g->type)) && !strpbrk(g->type, ":("), "GRES type");
            FUZZ_CHECK(g->count >= 1 && g->count <= 1000000ul, "GRES count %lu", g->count);
        }
        /* the GRES part of the description parses back to the same entries */
        tf_node_describe(&n, desc, sizeof(desc));
        const char* gp = strstr(desc, " gres=");
        FUZZ_CHECK(gp != NULL, "description without gres=: %s", desc);
        gp += 6;
        tf_node_init(&back, "node1");
        if (strcmp(gp, "(none)") != 0) {
            FUZZ_CHECK(tf_node_add_gres(&back, gp, err, TF_ERR_LEN) == 0,
                       "described GRES '%s' does not parse again: %s", gp, err);
        }
        FUZZ_CHECK(back.ngres == n.ngres, "described GRES '%s': %d entries, not %d", gp, back.ngres, n.ngres);
        for (int i = 0; i < n.ngres; i++)
            FUZZ_CHECK(strcmp(back.gres[i].name, n.gres[i].name) == 0 &&
                           strcmp(back.gres[i].type, n.gres[i].type) == 0 && back.gres[i].count == n.gres[i].count,
                       "described GRES '%s': entry %d differs", gp, i);
        check_describe_bounds(&n);
        *out = n;
    }
    free(err);
    free(small);
}

static void check_tags(const char* s) {
    unsigned mask[4] = {0, 0, 0, 0};
    int rc[4];

    for (int f = 0; f < 4; f++) {
        char* err = malloc(TF_ERR_LEN);
        mask[f] = 0xdead;
        rc[f] = tf_tags_parse(s, f & 1, (f >> 1) & 1, &mask[f], err, TF_ERR_LEN);
        if (rc[f] != 0) FUZZ_CHECK(printable_line(err) && err[0], "tag error: %s", err);
        free(err);
    }
    int is_auto = strcmp(s, "auto") == 0, is_none = strcmp(s, "none") == 0;
    for (int f = 0; f < 4; f++) {
        if (is_auto && (f & 1)) {
            FUZZ_CHECK(rc[f] == 0 && mask[f] == TF_TAG_ALL, "auto");
        } else if (is_none && (f & 2)) {
            FUZZ_CHECK(rc[f] == 0 && mask[f] == 0, "none");
        } else {
            FUZZ_CHECK(rc[f] == rc[0] && (rc[f] != 0 || mask[f] == mask[0]), "flags change '%s'", s);
        }
    }
    if (rc[0] == 0) {
        char canon[TF_TAGS_STR_LEN];
        unsigned again = 0;
        char err[TF_ERR_LEN];
        FUZZ_CHECK(mask[0] != 0 && (mask[0] & ~TF_TAG_ALL) == 0, "mask %#x", mask[0]);
        tf_tags_format(mask[0], canon, sizeof(canon));
        FUZZ_CHECK(strlen(canon) == strlen(s), "'%s' is not a permutation of '%s'", s, canon);
        FUZZ_CHECK(tf_tags_parse(canon, 0, 0, &again, err, sizeof(err)) == 0 && again == mask[0],
                   "canonical '%s' does not parse back", canon);
        for (size_t len = 1; len <= strlen(canon) + 1; len++) {
            char* b = malloc(len);
            tf_tags_format(mask[0], b, len);
            FUZZ_CHECK(memchr(b, '\0', len) && strncmp(b, canon, strlen(b)) == 0, "format into %zu", len);
            free(b);
        }
    }
}

static void check_args(int ac, char** av) {
    struct tf_args a;
    char* err = malloc(TF_ERR_LEN);
    int rc = tf_args_parse(ac, av, &a, err, TF_ERR_LEN);

    if (rc != 0) {
        FUZZ_CHECK(printable_line(err) && err[0], "argument error: %s", err);
    } else {
        FUZZ_CHECK(a.map[0] == '/' || (a.map[0] == '\0' && a.has_default), "args without map or default");
        FUZZ_CHECK((a.default_tags & ~TF_TAG_ALL) == 0 && (a.has_default || a.default_tags == 0), "default tags");
        int seen = 0;
        for (int i = 0; i < ac; i++)
            if (strncmp(av[i], "map=", 4) == 0) {
                FUZZ_CHECK(strcmp(av[i] + 4, a.map) == 0, "map path changed");
                seen = 1;
            }
        FUZZ_CHECK(seen == (a.map[0] != '\0'), "map= seen %d", seen);
    }
    free(err);
}

static void check_eval(const struct tf_node* node, const char* requested) {
    char err[TF_ERR_LEN];
    unsigned req = TF_TAG_ALL;
    struct tf_result res;

    if (!example_ok) return;
    if (tf_tags_parse(requested, 1, 0, &req, err, sizeof(err)) != 0) req = TF_TAG_ALL;
    unsigned tags = tf_evaluate(&example, NULL, node, req, &res);
    FUZZ_CHECK(tags == res.tags && tags == (res.map_tags & req), "tags");
    FUZZ_CHECK(res.rule >= -1 && res.rule < example.nrule && res.hw >= -1 && res.hw < example.nhw, "indices");
    if (res.rule < 0) FUZZ_CHECK(res.from_default && res.has_default && res.map_tags == TF_TAG_ROLLOUT, "default");
    else FUZZ_CHECK(res.map_tags != 0 && !res.from_default, "matched rule");
    /* a node with a hardware entry always matches by the final "rule * -> score" at the latest */
    if (res.hw >= 0) FUZZ_CHECK(res.rule >= 0, "known hardware without a rule");
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    char* line[3 + MAX_ARGS];
    int n = 0;
    size_t pos = 0;

    if (!example_ok) {
        char err[TF_ERR_LEN];
        example_ok = tf_map_parse(&example, "example.map", kExampleMap, strlen(kExampleMap), err, sizeof(err)) == 0;
        FUZZ_CHECK(example_ok, "example map: %s", err);
    }
    while (n < 3 + MAX_ARGS && (pos < size || n < 3)) {
        const uint8_t* nl = pos < size ? memchr(data + pos, '\n', size - pos) : NULL;
        size_t len = pos < size ? (nl ? (size_t)(nl - (data + pos)) : size - pos) : 0;
        line[n++] = strndup((const char*)data + (pos < size ? pos : 0), len);
        pos += len + 1;
    }
    check_features(line[0]);
    struct tf_node node;
    check_gres(line[1], &node);
    check_tags(line[2]);
    check_args(n - 3, line + 3);
    if (tf_node_add_features(&node, line[0], NULL, 0) == 0) check_eval(&node, line[2]);
    for (int i = 0; i < n; i++) free(line[i]);
    return 0;
}
