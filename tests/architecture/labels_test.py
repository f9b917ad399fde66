#!/usr/bin/env python3
"""Every test of the namespace cluster carries the label `cluster` (tests/CMakeLists.txt), so that
`ctest -L cluster` runs them and `-LE cluster` the rest; and the selection is not empty.

  labels_test.py --ctest CTEST --build BUILD
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

CLUSTER = re.compile(r"^(integration/(ssh_|testcluster_|cluster_|trainer_hybrid_cluster_)|k8s/)")


def copy_test_files(build, into):
    """The build's CTestTestfile.cmake tree: ctest, even with -N, rewrites its directory's
    Testing/Temporary/LastTest.log, which the suite running this test is still writing (and
    scripts/test.sh reads skip reasons from). The include files they name are absolute paths."""
    for folder, subfolders, files in os.walk(build):
        subfolders[:] = [d for d in subfolders if d not in ("CMakeFiles", "Testing", "include")]
        if "CTestTestfile.cmake" in files:
            target = os.path.join(into, os.path.relpath(folder, build))
            os.makedirs(target, exist_ok=True)
            shutil.copy(os.path.join(folder, "CTestTestfile.cmake"), target)


def listed(ctest, build, *selection):
    out = subprocess.run([ctest, "-N", "--show-only=json-v1", *selection], cwd=build, check=True,
                         stdout=subprocess.PIPE, text=True).stdout
    tests = {}
    for test in json.loads(out).get("tests", []):
        labels = []
        for prop in test.get("properties", []):
            if prop.get("name") == "LABELS":
                labels = prop.get("value", [])
        tests[test["name"]] = labels
    return tests


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ctest", required=True)
    parser.add_argument("--build", required=True)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="dtrain-labels-") as scratch:
        copy_test_files(args.build, scratch)
        every = listed(args.ctest, scratch)
        selected = listed(args.ctest, scratch, "-L", "cluster")
    problems = []
    if not selected:
        problems.append("`ctest -L cluster` selects no test")
    for name, labels in sorted(every.items()):
        if CLUSTER.match(name) and "cluster" not in labels:
            problems.append("%s: labels %s lack cluster" % (name, labels))
        if name in selected and not CLUSTER.match(name):
            problems.append("%s: labelled cluster but not a cluster test file" % name)
    for problem in problems[:20]:
        print(problem)
    print("%d tests, %d labelled cluster, %d problems" % (len(every), len(selected), len(problems)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
