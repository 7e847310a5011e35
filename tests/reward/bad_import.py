# SPDX-License-Identifier: Apache-2.0
# A reward file that fails at import (tests/reward: one line naming the file and the problem).
import tagflow_no_such_module  # noqa: F401


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    return 0.0
