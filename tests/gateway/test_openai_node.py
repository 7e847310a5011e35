#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Gateway.openai_node: the official OpenAI Node.js client (vendored, openai-node/) against
gateway_test_server — a real rollout engine behind the gateway. Unpacks the client into --work,
starts the server (127.0.0.1, random port, token file), runs openai_node_test.mjs with the URL
and token, and fails when node is missing or any check fails.

    test_openai_node.py --server BIN --work DIR
"""
import argparse
import os
import shutil
import subprocess
import sys
import tarfile

HERE = os.path.dirname(os.path.abspath(__file__))
TARBALL = os.path.join(HERE, "openai-node", "openai-6.49.0.tgz")
MODEL = "tagflow-test"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    node = shutil.which("node")
    if not node:
        sys.exit("FAIL: node (Debian package nodejs) not found; share/setup.sh --tests installs it")
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    with tarfile.open(TARBALL) as t:
        t.extractall(a.work)  # our own vendored file (Python 3.11.2 has no extraction filter)
    lib = "file://" + os.path.join(a.work, "package", "index.mjs")
    p = subprocess.Popen([a.server, "--out", a.work, "--max-body", "4096", "--context", "128",
                          "--model-id", MODEL], stdout=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline().strip()
        if not line.startswith("gateway listening on http://127.0.0.1:"):
            sys.exit(f"FAIL: server did not start ({line!r})")
        url = line.split()[-1]
        with open(os.path.join(a.work, "gateway.token")) as f:
            token = f.read().strip()
        r = subprocess.run([node, os.path.join(HERE, "openai_node_test.mjs"), lib, url, token, MODEL],
                           timeout=240)
    finally:
        p.terminate()
        try:
            p.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
    sys.exit(r.returncode)


if __name__ == "__main__":
    main()
