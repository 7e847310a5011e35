/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tagflow-mapcheck: validate a tag map with the plugin's own parser and show
 * what each hardware line and rule gives; optionally evaluate one node as the
 * plugin would (--features, --gres, --default, --rl-tags).
 * Exit: 0 map valid, 1 map invalid or unreadable, 2 bad usage. Does not talk to SLURM.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tagmap.h"

static void usage(FILE* f) {
    fprintf(f,
            "usage: tagflow-mapcheck [--default=TAGS|none] [--features=LIST] [--gres=GRES]\n"
            "                        [--rl-tags=LIST] FILE\n"
            "Checks a tagflow tag map and prints the tags each hardware line and rule gives.\n"
            "With --features and/or --gres, also evaluates one node as spank_tagflow.so would:\n"
            "  --features=h100,nvlink   the node's active features\n"
            "  --gres=gpu:h100:2        GRES the job holds on the node (as in scontrol show job -d)\n"
            "  --default=TAGS|none      the plugstack default= argument\n"
            "  --rl-tags=LIST           the job's --rl-tags (default auto)\n"
            "Exit status: 0 valid, 1 invalid or unreadable, 2 bad usage.\n");
}

static void fmt_cond(const struct tf_cond* c, char* buf, size_t len) {
    switch (c->kind) {
        case TF_COND_ANY: snprintf(buf, len, "*"); break;
        case TF_COND_FEATURE: snprintf(buf, len, "feature=%s", c->pattern); break;
        case TF_COND_HARDWARE: snprintf(buf, len, "hardware=%s", c->pattern); break;
        case TF_COND_GRES:
            snprintf(buf, len, "gres=%s%s%s:%lu", c->gres_name, c->pattern[0] ? ":" : "", c->pattern, c->count);
            break;
        case TF_COND_SCORE_GE: snprintf(buf, len, "score>=%g", c->value); break;
        case TF_COND_SCORE_LT: snprintf(buf, len, "score<%g", c->value); break;
    }
}

static void print_map(const struct tf_map* map) {
    char tags[TF_TAGS_STR_LEN];

    printf("%s: OK: %d hardware line(s), %d rule(s), rules combine by first match\n", map->file, map->nhw, map->nrule);
    printf("score = 0.6*compute/%s + 0.4*membw/%s; thresholds%s:", map->has_normalize ? "ref" : "max",
           map->has_normalize ? "ref" : "max", map->custom_tiers ? "" : " (SeamlessFlow defaults)");
    for (int i = 0; i < map->ntier; i++) {
        tf_tags_format(map->tier[i].tags, tags, sizeof(tags));
        printf(" >=%g %s%s", map->tier[i].min, tags, i + 1 < map->ntier ? ";" : "");
    }
    printf("\n");
    for (int i = 0; i < map->nhw; i++) {
        double s = tf_map_hw_score(map, i);
        unsigned t = tf_map_tier_tags(map, s);
        tf_tags_format(t, tags, sizeof(tags));
        printf("%s:%d: hardware %-10s score %.3f -> %s\n", map->file, map->hw[i].line, map->hw[i].name, s,
               t ? tags : "(no threshold applies)");
    }
    for (int r = 0; r < map->nrule; r++) {
        const struct tf_rule* rule = &map->rule[r];
        char conds[512] = "";
        size_t off = 0;
        for (int i = 0; i < rule->ncond; i++) {
            char c[160];
            fmt_cond(&rule->cond[i], c, sizeof(c));
            int w = snprintf(conds + off, sizeof(conds) - off, "%s%s", i ? " " : "", c);
            if (w > 0 && (size_t)w < sizeof(conds) - off) off += (size_t)w;
        }
        tf_tags_format(rule->tags, tags, sizeof(tags));
        printf("%s:%d: rule %s -> %s\n", map->file, rule->line, conds,
               rule->use_score ? "score (tags of the node's hardware score)" : tags);
    }
    if (map->has_default) {
        tf_tags_format(map->default_tags, tags, sizeof(tags));
        printf("default (when no rule matches): %s (plugstack default= overrides it)\n",
               map->default_tags ? tags : "none");
    } else {
        printf("default (when no rule matches): from plugstack default=, else none\n");
    }
}

int main(int argc, char** argv) {
    struct tf_args args;
    struct tf_node node;
    struct tf_result res;
    struct tf_map* map;
    char err[TF_ERR_LEN];
    const char* file = NULL;
    const char* features = NULL;
    const char* gres = NULL;
    unsigned requested = TF_TAG_ALL;
    const char* rl = "auto";
    int open_errno;

    memset(&args, 0, sizeof(args));
    for (int i = 1; i < argc; i++) {
        const char* a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        } else if (strncmp(a, "--default=", 10) == 0) {
            if (tf_tags_parse(a + 10, 0, 1, &args.default_tags, err, sizeof(err)) != 0) {
                fprintf(stderr, "tagflow-mapcheck: --default: %s\n", err);
                return 2;
            }
            args.has_default = 1;
        } else if (strncmp(a, "--rl-tags=", 10) == 0) {
            if (tf_tags_parse(a + 10, 1, 0, &requested, err, sizeof(err)) != 0) {
                fprintf(stderr, "tagflow-mapcheck: --rl-tags: %s\n", err);
                return 2;
            }
            rl = a + 10;
        } else if (strncmp(a, "--features=", 11) == 0) {
            features = a + 11;
        } else if (strncmp(a, "--gres=", 7) == 0) {
            gres = a + 7;
        } else if (a[0] == '-' && a[1] != '\0') {
            fprintf(stderr, "tagflow-mapcheck: unknown option '%s' (see --help)\n", a);
            return 2;
        } else if (file == NULL) {
            file = a;
        } else {
            fprintf(stderr, "tagflow-mapcheck: only one FILE is accepted (see --help)\n");
            return 2;
        }
    }
    if (file == NULL) {
        fprintf(stderr, "tagflow-mapcheck: missing FILE (see --help)\n");
        return 2;
    }
    map = malloc(sizeof(*map));
    if (map == NULL) {
        fprintf(stderr, "tagflow-mapcheck: out of memory\n");
        return 1;
    }
    if (tf_map_load(map, file, &open_errno, err, sizeof(err)) != 0) {
        fprintf(stderr, "tagflow-mapcheck: %s\n", err);
        free(map);
        return 1;
    }
    print_map(map);

    if (features != NULL || gres != NULL) {
        char desc[TF_ERR_LEN];
        char tags[TF_TAGS_STR_LEN];
        char maptags[TF_TAGS_STR_LEN];

        tf_node_init(&node, "node");
        if (tf_node_add_features(&node, features, err, sizeof(err)) != 0 ||
            tf_node_add_gres(&node, gres, err, sizeof(err)) != 0) {
            fprintf(stderr, "tagflow-mapcheck: %s\n", err);
            free(map);
            return 2;
        }
        tf_evaluate(map, &args, &node, requested, &res);
        tf_node_describe(&node, desc, sizeof(desc));
        tf_tags_format(res.map_tags, maptags, sizeof(maptags));
        tf_tags_format(res.tags, tags, sizeof(tags));
        if (res.hw >= 0) printf("node %s: hardware %s, score %.3f\n", desc, map->hw[res.hw].name, res.score);
        else printf("node %s: hardware not in the table (no score)\n", desc);
        if (res.rule >= 0) printf("node: %s:%d matches first -> %s\n", map->file, map->rule[res.rule].line, maptags);
        else
            printf("node: no rule matches -> default %s\n",
                   res.has_default ? (res.map_tags ? maptags : "none") : "(none set)");
        if (res.tags)
            printf("TAGFLOW_TAGS=%s TAGFLOW_TAG_SOURCE=%s (with --rl-tags=%s)\n", tags, tf_source_name(res.source), rl);
        else printf("no tag in common with --rl-tags=%s: the job's tasks would fail on this node\n", rl);
    }
    free(map);
    return 0;
}
