/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_tagmap: unit tests of slurm_plugin/tagmap.c without SLURM: tag lists,
 * plugstack arguments, every malformed map input, node descriptions (GRES
 * detail strings) and rule evaluation. Groups are run one per ctest (Spank.<group>).
 */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tagmap.h"
#include "tf_test.h"

static struct tf_map g_map;
static char g_err[TF_ERR_LEN];

static int parse(const char* text) {
    g_err[0] = '\0';
    return tf_map_parse(&g_map, "t.map", text, strlen(text), g_err, sizeof(g_err));
}

/* Map text that must fail with a message containing `expect` (which includes the line). */
static void expect_map_error(const char* text, const char* expect) {
    int rc = parse(text);
    CHECK(rc == -1);
    CHECK_HAS(g_err, expect);
}

static const char* tags_str(unsigned m) {
    static char buf[4][TF_TAGS_STR_LEN];
    static int k;
    k = (k + 1) % 4;
    tf_tags_format(m, buf[k], sizeof(buf[k]));
    return buf[k];
}

/* ---- tag lists ---- */
static void test_tags(void) {
    unsigned m = 0;
    char err[TF_ERR_LEN];
    char longlist[300];

    CHECK(tf_tags_parse("rollout,train", 0, 0, &m, err, sizeof(err)) == 0);
    CHECK(m == (TF_TAG_ROLLOUT | TF_TAG_TRAIN));
    CHECK(tf_tags_parse("critic,rollout", 0, 0, &m, err, sizeof(err)) == 0);
    CHECK_STR(tags_str(m), "rollout,critic"); /* canonical order on output */
    CHECK(tf_tags_parse("rollout,train,critic", 0, 0, &m, err, sizeof(err)) == 0 && m == TF_TAG_ALL);
    CHECK(tf_tags_parse("auto", 1, 0, &m, err, sizeof(err)) == 0 && m == TF_TAG_ALL);
    CHECK(tf_tags_parse("none", 0, 1, &m, err, sizeof(err)) == 0 && m == 0);
    CHECK_STR(tags_str(0), "");

    CHECK(tf_tags_parse("", 1, 0, &m, err, sizeof(err)) == -1);
    CHECK_HAS(err, "empty tag list");
    CHECK(tf_tags_parse(NULL, 1, 0, &m, err, sizeof(err)) == -1);
    CHECK(tf_tags_parse("bogus", 1, 0, &m, err, sizeof(err)) == -1);
    CHECK_HAS(err, "unknown tag 'bogus' (allowed: rollout,train,critic or auto)");
    CHECK(tf_tags_parse("auto", 0, 0, &m, err, sizeof(err)) == -1);
    CHECK_HAS(err, "unknown tag 'auto'");
    CHECK(tf_tags_parse("rollout,auto", 1, 0, &m, err, sizeof(err)) == -1);
    CHECK_HAS(err, "'auto' must be used alone");
    CHECK(tf_tags_parse("none,train", 0, 1, &m, err, sizeof(err)) == -1);
    CHECK_HAS(err, "'none' must be used alone");
    CHECK(tf_tags_parse("none", 0, 0, &m, err, sizeof(err)) == -1);
    CHECK(tf_tags_parse(",rollout", 0, 0, &m, err, sizeof(err)) == -1);
    CHECK_HAS(err, "empty item");
    CHECK(tf_tags_parse("rollout,", 0, 0, &m, err, sizeof(err)) == -1);
    CHECK_HAS(err, "empty item");
    CHECK(tf_tags_parse("rollout,,train", 0, 0, &m, err, sizeof(err)) == -1);
    CHECK_HAS(err, "empty item");
    CHECK(tf_tags_parse(",", 0, 0, &m, err, sizeof(err)) == -1);
    CHECK(tf_tags_parse("train,train", 0, 0, &m, err, sizeof(err)) == -1);
    CHECK_HAS(err, "tag 'train' given twice");
    CHECK(tf_tags_parse("Rollout", 0, 0, &m, err, sizeof(err)) == -1); /* case-sensitive */
    CHECK(tf_tags_parse("rollout train", 0, 0, &m, err, sizeof(err)) == -1);
    CHECK(tf_tags_parse(" rollout", 0, 0, &m, err, sizeof(err)) == -1);
    memset(longlist, 'a', sizeof(longlist) - 1);
    longlist[sizeof(longlist) - 1] = '\0';
    CHECK(tf_tags_parse(longlist, 1, 0, &m, err, sizeof(err)) == -1);
    CHECK_HAS(err, "too long");
    /* a long unknown tag is clipped in the message, not copied whole */
    memcpy(longlist, "rollout,", 8);
    longlist[100] = '\0';
    CHECK(tf_tags_parse(longlist, 1, 0, &m, err, sizeof(err)) == -1);
    CHECK_HAS(err, "...'");
    CHECK(strlen(err) < 120);
    /* a tiny error buffer is never overrun */
    char tiny[8];
    CHECK(tf_tags_parse("bogus", 1, 0, &m, tiny, sizeof(tiny)) == -1 && strlen(tiny) == 7);
    char fmt[8];
    tf_tags_format(TF_TAG_ALL, fmt, sizeof(fmt)); /* truncated but terminated */
    CHECK(strlen(fmt) < sizeof(fmt));
}

/* ---- plugstack arguments ---- */
static void test_args(void) {
    struct tf_args a;
    char err[TF_ERR_LEN];
    char* ok1[] = {"map=/etc/slurm/tagflow.map"};
    char* ok2[] = {"map=/etc/slurm/tagflow.map", "default=rollout,train"};
    char* ok3[] = {"default=none", "map=/x"};
    char* ok4[] = {"default=critic"};
    char* none[] = {NULL};
    char* empty_map[] = {"map="};
    char* rel_map[] = {"map=tagflow.map"};
    char* twice_map[] = {"map=/a", "map=/b"};
    char* bad_def[] = {"map=/a", "default=gpu"};
    char* empty_def[] = {"map=/a", "default="};
    char* twice_def[] = {"map=/a", "default=rollout", "default=train"};
    char* unknown[] = {"map=/a", "mode=union"};
    char* bare[] = {"/etc/slurm/tagflow.map"};
    char longpath[TF_PATH_MAX + 16];
    char* long_map[] = {longpath};

    CHECK(tf_args_parse(1, ok1, &a, err, sizeof(err)) == 0);
    CHECK_STR(a.map, "/etc/slurm/tagflow.map");
    CHECK(a.has_default == 0);
    CHECK(tf_args_parse(2, ok2, &a, err, sizeof(err)) == 0);
    CHECK(a.has_default == 1 && a.default_tags == (TF_TAG_ROLLOUT | TF_TAG_TRAIN));
    CHECK(tf_args_parse(2, ok3, &a, err, sizeof(err)) == 0);
    CHECK(a.has_default == 1 && a.default_tags == 0);
    CHECK(tf_args_parse(1, ok4, &a, err, sizeof(err)) == 0 && a.map[0] == '\0');

    CHECK(tf_args_parse(0, none, &a, err, sizeof(err)) == -1);
    CHECK_HAS(err, "needs map=FILE");
    CHECK(tf_args_parse(1, empty_map, &a, err, sizeof(err)) == -1);
    CHECK_HAS(err, "map= is empty");
    CHECK(tf_args_parse(1, rel_map, &a, err, sizeof(err)) == -1);
    CHECK_HAS(err, "must be absolute");
    CHECK(tf_args_parse(2, twice_map, &a, err, sizeof(err)) == -1);
    CHECK_HAS(err, "map= given twice");
    CHECK(tf_args_parse(2, bad_def, &a, err, sizeof(err)) == -1);
    CHECK_HAS(err, "default=gpu: unknown tag 'gpu'");
    CHECK(tf_args_parse(2, empty_def, &a, err, sizeof(err)) == -1);
    CHECK_HAS(err, "default=");
    CHECK(tf_args_parse(3, twice_def, &a, err, sizeof(err)) == -1);
    CHECK_HAS(err, "default= given twice");
    CHECK(tf_args_parse(2, unknown, &a, err, sizeof(err)) == -1);
    CHECK_HAS(err, "unknown plugstack argument 'mode=union'");
    CHECK(tf_args_parse(1, bare, &a, err, sizeof(err)) == -1);
    CHECK_HAS(err, "unknown plugstack argument");
    longpath[0] = 'm';
    longpath[1] = 'a';
    longpath[2] = 'p';
    longpath[3] = '=';
    memset(longpath + 4, '/', sizeof(longpath) - 5);
    longpath[sizeof(longpath) - 1] = '\0';
    CHECK(tf_args_parse(1, long_map, &a, err, sizeof(err)) == -1);
    CHECK_HAS(err, "path longer than");
}

/* ---- valid maps ---- */
static void test_map_valid(void) {
    char path[1024];
    int oe = -1;

    /* the shipped example */
    snprintf(path, sizeof(path), "%s/share/tagflow.map", TAGFLOW_SOURCE_DIR);
    CHECK(tf_map_load(&g_map, path, &oe, g_err, sizeof(g_err)) == 0);
    CHECK(oe == 0);
    CHECK(g_map.nhw == 3 && g_map.nrule == 4 && g_map.has_default);
    CHECK(g_map.default_tags == TF_TAG_ROLLOUT);
    CHECK(!g_map.custom_tiers && g_map.ntier == 3);

    /* comments, tabs, CRLF, no final newline, inline comments */
    CHECK(parse("# header\n\n\thardware h100 compute=989 membw=3.35 # inline\r\n"
                "rule\tfeature=h*\t->\trollout,train # x\r\n"
                "rule * -> score") == 0);
    CHECK(g_map.nrule == 2 && g_map.rule[0].line == 4 && g_map.rule[1].line == 5);
    CHECK(g_map.rule[1].use_score);
    CHECK(g_map.nlines == 5);
    /* arrow without spaces */
    CHECK(parse("rule feature=a->rollout\n") == 0);
    CHECK(g_map.rule[0].tags == TF_TAG_ROLLOUT);
    CHECK_STR(g_map.rule[0].cond[0].pattern, "a");

    /* custom thresholds replace the defaults and are kept sorted */
    CHECK(parse("hardware a compute=1 membw=1\nthreshold 0.2 rollout\nthreshold 0.9 train,critic\n"
                "threshold 0.5 rollout,train\nrule * -> score\n") == 0);
    CHECK(g_map.custom_tiers && g_map.ntier == 3);
    CHECK(g_map.tier[0].min > 0.89 && g_map.tier[1].min > 0.49 && g_map.tier[2].min < 0.21);
    CHECK(tf_map_tier_tags(&g_map, 0.1) == 0); /* below every tier: no tags */
    CHECK(tf_map_tier_tags(&g_map, 0.5) == (TF_TAG_ROLLOUT | TF_TAG_TRAIN));
    CHECK(tf_map_tier_tags(&g_map, 1.0) == (TF_TAG_TRAIN | TF_TAG_CRITIC));

    /* the SeamlessFlow score: 0.6*compute + 0.4*membw, normalised by the table maximum */
    CHECK(parse("hardware big compute=100 membw=10\nhardware mid compute=100 membw=5\n"
                "hardware low compute=50 membw=10\nhardware tiny compute=10 membw=1\nrule * -> score\n") == 0);
    CHECK(tf_map_hw_score(&g_map, 0) > 0.999 && tf_map_hw_score(&g_map, 0) < 1.001);
    CHECK(tf_map_tier_tags(&g_map, tf_map_hw_score(&g_map, 0)) == TF_TAG_ALL);
    /* 0.6 + 0.2 = 0.8 exactly: the boundary counts as reached */
    CHECK(tf_map_tier_tags(&g_map, tf_map_hw_score(&g_map, 1)) == TF_TAG_ALL);
    /* 0.3 + 0.4 = 0.7 */
    CHECK(tf_map_tier_tags(&g_map, tf_map_hw_score(&g_map, 2)) == (TF_TAG_ROLLOUT | TF_TAG_TRAIN));
    CHECK(tf_map_tier_tags(&g_map, tf_map_hw_score(&g_map, 3)) == TF_TAG_ROLLOUT);
    /* normalize fixes the reference: adding a bigger GPU does not change others' scores */
    CHECK(parse("normalize compute=200 membw=20\nhardware big compute=100 membw=10\nrule * -> score\n") == 0);
    CHECK(tf_map_hw_score(&g_map, 0) > 0.499 && tf_map_hw_score(&g_map, 0) < 0.501);

    /* every condition kind */
    CHECK(parse("hardware h compute=1 membw=1\n"
                "rule feature=x gres=gpu hardware=h* score>=0.5 -> rollout\n"
                "rule gres=gpu:2 -> train\nrule gres=gpu:h100 -> train\n"
                "rule gres=gpu:h100:3 score<0.2 -> critic\ndefault none\n") == 0);
    CHECK(g_map.rule[0].ncond == 4);
    CHECK(g_map.rule[1].cond[0].count == 2 && g_map.rule[1].cond[0].pattern[0] == '\0');
    CHECK(g_map.rule[2].cond[0].count == 1);
    CHECK_STR(g_map.rule[2].cond[0].pattern, "h100");
    CHECK(g_map.rule[3].cond[0].count == 3);
    CHECK(g_map.rule[3].cond[1].kind == TF_COND_SCORE_LT);
    CHECK(g_map.has_default && g_map.default_tags == 0);
}

/* ---- every malformed input ---- */
static void test_map_errors(void) {
    char buf[8192];
    int oe;

    /* keywords */
    expect_map_error("bogus x\n", "t.map:1: unknown keyword 'bogus'");
    expect_map_error("rules * -> rollout\n", "t.map:1: unknown keyword 'rules'");
    expect_map_error("# c\n\n  \nbogus\n", "t.map:4: unknown keyword"); /* line numbers count comments/blanks */
    expect_map_error("Rule * -> rollout\n", "unknown keyword 'Rule'");
    /* hardware */
    expect_map_error("hardware\n", "t.map:1: 'hardware' needs a name");
    expect_map_error("hardware compute=1 membw=1\n", "needs a name before 'compute=1'");
    expect_map_error("hardware h compute=1\nrule * -> score\n", "t.map:1: hardware 'h' needs membw=");
    expect_map_error("hardware h membw=1\n", "needs compute=");
    expect_map_error("hardware h compute=x membw=1\n", "'compute=x': value must be a positive number");
    expect_map_error("hardware h compute=-1 membw=1\n", "positive number");
    expect_map_error("hardware h compute=0 membw=1\n", "positive number");
    expect_map_error("hardware h compute=1 membw=\n", "positive number");
    expect_map_error("hardware h compute=inf membw=1\n", "positive number");
    expect_map_error("hardware h compute=nan membw=1\n", "positive number");
    expect_map_error("hardware h compute=0x10 membw=1\n", "positive number");
    expect_map_error("hardware h compute=1e999 membw=1\n", "positive number");
    expect_map_error("hardware h compute=1,5 membw=1\n", "positive number");
    expect_map_error("hardware h compute=1 membw=1 speed=2\n", "unknown hardware attribute 'speed=2'");
    expect_map_error("hardware h compute=1 compute=2 membw=1\n", "'compute=' given twice");
    expect_map_error("hardware a compute=1 membw=1\nhardware a compute=2 membw=2\n",
                     "t.map:2: hardware 'a' already defined on line 1");
    snprintf(buf, sizeof(buf), "hardware %070d compute=1 membw=1\n", 7);
    expect_map_error(buf, "hardware name longer than 63");
    buf[0] = '\0';
    for (int i = 0; i <= TF_MAX_HW; i++)
        snprintf(buf + strlen(buf), sizeof(buf) - strlen(buf), "hardware h%d compute=1 membw=1\n", i);
    expect_map_error(buf, "t.map:65: too many hardware lines (at most 64)");
    /* normalize */
    expect_map_error("hardware h compute=1 membw=1\nnormalize compute=1\n", "t.map:2: 'normalize' needs both");
    expect_map_error("normalize compute=1 membw=1 x=1\n", "unknown normalize attribute 'x=1'");
    expect_map_error("normalize compute=0 membw=1\n", "positive number");
    expect_map_error("normalize compute=1 compute=1 membw=1\n", "'compute=' given twice");
    expect_map_error("normalize compute=1 membw=1\nnormalize compute=1 membw=1\n", "t.map:2: 'normalize' given twice");
    expect_map_error("normalize compute=1 membw=1\nrule * -> rollout\n",
                     "'normalize' given but the map has no 'hardware' line");
    /* threshold */
    expect_map_error("threshold 0.5\n", "t.map:1: 'threshold' needs exactly a score and a tag list");
    expect_map_error("threshold 0.5 rollout train\n", "needs exactly");
    expect_map_error("threshold x rollout\n", "threshold 'x' is not a non-negative number");
    expect_map_error("threshold -0.1 rollout\n", "not a non-negative number");
    expect_map_error("threshold 0.5 bogus\n", "threshold 0.5: unknown tag 'bogus'");
    expect_map_error("threshold 0.5 none\n", "unknown tag 'none'");
    expect_map_error("threshold 0.5 rollout\nthreshold 0.50 train\n",
                     "t.map:2: threshold 0.50 already given on line 1");
    buf[0] = '\0';
    for (int i = 0; i <= TF_MAX_TIERS; i++)
        snprintf(buf + strlen(buf), sizeof(buf) - strlen(buf), "threshold 0.%d rollout\n", i);
    expect_map_error(buf, "t.map:9: too many threshold lines");
    /* default */
    expect_map_error("default\n", "t.map:1: 'default' needs exactly one tag list");
    expect_map_error("default rollout train\n", "needs exactly one");
    expect_map_error("default bogus\n", "default: unknown tag 'bogus'");
    expect_map_error("default auto\n", "unknown tag 'auto'");
    expect_map_error("default rollout\ndefault train\n", "t.map:2: 'default' given twice");
    /* rules: structure */
    expect_map_error("rule feature=h100\n", "t.map:1: rule without '->'");
    expect_map_error("rule\n", "rule without '->'");
    expect_map_error("rule -> rollout\n", "rule has no condition before '->'");
    expect_map_error("rule feature=h100 ->\n", "rule has no tags after '->'");
    expect_map_error("rule feature=h100 -> rollout train\n", "more than one word after '->' ('train')");
    expect_map_error("rule feature=h100 -> rollout, train\n", "more than one word");
    expect_map_error("rule a=1 -> b -> c\n", "more than one '->'");
    expect_map_error("rule * * * * * -> rollout\n", "too many conditions (at most 4)");
    /* rules: tags */
    expect_map_error("rule feature=h100 -> rollout,,train\n", "empty item");
    expect_map_error("rule feature=h100 -> rollout,rollout\n", "tag 'rollout' given twice");
    expect_map_error("rule feature=h100 -> auto\n", "unknown tag 'auto'");
    expect_map_error("rule feature=h100 -> gpu\n", "t.map:1: unknown tag 'gpu'");
    expect_map_error("rule feature=h100 -> none\n", "unknown tag 'none'");
    /* rules: conditions */
    expect_map_error("rule feature= -> rollout\n", "bad pattern in 'feature='");
    expect_map_error("rule feature==h100 -> rollout\n", "bad pattern");
    expect_map_error("rule hardware= -> rollout\n", "bad pattern");
    snprintf(buf, sizeof(buf), "rule feature=%070d -> rollout\n", 1);
    expect_map_error(buf, "bad pattern");
    expect_map_error("rule color=red -> rollout\n", "unknown condition 'color=red'");
    expect_map_error("rule h100 -> rollout\n", "unknown condition 'h100'");
    expect_map_error("rule gres= -> rollout\n", "bad GRES 'gres='");
    expect_map_error("rule gres=gpu:: -> rollout\n", "bad GRES");
    expect_map_error("rule gres=:h100 -> rollout\n", "bad GRES");
    expect_map_error("rule gres=gpu:h100: -> rollout\n", "bad GRES");
    expect_map_error("rule gres=gpu:h100:2:3 -> rollout\n", "bad GRES");
    expect_map_error("rule gres=gpu:h100:0 -> rollout\n", "bad GRES count in 'gres=gpu:h100:0'");
    expect_map_error("rule gres=gpu:h100:x1 -> rollout\n", "bad GRES count");
    expect_map_error("rule gres=gpu:h100:99999999999999999999 -> rollout\n", "bad GRES count");
    expect_map_error("rule gres=gpu:0 -> rollout\n", "bad GRES count");
    snprintf(buf, sizeof(buf), "rule gres=gpu:%070d:1 -> rollout\n", 1);
    expect_map_error(buf, "GRES type too long");
    snprintf(buf, sizeof(buf), "rule gres=%040d -> rollout\n", 1);
    expect_map_error(buf, "bad GRES name");
    expect_map_error("hardware h compute=1 membw=1\nrule score>=abc -> rollout\n",
                     "t.map:2: bad score bound in 'score>=abc'");
    expect_map_error("hardware h compute=1 membw=1\nrule score>= -> rollout\n", "bad score bound");
    expect_map_error("hardware h compute=1 membw=1\nrule score<-1 -> rollout\n", "bad score bound");
    expect_map_error("hardware h compute=1 membw=1\nrule score>0.5 -> rollout\n", "unknown condition 'score>0.5'");
    /* rules that need the hardware table */
    expect_map_error("rule feature=a -> rollout\nrule score>=0.5 -> rollout\n",
                     "t.map:2: rule uses the hardware score but the map has no 'hardware' line");
    expect_map_error("rule * -> score\n", "t.map:1: rule uses the hardware score");
    expect_map_error("rule hardware=a100 -> rollout\n", "rule uses the hardware score");
    expect_map_error("rule score<0.5 -> rollout\n", "rule uses the hardware score");
    buf[0] = '\0';
    for (int i = 0; i <= TF_MAX_RULES; i++) snprintf(buf + strlen(buf), sizeof(buf) - strlen(buf), "rule * -> train\n");
    expect_map_error(buf, "t.map:257: too many rules (at most 256)");
    /* lines and bytes */
    memset(buf, 'x', 2000);
    memcpy(buf, "# ", 2);
    buf[2000] = '\0';
    expect_map_error(buf, "t.map:1: line longer than 1022 characters");
    expect_map_error("rule * -> rollout\nrule\001 * -> rollout\n", "t.map:2: invalid character 0x01");
    expect_map_error("rule feature=caf\xc3\xa9 -> rollout\n", "invalid character 0xc3");
    expect_map_error("# caf\xc3\xa9 is fine in a comment\nrule\x7f -> rollout\n", "t.map:2: invalid character 0x7f");
    expect_map_error("hardware h compute=1 membw=1 a b c d e f g h i j k l m n o\n", "too many words (at most 16)");
    {
        const char nul[] = "rule * -> rollout\nru\0le * -> rollout\n";
        CHECK(tf_map_parse(&g_map, "t.map", nul, sizeof(nul) - 1, g_err, sizeof(g_err)) == -1);
        CHECK_HAS(g_err, "t.map:2: NUL byte in line");
    }
    /* maps without rules */
    expect_map_error("", "t.map: the map has no 'rule' line");
    expect_map_error("# only comments\n\n", "t.map:2: the map has no 'rule' line");
    expect_map_error("default rollout\n", "the map has no 'rule' line");
    /* files */
    CHECK(tf_map_load(&g_map, "/nonexistent/tagflow.map", &oe, g_err, sizeof(g_err)) == -1);
    CHECK(oe != 0);
    CHECK_HAS(g_err, "/nonexistent/tagflow.map: cannot open tag map: No such file or directory");
    CHECK(tf_map_load(&g_map, "/", &oe, g_err, sizeof(g_err)) == -1); /* a directory */
    CHECK_HAS(g_err, "/: cannot read tag map");
    {
        char tmpl[] = "/tmp/tf_test_mapXXXXXX";
        int fd = mkstemp(tmpl);
        CHECK(fd >= 0);
        if (fd >= 0) {
            static char big[1024 * 1024 + 64];
            memset(big, '\n', sizeof(big));
            CHECK(write(fd, big, sizeof(big)) == (ssize_t)sizeof(big));
            close(fd);
            CHECK(tf_map_load(&g_map, tmpl, &oe, g_err, sizeof(g_err)) == -1);
            CHECK_HAS(g_err, "tag map larger than");
            /* an invalid file names file and line */
            FILE* f = fopen(tmpl, "w");
            if (f) {
                fputs("hardware h compute=1 membw=1\n\nrule gres=gpu:h100:0 -> rollout\n", f);
                fclose(f);
            }
            CHECK(tf_map_load(&g_map, tmpl, &oe, g_err, sizeof(g_err)) == -1);
            CHECK(oe == 0);
            CHECK_HAS(g_err, tmpl);
            CHECK_HAS(g_err, ":3: bad GRES count");
            unlink(tmpl);
        }
    }
    /* a tiny error buffer is never overrun */
    char tiny[10];
    CHECK(tf_map_parse(&g_map, "t.map", "bogus\n", 6, tiny, sizeof(tiny)) == -1);
    CHECK(strlen(tiny) == sizeof(tiny) - 1);
}

/* ---- nodes ---- */
static void test_node(void) {
    struct tf_node n;
    char err[TF_ERR_LEN];
    char desc[256];
    char buf[4096];

    tf_node_init(&n, "node1");
    CHECK(tf_node_add_features(&n, "h100,nvlink,,ib", err, sizeof(err)) == 0);
    CHECK(n.nfeatures == 3);
    CHECK_STR(n.features[2], "ib");
    CHECK(tf_node_add_features(&n, NULL, err, sizeof(err)) == 0 && n.nfeatures == 3);
    CHECK(tf_node_add_gres(&n, "gpu:h100:2(IDX:0-1)", err, sizeof(err)) == 0);
    CHECK(n.ngres == 1 && n.gres[0].count == 2);
    CHECK_STR(n.gres[0].name, "gpu");
    CHECK_STR(n.gres[0].type, "h100");
    tf_node_describe(&n, desc, sizeof(desc));
    CHECK_STR(desc, "features=h100,nvlink,ib gres=gpu:h100:2");

    tf_node_init(&n, "node2");
    CHECK(tf_node_add_gres(&n, "gpu:h100:1(IDX:0),gpu:t4:2(IDX:1,3),nic:1", err, sizeof(err)) == 0);
    CHECK(n.ngres == 3);
    CHECK(n.gres[1].count == 2);
    CHECK_STR(n.gres[1].type, "t4");
    CHECK(n.gres[2].count == 1 && n.gres[2].type[0] == '\0');
    tf_node_init(&n, "n");
    CHECK(tf_node_add_gres(&n, "gpu:2(IDX:0,2)", err, sizeof(err)) == 0);
    CHECK(n.ngres == 1 && n.gres[0].count == 2 && n.gres[0].type[0] == '\0');
    tf_node_init(&n, "n");
    CHECK(tf_node_add_gres(&n, "gpu:a100(CNT:3)", err, sizeof(err)) == 0);
    CHECK(n.ngres == 1 && n.gres[0].count == 3);
    CHECK_STR(n.gres[0].type, "a100");
    tf_node_init(&n, "n");
    CHECK(tf_node_add_gres(&n, "gpu:a100", err, sizeof(err)) == 0 && n.gres[0].count == 1);
    tf_node_init(&n, "n");
    CHECK(tf_node_add_gres(&n, "gpu:a100:0", err, sizeof(err)) == 0 && n.ngres == 0);
    CHECK(tf_node_add_gres(&n, "", err, sizeof(err)) == 0 && n.ngres == 0);
    CHECK(tf_node_add_gres(&n, NULL, err, sizeof(err)) == 0 && n.ngres == 0);
    tf_node_describe(&n, desc, sizeof(desc));
    CHECK_STR(desc, "features=(none) gres=(none)");

    /* malformed detail strings */
    CHECK(tf_node_add_gres(&n, "gpu:h100:2(IDX:0", err, sizeof(err)) == -1);
    CHECK_HAS(err, "unbalanced parentheses");
    CHECK(tf_node_add_gres(&n, "gpu:h100:x(IDX:0)", err, sizeof(err)) == -1);
    CHECK_HAS(err, "bad GRES count");
    CHECK(tf_node_add_gres(&n, ":h100:1", err, sizeof(err)) == -1);
    CHECK(tf_node_add_gres(&n, "gpu:h100:1:2:3", err, sizeof(err)) == -1);
    CHECK(tf_node_add_gres(&n, "gpu::1", err, sizeof(err)) == -1);
    CHECK(tf_node_add_gres(&n, "gpu:h100(CNT:x)", err, sizeof(err)) == -1);
    memset(buf, 'a', 300);
    buf[300] = '\0';
    CHECK(tf_node_add_gres(&n, buf, err, sizeof(err)) == -1);
    CHECK_HAS(err, "too long");
    buf[0] = '\0';
    for (int i = 0; i <= TF_MAX_GRES; i++) snprintf(buf + strlen(buf), sizeof(buf) - strlen(buf), "g%d:1,", i);
    tf_node_init(&n, "n");
    CHECK(tf_node_add_gres(&n, buf, err, sizeof(err)) == -1);
    CHECK_HAS(err, "more than 16 GRES");
    buf[0] = '\0';
    for (int i = 0; i <= TF_MAX_FEATURES; i++) snprintf(buf + strlen(buf), sizeof(buf) - strlen(buf), "f%d,", i);
    CHECK(tf_node_add_features(&n, buf, err, sizeof(err)) == -1);
    CHECK_HAS(err, "more than 64 features");
    memset(buf, 'f', 100);
    buf[100] = '\0';
    tf_node_init(&n, "n");
    CHECK(tf_node_add_features(&n, buf, err, sizeof(err)) == -1);
    CHECK_HAS(err, "feature longer than");
    /* long node names are cut, not overrun */
    memset(buf, 'n', 200);
    buf[200] = '\0';
    tf_node_init(&n, buf);
    CHECK_STR(n.name, "?");
    /* description is bounded */
    tf_node_init(&n, "n");
    tf_node_add_features(&n, "aaaaaaaaaa,bbbbbbbbbb,cccccccccc", err, sizeof(err));
    tf_node_describe(&n, desc, 16);
    CHECK(strlen(desc) < 16);
}

/* ---- evaluation ---- */
static unsigned eval(const struct tf_args* a, const char* feats, const char* gres, unsigned req, struct tf_result* r) {
    struct tf_node n;
    char err[TF_ERR_LEN];

    tf_node_init(&n, "n");
    CHECK(tf_node_add_features(&n, feats, err, sizeof(err)) == 0);
    CHECK(tf_node_add_gres(&n, gres, err, sizeof(err)) == 0);
    return tf_evaluate(&g_map, a, &n, req, r);
}

static void test_evaluate(void) {
    struct tf_result r;
    struct tf_args noargs;
    struct tf_args def_train;
    char path[1024];
    int oe;

    memset(&noargs, 0, sizeof(noargs));
    memset(&def_train, 0, sizeof(def_train));
    def_train.has_default = 1;
    def_train.default_tags = TF_TAG_TRAIN;

    /* the shipped map on the four test-cluster node kinds */
    snprintf(path, sizeof(path), "%s/share/tagflow.map", TAGFLOW_SOURCE_DIR);
    CHECK(tf_map_load(&g_map, path, &oe, g_err, sizeof(g_err)) == 0);
    CHECK(eval(&noargs, "h100,nvlink", NULL, TF_TAG_ALL, &r) == TF_TAG_ALL);
    CHECK(r.source == TF_SRC_MAP && r.rule == 3 && r.hw == 0);
    CHECK(eval(&noargs, "h100", "gpu:h100:1(IDX:0)", TF_TAG_ALL, &r) == TF_TAG_ALL);
    CHECK(eval(&noargs, "t4", "gpu:t4:1(IDX:0)", TF_TAG_ALL, &r) == TF_TAG_ROLLOUT);
    CHECK(r.source == TF_SRC_MAP && r.hw == 2);
    CHECK(eval(&noargs, "a100", NULL, TF_TAG_ALL, &r) == (TF_TAG_ROLLOUT | TF_TAG_CRITIC));
    CHECK(r.rule == 2);
    CHECK(eval(&noargs, "a100", "gpu:a100:1(IDX:0)", TF_TAG_ALL, &r) == (TF_TAG_ROLLOUT | TF_TAG_CRITIC));
    CHECK(eval(&noargs, "a100", "gpu:a100:2(IDX:0-1)", TF_TAG_ALL, &r) == (TF_TAG_ROLLOUT | TF_TAG_TRAIN));
    CHECK(r.rule == 1);
    CHECK(eval(&noargs, "h100,rollout_only", NULL, TF_TAG_ALL, &r) == TF_TAG_ROLLOUT); /* first match */
    CHECK(r.rule == 0);
    CHECK(eval(&noargs, "cpu_only", NULL, TF_TAG_ALL, &r) == TF_TAG_ROLLOUT);
    CHECK(r.source == TF_SRC_DEFAULT && r.rule == -1 && r.from_default && r.has_default);
    /* plugstack default= overrides the map's default */
    CHECK(eval(&def_train, "cpu_only", NULL, TF_TAG_ALL, &r) == TF_TAG_TRAIN);
    CHECK(r.source == TF_SRC_DEFAULT);

    /* intersection with --rl-tags and the source */
    CHECK(eval(&noargs, "h100", NULL, TF_TAG_ROLLOUT | TF_TAG_TRAIN, &r) == (TF_TAG_ROLLOUT | TF_TAG_TRAIN));
    CHECK(r.source == TF_SRC_OPTION && r.map_tags == TF_TAG_ALL);
    CHECK(eval(&noargs, "t4", NULL, TF_TAG_ROLLOUT | TF_TAG_TRAIN, &r) == TF_TAG_ROLLOUT);
    CHECK(r.source == TF_SRC_MAP);                           /* --rl-tags removed nothing the map gave */
    CHECK(eval(&noargs, "t4", NULL, TF_TAG_TRAIN, &r) == 0); /* empty: the task will fail */
    CHECK(r.map_tags == TF_TAG_ROLLOUT && !r.from_default);
    CHECK(eval(&noargs, "cpu_only", NULL, TF_TAG_TRAIN, &r) == 0);
    CHECK(r.source == TF_SRC_DEFAULT);

    /* hardware: the job's GPU type beats the node's features */
    CHECK(parse("hardware big compute=10 membw=10\nhardware small compute=1 membw=1\nrule * -> score\n") == 0);
    CHECK(eval(&noargs, "big", "gpu:small:1", TF_TAG_ALL, &r) == TF_TAG_ROLLOUT);
    CHECK(r.hw == 1);
    CHECK(eval(&noargs, "small,big", NULL, TF_TAG_ALL, &r) == TF_TAG_ALL); /* best feature */
    CHECK(r.hw == 0);
    /* unknown hardware: "-> score" falls through; nothing else: no default */
    CHECK(eval(&noargs, "other", "gpu:v100:1", TF_TAG_ALL, &r) == 0);
    CHECK(r.rule == -1 && r.hw == -1 && !r.has_default && r.source == TF_SRC_DEFAULT);
    /* custom tiers: a score below every tier does not match */
    CHECK(parse("hardware big compute=10 membw=10\nhardware small compute=1 membw=1\n"
                "threshold 0.5 rollout,train\nrule * -> score\nrule * -> critic\n") == 0);
    CHECK(eval(&noargs, "small", NULL, TF_TAG_ALL, &r) == TF_TAG_CRITIC && r.rule == 1);
    CHECK(eval(&noargs, "big", NULL, TF_TAG_ALL, &r) == (TF_TAG_ROLLOUT | TF_TAG_TRAIN) && r.rule == 0);

    /* feature globs, AND of conditions, GRES counts (at least, summed over types) */
    CHECK(parse("hardware h100 compute=10 membw=10\nhardware t4 compute=1 membw=1\n"
                "rule feature=gpu-[ab]* feature=ib -> critic\n"
                "rule gres=gpu:*:3 -> rollout,train,critic\n"
                "rule gres=gpu:h100:2 -> train\n"
                "rule gres=gpu -> rollout,critic\n"
                "rule score>=0.5 -> rollout,train\n"
                "rule hardware=t? score<0.5 -> rollout\n") == 0);
    CHECK(eval(&noargs, "gpu-a1,ib", NULL, TF_TAG_ALL, &r) == TF_TAG_CRITIC && r.rule == 0);
    CHECK(eval(&noargs, "gpu-c1,ib", NULL, TF_TAG_ALL, &r) == 0 && r.rule == -1);
    CHECK(eval(&noargs, "gpu-a1", NULL, TF_TAG_ALL, &r) == 0); /* AND: ib missing */
    CHECK(eval(&noargs, "", "gpu:h100:2,gpu:t4:1", TF_TAG_ALL, &r) == TF_TAG_ALL && r.rule == 1);
    CHECK(eval(&noargs, "", "gpu:h100:2", TF_TAG_ALL, &r) == TF_TAG_TRAIN && r.rule == 2);
    CHECK(eval(&noargs, "", "gpu:h100:1", TF_TAG_ALL, &r) == (TF_TAG_ROLLOUT | TF_TAG_CRITIC) && r.rule == 3);
    CHECK(eval(&noargs, "h100", NULL, TF_TAG_ALL, &r) == (TF_TAG_ROLLOUT | TF_TAG_TRAIN) && r.rule == 4);
    CHECK(eval(&noargs, "t4", NULL, TF_TAG_ALL, &r) == TF_TAG_ROLLOUT && r.rule == 5);
    CHECK(eval(&noargs, "", "nic:4", TF_TAG_ALL, &r) == 0);
    /* glob on the GRES name too; untyped GRES never match a typed rule */
    CHECK(parse("rule gres=g*:x -> train\nrule gres=g* -> critic\n") == 0);
    CHECK(eval(&noargs, "", "gpu:1", TF_TAG_ALL, &r) == TF_TAG_CRITIC);
    CHECK(eval(&noargs, "", "gpu:x:1", TF_TAG_ALL, &r) == TF_TAG_TRAIN);

    /* no map at all (default= only) */
    {
        struct tf_node n;
        tf_node_init(&n, "n");
        CHECK(tf_evaluate(NULL, &def_train, &n, TF_TAG_ALL, &r) == TF_TAG_TRAIN);
        CHECK(r.source == TF_SRC_DEFAULT);
        CHECK(tf_evaluate(NULL, NULL, &n, TF_TAG_ALL, &r) == 0);
    }
    CHECK_STR(tf_source_name(TF_SRC_MAP), "map");
    CHECK_STR(tf_source_name(TF_SRC_OPTION), "option");
    CHECK_STR(tf_source_name(TF_SRC_DEFAULT), "default");
}

int main(int argc, char** argv) {
    static const struct tf_test_group groups[] = {
        {"tags", test_tags},           {"args", test_args},
        {"map_valid", test_map_valid}, {"map_errors", test_map_errors},
        {"node", test_node},           {"evaluate", test_evaluate},
    };
    return tf_test_main(argc, argv, groups, (int)(sizeof(groups) / sizeof(groups[0])));
}
