#!/usr/bin/env python3
"""Every test of the namespace cluster carries the label `cluster` (tests/CMakeLists.txt), so that
`ctest -L cluster` runs them and `-LE cluster` the rest; and the selection is not empty.

  labels_test.py --ctest CTEST --build BUILD
"""
import argparse
import json
import re
import subprocess
import sys

CLUSTER = re.compile(r"^integration/(ssh_|testcluster_|cluster_|trainer_hybrid_cluster_)")


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
    every = listed(args.ctest, args.build)
    selected = listed(args.ctest, args.build, "-L", "cluster")
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
