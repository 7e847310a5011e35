# SPDX-License-Identifier: Apache-2.0
# Reward functions veRL could not call (tests/reward): the signature check at start-up names them.
def compute_score(solution_str, ground_truth):
    return 0.0


not_a_function = 3


def needs_more(data_source, solution_str, ground_truth, extra_info, judge):
    return 0.0
