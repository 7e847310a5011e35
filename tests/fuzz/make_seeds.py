#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# make_seeds.py: writes the hand-written seed corpora of tests/fuzz/corpus/<target>/ (valid and
# invalid inputs, one file each, named after what they exercise). The files are committed;
# rerun this only to regenerate them after changing it:  /usr/bin/python3 tests/fuzz/make_seeds.py
# Does not write regressions (those are inputs the fuzzers found, tests/fuzz/regressions/).
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# ---------------- tagmap: whole maps, optionally "%%" + features line + GRES line ----------------
EXAMPLE = open(os.path.join(HERE, "..", "..", "share", "tagflow.map")).read()
tagmap = {
    "good_example.map": EXAMPLE,
    "good_example_with_node.map": EXAMPLE + "%%\nh100,nvlink\ngpu:h100:2(IDX:0-1)\n",
    "good_minimal.map": "rule * -> rollout\n",
    "good_all_statements.map": (
        "hardware h100 compute=989 membw=3.35   # comment\n"
        "hardware\tt4\tcompute=65\tmembw=0.32\r\n"
        "normalize compute=1000 membw=4\n"
        "threshold 0.9 rollout,train,critic\nthreshold 0.5 train,rollout\nthreshold 0 rollout\n"
        "default none\n"
        "rule feature=x* gres=gpu hardware=h* score>=0.5 -> rollout\n"
        "rule gres=gpu:2 -> train\nrule gres=gpu:h100 -> train\n"
        "rule gres=gpu:h100:3 score<0.2 -> critic\nrule * -> score\n"
        "%%\nx1,h100\ngpu:h100:3,gpu:t4:1(IDX:2)\n"),
    "good_score_only.map": "hardware a compute=1 membw=1\nhardware b compute=1e-3 membw=2.5e+1\n"
                           "rule * -> score\ndefault critic\n%%\nb\n\n",
    "bad_unknown_tag.map": "rule * -> rollout,inference\n",
    "bad_repeated_tag.map": "rule * -> train,train\n",
    "bad_empty_tag_item.map": "rule * -> rollout,,train\n",
    "bad_gres_count_zero.map": "rule gres=gpu:h100:0 -> train\n",
    "bad_gres_count_huge.map": "rule gres=gpu:h100:10000001 -> train\n",
    "bad_gres_too_many_fields.map": "rule gres=gpu:h100:2:3 -> train\n",
    "bad_negative_compute.map": "hardware h compute=-1 membw=1\nrule * -> score\n",
    "bad_hex_inf_nan.map": "hardware h compute=0x10 membw=inf\nthreshold nan rollout\nrule * -> score\n",
    "bad_threshold_twice.map": "hardware h compute=1 membw=1\nthreshold 0.5 train\nthreshold 0.5 rollout\n"
                               "rule * -> score\n",
    "bad_score_without_hardware.map": "rule score>=0.5 -> train\n",
    "bad_two_arrows.map": "rule * -> train -> rollout\n",
    "bad_too_many_conditions.map": "rule * * * * * -> train\n",
    "bad_unknown_keyword.map": "hardwre h compute=1 membw=1\nrule * -> train\n",
    "bad_no_rule.map": "hardware h compute=1 membw=1\ndefault rollout\n",
    "bad_huge_line.map": "rule feature=" + "a" * 1100 + " -> train\n",
    "bad_long_pattern.map": "rule feature=" + "b" * 70 + " -> train\n",
    "bad_nul_byte.map": b"rule * -> train\nrule feature=a\x00b -> rollout\n",
    "bad_control_and_high_bytes.map": b"rule feature=\x01\xff -> train\n",
    "bad_default_twice.map": "default rollout\ndefault none\nrule * -> train\n",
    "bad_normalize_without_hardware.map": "normalize compute=1 membw=1\nrule * -> train\n",
    "bad_too_many_words.map": "hardware h " + "compute=1 " * 20 + "\nrule * -> train\n",
    "empty.map": "",
}
for name, text in tagmap.items():
    write("tagmap", name, text)

# ---------------- tagmap_node: features / GRES detail / tags / plugstack arguments ----------------
tagmap_node = {
    "good_node": "h100,nvlink\ngpu:h100:2(IDX:0-1),gpu:t4:1(IDX:2)\nrollout,train\n"
                 "map=/etc/slurm/tagflow.map\ndefault=none\n",
    "good_untyped_cnt": "a100\ngpu:2(IDX:0,2),nic:1,gpu:a100(CNT:3)\nauto\ndefault=rollout,critic\n",
    "good_none_tags": "\ngpu:a100:0\nnone\nmap=/m\n",
    "bad_unbalanced_paren": "x\ngpu:h100:2(IDX:0\ncritic,train,rollout\nmap=relative\n",
    "bad_gres_count": "x\ngpu:h100:x1,gpu:0x2\ntrain,auto\nmap=/a\nmap=/b\n",
    "bad_too_many_features": ",".join("f%d" % i for i in range(70)) + "\n\nrollout,\ndefault=\n",
    "bad_long_feature": "f" * 80 + "\n" + "gpu:" + "t" * 70 + ":1\n,rollout\nunknown=1\n",
    "bad_long_gres_name": "x\n" + "g" * 40 + ":1\ntrain\nmap=/" + "p" * 600 + "\n",
    "bad_too_many_gres": "x\n" + ",".join("gpu:t%d:1" % i for i in range(20)) + "\nrollout\ndefault=auto\n",
    "bad_nul_in_line": b"h100\x00,x\ngpu:1\x00\nrollout\n",
}
for name, text in tagmap_node.items():
    write("tagmap_node", name, text)


# ---------------- safetensors: whole files ----------------
def st_file(header, data=b"", length=None, pad=True):
    h = header if isinstance(header, (bytes, str)) else json.dumps(header, separators=(",", ":"))
    if isinstance(h, str):
        h = h.encode()
    if pad:
        h += b" " * ((8 - len(h) % 8) % 8)
    n = len(h) if length is None else length
    return struct.pack("<Q", n) + h + data


def t(dtype, shape, begin, end):
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


ok2 = {"__metadata__": {"format": "pt"}, "w": t("F32", [2, 3], 0, 24), "b": t("BF16", [4], 24, 32)}
safetensors = {
    "good_two_tensors": st_file(ok2, bytes(range(32))),
    "good_empty_header": st_file({}),
    "good_zero_size_and_scalar": st_file({"e": t("F16", [0, 4], 0, 0), "s": t("F32", [], 0, 4)}, b"\0" * 4),
    "good_unpadded": st_file({"x": t("F16", [1], 0, 2)}, b"\1\2", pad=False),
    "bad_too_short": b"\1\0\0\0",
    "bad_header_length_zero": st_file(b"", length=0),
    "bad_header_length_one": st_file(b"{", length=1, pad=False),
    "bad_header_length_huge": st_file(b"{}", length=1 << 63, pad=False),
    "bad_header_longer_than_file": st_file(ok2, b"", length=400),
    "bad_truncated_header": st_file(ok2)[:40],
    "bad_dtype_i64": st_file({"w": t("I64", [1], 0, 8)}, b"\0" * 8),
    "bad_dtype_not_string": st_file({"w": t(4, [1], 0, 4)}, b"\0" * 4),
    "bad_shape_mismatch": st_file({"w": t("F32", [2, 3], 0, 20)}, b"\0" * 20),
    "bad_shape_negative": st_file({"w": t("F32", [-1], 0, 4)}, b"\0" * 4),
    "bad_shape_float": st_file({"w": t("F32", [1.0], 0, 4)}, b"\0" * 4),
    "bad_shape_nested": st_file({"w": t("F32", [[1]], 0, 4)}, b"\0" * 4),
    "bad_shape_overflow": st_file({"w": t("F32", [1 << 40, 1 << 40], 0, 4)}, b"\0" * 4),
    "bad_offsets_out_of_range": st_file({"w": t("F32", [4], 0, 16)}, b"\0" * 8),
    "bad_offsets_reversed": st_file({"w": t("F32", [0], 4, 0)}, b"\0" * 4),
    "bad_offsets_three": st_file({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4, 8]}}, b"\0" * 8),
    "bad_offsets_huge": st_file({"w": t("F32", [1], 18446744073709551612, 18446744073709551615)}, b"\0" * 4),
    "bad_overlap": st_file({"a": t("F32", [2], 0, 8), "b": t("F32", [1], 4, 8)}, b"\0" * 8),
    "bad_gap": st_file({"a": t("F32", [1], 4, 8)}, b"\0" * 8),
    "bad_trailing": st_file({"a": t("F32", [1], 0, 4)}, b"\0" * 12),
    "bad_duplicate_name": st_file(b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
                                  b'"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}', b"\0" * 4),
    "bad_extra_field": st_file({"a": dict(t("F32", [1], 0, 4), x=1)}, b"\0" * 4),
    "bad_metadata_value": st_file({"__metadata__": {"k": 1}}),
    "bad_not_object": st_file([1, 2, 3]),
    "bad_invalid_json": st_file(b'{"a": [1, 2'),
    "bad_invalid_utf8_name": st_file(b'{"\xff\xfe":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}', b"\0" * 4),
    "bad_control_in_name": st_file({"a\nb\x01": t("F32", [1], 0, 8)}, b"\0" * 8),
    "bad_deep_nesting": st_file(b'{"w":{"dtype":"F32","shape":[' + b"[" * 500 + b"]" * 500
                                + b'],"data_offsets":[0,4]}}', b"\0" * 4),
}
for name, data in safetensors.items():
    write("safetensors", name, data)
# ---------------- gateway_http: first byte % 4 = 0 HTTP, 1 HTTP small limits, 2 completions JSON, 3 chat JSON
H, HS, C, CH = b"\x00", b"\x01", b"\x02", b"\x03"
gateway_http = {
    "good_get": H + b"GET /health HTTP/1.1\r\nHost: h\r\n\r\n",
    "good_post_pipelined": H + b"POST /v1/completions?x=1 HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n"
                           b"X-A:  v \r\n\r\nhelloGET / HTTP/1.1\r\n\r\n",
    "good_http10_keepalive": H + b"\r\nGET * HTTP/1.0\r\nConnection: keep-alive\r\nExpect: 100-continue\r\n"
                             b"Content-Length: 0\r\n\r\n",
    "good_incomplete_body": HS + b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc",
    "bad_too_many_headers_small": HS + b"GET / HTTP/1.1\r\na: 1\r\nb: 2\r\nc: 3\r\nd: 4\r\ne: 5\r\n\r\n",
    "bad_body_too_large_small": HS + b"POST / HTTP/1.1\r\nContent-Length: 65\r\n\r\n",
    "bad_chunked": H + b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    "bad_bare_lf": H + b"GET / HTTP/1.1\nHost: h\n\n",
    "bad_obs_fold": H + b"GET / HTTP/1.1\r\nA: 1\r\n  continued\r\n\r\n",
    "bad_conflicting_length": H + b"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
    "bad_http2": H + b"GET / HTTP/2.0\r\n\r\n",
    "bad_target": H + b"GET relative HTTP/1.1\r\n\r\n",
    "bad_control_in_value": H + b"GET / HTTP/1.1\r\nA: x\x01y\r\n\r\n",
    "bad_expect": H + b"GET / HTTP/1.1\r\nExpect: 200-ok\r\n\r\n",
    "good_completion": C + b'{"model":"m","prompt":"hello","max_tokens":4,"temperature":0.5,"top_p":0.9,"top_k":5,'
                           b'"stop":["\\n"],"seed":3,"stream":true,"stream_options":{"include_usage":true},'
                           b'"logprobs":2,"session":"s1"}',
    "good_completion_ids": C + b'{"model":"m","prompt":[1,2,3,256],"max_tokens":1}',
    "bad_completion_values": C + b'{"model":"m","prompt":"x","max_tokens":0,"temperature":3,"top_p":0}',
    "bad_completion_batch": C + b'{"model":"m","prompt":["a","b"]}',
    "bad_completion_float_tokens": C + b'{"model":"m","prompt":"x","max_tokens":1.5,"top_k":-1}',
    "bad_completion_long_prompt": C + b'{"model":"m","prompt":"' + b"x" * 80 + b'"}',
    "bad_unknown_model": C + b'{"model":"\\u00ff\\ud83d\\ude00","prompt":"x"}',
    "bad_json": C + b'{"model":"m","prompt":',
    "bad_deep_json": C + b"[" * 100 + b"]" * 100,
    "good_chat": CH + b'{"model":"m","messages":[{"role":"system","content":"be brief"},'
                      b'{"role":"user","content":[{"type":"text","text":"hi"}]}],"max_tokens":3,"logprobs":true,'
                      b'"top_logprobs":2}',
    "bad_chat_role": CH + b'{"model":"m","messages":[{"role":"robot","content":"x"}]}',
    "bad_chat_content": CH + b'{"model":"m","messages":[{"role":"user","content":[{"type":"image_url"}]}]}',
}
for name, data in gateway_http.items():
    write("gateway_http", name, data)
print("seed corpora written under", os.path.join(HERE, "corpus"))
