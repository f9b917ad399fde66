#!/usr/bin/env python3
"""The module arrows of docs/architecture.md §2, enforced.

Reads the ```arrows block of docs/architecture.md (one line per module: `module -> dep, dep`;
`*` allows any module) and every `#include "launcher/...`, `"worker/...`, `"cli/...` and
`"tests/...` line of the C/C++ sources under launcher/, worker/, cli/, tests/ and fuzz/. Fails,
naming file:line and the missing arrow, when an include crosses from one module into another
along an arrow the document does not list, when a source file lies in no listed module, or when
a listed module has no folder. Arrows that nothing uses are reported but allowed (an arrow says
what may be used, not what must be).

  arrows_test.py --root SOURCE_DIR         check the tree (ctest: architecture/arrows)
  arrows_test.py --root SOURCE_DIR --self-test
                                           check that a bad include in a scratch tree is caught
                                           (ctest: architecture/arrows_catches_bad_include)
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

DOC = "docs/architecture.md"
SOURCE_TOPS = ("launcher", "worker", "cli", "tests", "fuzz")
SOURCE_SUFFIXES = (".h", ".hpp", ".cpp", ".cc", ".c", ".cu", ".in")
INCLUDE = re.compile(r'^\s*#\s*include\s*"((?:launcher|worker|cli|tests)/[^"]+)"')


def read_arrows(doc_path):
    """{module: set of modules it may use} from the doc's ```arrows block."""
    arrows, in_block, found = {}, False, False
    if not os.path.isfile(doc_path):
        sys.exit(f"{doc_path}: missing; the arrows live in its §2")
    with open(doc_path, encoding="utf-8") as doc:
        for number, line in enumerate(doc, 1):
            stripped = line.strip()
            if not in_block:
                if stripped == "```arrows":
                    in_block, found = True, True
                continue
            if stripped.startswith("```"):
                break
            stripped = stripped.split("#", 1)[0].strip()
            if not stripped:
                continue
            if "->" not in stripped:
                sys.exit(f"{doc_path}:{number}: expected 'module -> dep, dep', got '{stripped}'")
            module, uses = (part.strip() for part in stripped.split("->", 1))
            if module in arrows:
                sys.exit(f"{doc_path}:{number}: module '{module}' is listed twice")
            arrows[module] = {use.strip() for use in uses.split(",") if use.strip()}
    if not found:
        sys.exit(f"{doc_path}: no ```arrows block (docs/architecture.md §2 holds it)")
    for module, uses in arrows.items():
        for use in uses - {"*"}:
            if use not in arrows:
                sys.exit(f"{doc_path}: '{module} -> {use}': '{use}' is not a listed module")
    return arrows


def module_of(path, modules):
    """The longest listed module that `path` (relative, with '/') lies in, or None."""
    best = None
    for module in modules:
        if path == module or path.startswith(module + "/"):
            if best is None or len(module) > len(best):
                best = module
    return best


def source_files(root):
    for top in SOURCE_TOPS:
        for folder, subfolders, files in os.walk(os.path.join(root, top)):
            subfolders[:] = sorted(d for d in subfolders if not d.startswith("."))
            for name in sorted(files):
                if name.endswith(SOURCE_SUFFIXES):
                    full = os.path.join(folder, name)
                    yield os.path.relpath(full, root).replace(os.sep, "/")


def check(root):
    """Problems found (a list of strings) and a summary line."""
    arrows = read_arrows(os.path.join(root, DOC))
    problems, used, includes = [], set(), 0
    for module in arrows:
        if not os.path.isdir(os.path.join(root, module)):
            problems.append(f"{DOC}: module '{module}' has no folder {module}/ (stale arrow list?)")
    files = list(source_files(root))
    for path in files:
        source = module_of(path, arrows)
        if source is None:
            problems.append(f"{path}: in no module of the arrows in {DOC} §2; add its folder there")
            continue
        with open(os.path.join(root, path), encoding="utf-8", errors="replace") as text:
            for number, line in enumerate(text, 1):
                match = INCLUDE.match(line)
                if not match:
                    continue
                included = match.group(1)
                target = module_of(included, arrows)
                if target is None:
                    problems.append(f'{path}:{number}: includes "{included}", which is in no module of {DOC} §2')
                    continue
                if target == source:
                    continue
                includes += 1
                if target in arrows[source] or "*" in arrows[source]:
                    used.add((source, target))
                    continue
                problems.append(f'{path}:{number}: includes "{included}", but {DOC} §2 has no arrow '
                                f'{source} -> {target} (add it there if the dependency is meant, '
                                f'and link the target)')
    unused = sorted(f"{m} -> {u}" for m, uses in arrows.items() for u in uses
                    if u != "*" and (m, u) not in used)
    summary = (f"{len(files)} source files, {includes} includes across modules, "
               f"{len(arrows)} modules; arrows listed but unused: {', '.join(unused) or 'none'}")
    return problems, summary


def self_test(root):
    """A scratch tree with this tree's arrow list and one include that crosses no arrow: the
    check must fail and name the file, the line and the arrow; the same tree without it passes."""
    with tempfile.TemporaryDirectory() as scratch:
        os.makedirs(os.path.join(scratch, "docs"))
        shutil.copy(os.path.join(root, DOC), os.path.join(scratch, DOC))
        arrows = read_arrows(os.path.join(root, DOC))
        for module in arrows:
            os.makedirs(os.path.join(scratch, module), exist_ok=True)
        good = os.path.join(scratch, "launcher/plan/layout.cpp")
        with open(good, "w") as out:
            out.write('#include "launcher/plan/rank_plan.h"\n#include "launcher/spec/job_spec.h"\n')
        run = [sys.executable, os.path.abspath(__file__), "--root", scratch]
        clean = subprocess.run(run, capture_output=True, text=True)
        if clean.returncode != 0:
            print("self-test: a tree with only listed arrows failed:\n" + clean.stdout + clean.stderr)
            return 1
        # The supervisor is pure policy (§2): it may not reach into the driver.
        bad = os.path.join(scratch, "launcher/supervisor/supervisor.cpp")
        with open(bad, "w") as out:
            out.write('#include "launcher/supervisor/supervisor.h"\n\n#include "launcher/run/driver.h"\n')
        dirty = subprocess.run(run, capture_output=True, text=True)
        expected = ('launcher/supervisor/supervisor.cpp:3: includes "launcher/run/driver.h", '
                    'but docs/architecture.md §2 has no arrow launcher/supervisor -> launcher/run')
        if dirty.returncode == 0 or expected not in dirty.stdout:
            print(f"self-test: the bad include was not reported as expected (exit {dirty.returncode}):\n"
                  + dirty.stdout + dirty.stderr)
            return 1
        caught = [line for line in dirty.stdout.splitlines() if ": includes " in line]
        print("self-test: the bad include was caught:\n" + "\n".join(caught))
        return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--root", required=True, help="the source tree's root")
    parser.add_argument("--self-test", action="store_true")
    args = parser.parse_args()
    root = os.path.abspath(args.root)
    if args.self_test:
        return self_test(root)
    problems, summary = check(root)
    for problem in problems:
        print(problem)
    print(summary)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
