/* SPDX-License-Identifier: Apache-2.0 */
/* tf_test: group runner and summary line for the tests/spank executables. */
#include "tf_test.h"

int tf_test_passed, tf_test_failed;

int tf_test_main(int argc, char** argv, const struct tf_test_group* groups, int n) {
    int ran = 0;

    for (int i = 0; i < n; i++) {
        if (argc > 1 && strcmp(argv[1], groups[i].name) != 0) continue;
        int before = tf_test_failed;
        groups[i].fn();
        fprintf(stderr, "[%s] %s\n", tf_test_failed == before ? " OK " : "FAIL", groups[i].name);
        ran++;
    }
    if (ran == 0) {
        fprintf(stderr, "no test group named '%s'\n", argc > 1 ? argv[1] : "");
        return 2;
    }
    printf("%d passed, %d failed\n", tf_test_passed, tf_test_failed);
    return tf_test_failed == 0 ? 0 : 1;
}
