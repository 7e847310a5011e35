/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_replay: a main() for builds without libFuzzer (GCC, CI). Feeds every regular file of
 * the given directories (sorted by name, hidden files skipped), and every file given
 * directly, to the target's LLVMFuzzerTestOneInput, each in an exactly sized heap buffer so
 * that ASan (when the build has it) sees any read past the input.
 *   fuzz_replay_<target> PATH... [--optional PATH...]
 * A missing PATH is an error, except after --optional (a regressions folder that may not
 * exist yet). Fails when no input at all was replayed. A target's failed invariant aborts
 * (fuzz_check.h), which fails the run; the input being replayed is printed first.
 * Does not mutate inputs or measure coverage (that is libFuzzer's job, tests/bench/fuzz_all.sh).
 */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
int LLVMFuzzerInitialize(int* argc, char*** argv) __attribute__((weak));

static int replay_file(const char* path, long* count) {
    FILE* f = fopen(path, "rb");
    unsigned char* buf;
    long size;

    if (f == NULL) {
        fprintf(stderr, "fuzz_replay: cannot open %s\n", path);
        return -1;
    }
    if (fseek(f, 0, SEEK_END) != 0 || (size = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
        fprintf(stderr, "fuzz_replay: cannot size %s\n", path);
        fclose(f);
        return -1;
    }
    buf = malloc(size > 0 ? (size_t)size : 1);
    if (buf == NULL || (size > 0 && fread(buf, 1, (size_t)size, f) != (size_t)size)) {
        fprintf(stderr, "fuzz_replay: cannot read %s\n", path);
        free(buf);
        fclose(f);
        return -1;
    }
    fclose(f);
    printf("fuzz_replay: %s (%ld bytes)\n", path, size);
    fflush(stdout);
    LLVMFuzzerTestOneInput(buf, (size_t)size);
    free(buf);
    (*count)++;
    return 0;
}

static int only_visible(const struct dirent* e) { return e->d_name[0] != '.'; }

static int replay_path(const char* path, int optional, long* count) {
    struct stat st;
    struct dirent** names = NULL;
    int n, rc = 0;

    if (stat(path, &st) != 0) {
        if (optional) return 0;
        fprintf(stderr, "fuzz_replay: %s does not exist\n", path);
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) return replay_file(path, count);
    n = scandir(path, &names, only_visible, alphasort);
    if (n < 0) {
        fprintf(stderr, "fuzz_replay: cannot list %s\n", path);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        char full[4096];
        struct stat fst;
        if (rc == 0 && snprintf(full, sizeof(full), "%s/%s", path, names[i]->d_name) < (int)sizeof(full) &&
            stat(full, &fst) == 0 && S_ISREG(fst.st_mode))
            rc = replay_file(full, count);
        free(names[i]);
    }
    free(names);
    return rc;
}

int main(int argc, char** argv) {
    long count = 0;
    int optional = 0;

    if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
    if (argc < 2) {
        fprintf(stderr, "usage: %s PATH... [--optional PATH...]\n", argv[0]);
        return 2;
    }
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--optional") == 0) {
            optional = 1;
            continue;
        }
        if (replay_path(argv[i], optional, &count) != 0) return 1;
    }
    if (count == 0) {
        fprintf(stderr, "fuzz_replay: no input found\n");
        return 1;
    }
    printf("fuzz_replay: %ld inputs replayed, no invariant failed\n", count);
    return 0;
}
