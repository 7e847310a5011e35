# SPDX-License-Identifier: Apache-2.0
# A reward function costing about 1 ms of CPU (tests/bench/reward_bench.sh): the gsm8k-style
# check plus a busy loop, so a pool of processes can run several at once.
import time

from gsm8k_reward import compute_score as gsm8k


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    end = time.process_time() + 0.001
    while time.process_time() < end:
        pass
    return gsm8k(data_source, solution_str, ground_truth, extra_info)
