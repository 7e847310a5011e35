# SPDX-License-Identifier: Apache-2.0
"""arith_reward: the reward of the arithmetic word problems of arith_task.py, in veRL's signature
(an existing veRL reward file works the same way with `--reward-fn FILE.py`).

compute_score returns 1.0 when the number after the last "####" of the response equals the
ground truth, else 0.0. Python 3 standard library only.
"""
import re

_ANSWER = re.compile(r"####\s*(-?[0-9][0-9,]*)")


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    found = _ANSWER.findall(solution_str or "")
    if not found:
        return 0.0
    return 1.0 if found[-1].replace(",", "") == str(ground_truth).strip() else 0.0
