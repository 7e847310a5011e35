#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Serial.docs.layers: the library layer rule (share/cmake/TagflowLayers.cmake) and its
documentation (share/doc/architecture.md, "Libraries and layers") agree, and the rule works.

1. The layer of every library is the same in the CMake table, in the diagram and in the table
   "What each links today" of architecture.md (same names, same layers, same order of layers).
2. CMake itself, on a small fixture project that includes the real TagflowLayers.cmake (one C
   file, libraries under mpi_app/ and io/ like the real tree): a downward link configures; an
   upward link, PUBLIC or PRIVATE, fails with one message naming both targets and their layers;
   a library missing from the table fails naming it; a library outside mpi_app/ and io/ is not
   checked.
Does not: configure the real tree (every build does that, and fails if the rule is broken).
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

FAIL = []


def check(cond, what):
    if not cond:
        FAIL.append(what)
        print("FAIL:", what)


def cmake_table(path):
    text = open(path, encoding="utf-8").read()
    order = re.search(r"set\(_TAGFLOW_LAYERS\s+([^)]*)\)", text).group(1).split()
    layer_of = {}
    for layer, names in re.findall(r"set\(_TAGFLOW_LAYER_(\w+)\s+([^)]*)\)", text):
        for n in names.split():
            layer_of[n] = layer
    return order, layer_of


def doc_tables(path):
    text = open(path, encoding="utf-8").read()
    sec = text[text.index("## Libraries and layers"):]
    sec = sec[:sec.index("\n## ", 5)] if "\n## " in sec[5:] else sec
    diagram = sec[sec.index("```\n") + 4:]
    diagram = diagram[:diagram.index("```")]
    order, diag, current = [], {}, None
    for line in diagram.split("\n"):
        m = re.match(r"^ (\w+)\s+(tagflow\w*)", line)
        if m and not line.startswith("  "):
            current = m.group(1)
            order.append(current)
        names = re.findall(r"\btagflow(?:_\w+)?\b", line)
        for n in names[:1]:  # the library column; descriptions name no libraries
            if current:
                diag[n] = current
    table = {}
    for line in sec.split("\n"):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 4 and cells[0].startswith("`tagflow"):
            for n in re.findall(r"`(tagflow\w*)`", cells[0]):
                table[n] = cells[2]
    return order, diag, table


FIXTURE_TOP = """cmake_minimum_required(VERSION 3.25)
project(layers_fixture LANGUAGES C)
add_subdirectory(mpi_app)
add_subdirectory(io)
add_subdirectory(tests)
include(${LAYERS})
"""


def fixture(root, mpi_app_extra="", tests_extra=""):
    os.makedirs(os.path.join(root, "mpi_app"))
    os.makedirs(os.path.join(root, "io"))
    os.makedirs(os.path.join(root, "tests"))
    open(os.path.join(root, "empty.c"), "w").write("int tagflow_fixture_symbol;\n")
    open(os.path.join(root, "CMakeLists.txt"), "w").write(FIXTURE_TOP)
    open(os.path.join(root, "mpi_app", "CMakeLists.txt"), "w").write(
        "add_library(tagflow_common STATIC ../empty.c)\n"
        "add_library(tagflow_model STATIC ../empty.c)\n"
        "target_link_libraries(tagflow_model PUBLIC tagflow_common)\n"
        "add_library(tagflow_sched INTERFACE)\n"
        "target_link_libraries(tagflow_sched INTERFACE tagflow_model tagflow_io)\n" + mpi_app_extra)
    open(os.path.join(root, "io", "CMakeLists.txt"), "w").write(
        "add_library(tagflow_io STATIC ../empty.c)\n"
        "target_link_libraries(tagflow_io PRIVATE tagflow_common)\n")
    open(os.path.join(root, "tests", "CMakeLists.txt"), "w").write(tests_extra)


def configure(cmake, layers, name, work, **extra):
    src = os.path.join(work, name)
    fixture(src, **extra)
    r = subprocess.run([cmake, "-S", src, "-B", os.path.join(src, "build"), f"-DLAYERS={layers}"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    return r.returncode, re.sub(r"\s+", " ", r.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", required=True)
    ap.add_argument("--cmake", default="cmake")
    args = ap.parse_args()
    layers = os.path.join(os.path.realpath(args.root), "share/cmake/TagflowLayers.cmake")
    c_order, c_layer = cmake_table(layers)
    d_order, d_layer, t_layer = doc_tables(os.path.join(args.root, "share/doc/architecture.md"))
    print(f"CMake table: {len(c_layer)} libraries in {len(c_order)} layers {c_order}")
    check(len(c_layer) >= 20, "the CMake layer table lists at least the 20 libraries of today's tree")
    check(d_order[::-1] == c_order, f"layer order: diagram (top down) {d_order} vs CMake (bottom up) {c_order}")
    for n in sorted(set(c_layer) | set(d_layer) | set(t_layer)):
        check(c_layer.get(n) == d_layer.get(n) == t_layer.get(n),
              f"{n}: CMake {c_layer.get(n)}, diagram {d_layer.get(n)}, table {t_layer.get(n)}")

    work = tempfile.mkdtemp(prefix="tagflow-layers-")
    try:
        rc, out = configure(args.cmake, layers, "ok", work)
        check(rc == 0 and "layer rule holds for 4 targets" in out, f"downward links configure (rc {rc}): {out[-400:]}")
        rc, out = configure(args.cmake, layers, "up_public", work,
                            mpi_app_extra="target_link_libraries(tagflow_common PUBLIC tagflow_sched)\n")
        check(rc != 0 and "tagflow_common (layer common, mpi_app) links tagflow_sched (layer sched, mpi_app)" in out,
              f"a PUBLIC upward link fails naming the pair (rc {rc}): {out[-600:]}")
        rc, out = configure(args.cmake, layers, "up_private", work,
                            mpi_app_extra="target_link_libraries(tagflow_model PRIVATE tagflow_sched)\n")
        check(rc != 0 and "tagflow_model (layer core, mpi_app) links tagflow_sched (layer sched, mpi_app)" in out,
              f"a PRIVATE upward link fails naming the pair (rc {rc}): {out[-600:]}")
        rc, out = configure(args.cmake, layers, "unknown", work,
                            mpi_app_extra="add_library(tagflow_unlisted STATIC ../empty.c)\n")
        check(rc != 0 and "tagflow_unlisted (mpi_app/CMakeLists.txt) is not in the layer table" in out,
              f"a library missing from the table fails naming it (rc {rc}): {out[-600:]}")
        rc, out = configure(args.cmake, layers, "outside", work,
                            tests_extra="add_library(tagflow_test_helper STATIC ../empty.c)\n"
                                        "target_link_libraries(tagflow_test_helper PRIVATE tagflow_sched)\n")
        check(rc == 0, f"libraries under tests/ are not checked (rc {rc}): {out[-400:]}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("PASS" if not FAIL else f"{len(FAIL)} check(s) failed")
    return 1 if FAIL else 0


if __name__ == "__main__":
    sys.exit(main())
