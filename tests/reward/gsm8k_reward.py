# SPDX-License-Identifier: Apache-2.0
# A reward file written the way veRL's gsm8k reward is (verl/utils/reward_score/gsm8k.py) and
# loaded the way veRL loads custom_reward_function.path: the answer after "####", strict or
# flexible extraction, format score vs full score. Pure standard library. Used by tests/reward
# to check that tagflow's worker pool gives the same scores as calling it directly.
import re

_SOLUTION_CLIP_CHARS = 300


def extract_solution(solution_str, method="strict"):
    assert method in ["strict", "flexible"]
    # Only the end of the text: the answer is there, and the regex stays cheap.
    if len(solution_str) > _SOLUTION_CLIP_CHARS:
        solution_str = solution_str[-_SOLUTION_CLIP_CHARS:]
    if method == "strict":
        solutions = re.findall("#### (\\-?[0-9\\.\\,]+)", solution_str)
        if len(solutions) == 0:
            return None
        return solutions[-1].replace(",", "").replace("$", "")
    answer = re.findall("(\\-?[0-9\\.\\,]+)", solution_str)
    for final_answer in reversed(answer):
        if final_answer not in ["", "."]:
            return final_answer
    return None


def gsm8k_score(solution_str, ground_truth, method="strict", format_score=0.0, score=1.0):
    answer = extract_solution(solution_str=solution_str, method=method)
    if answer is None:
        return 0
    if answer == ground_truth:
        return score
    return format_score


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    """veRL's custom reward signature; returns a float, or a dict for data_source 'gsm8k/dict'."""
    if data_source == "gsm8k/dict":
        s = gsm8k_score(solution_str, ground_truth, method="flexible", format_score=0.1)
        return {"score": s, "acc": s == 1.0, "pred": extract_solution(solution_str, "flexible")}
    return gsm8k_score(solution_str, ground_truth, format_score=0.1)


def length_penalty(data_source, solution_str, ground_truth, extra_info=None):
    """A second function in the same file (--reward-fn FILE:length_penalty)."""
    limit = (extra_info or {}).get("max_chars", 100)
    return -max(0, len(solution_str) - limit) / limit
