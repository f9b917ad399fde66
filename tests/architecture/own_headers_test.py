#!/usr/bin/env python3
"""Each module exports only its own include directory (docs/architecture.md §2), checked.

Configures the tree in a scratch build directory with -DDTRAIN_OWN_HEADERS=ON (each target's
include directory then holds only its own module's folder, so a header resolves only for a
target that links its module) and runs the preprocessor over every product translation unit
(launcher/, worker/, cli/; tests and fuzz targets see the whole tree) with that target's flags.
A TU that includes a header of a module its target does not link fails here, naming the file and
the header. It also preprocesses one TU with dtrain_spec's flags that includes a header of
launcher/run, which must fail: the layout really narrows what can be included.

  own_headers_test.py --source DIR --cmake CMAKE --generator G --cxx CXX [--cuda AUTO|ON|OFF]
"""
import argparse
import concurrent.futures
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile


def preprocess(entry):
    """None when the TU preprocesses, else its first error lines."""
    command = entry.get("command") or " ".join(shlex.quote(a) for a in entry["arguments"])
    command = re.sub(r"(^|\s)\S*ccache\s", " ", command)
    command = re.sub(r" -o \S+ -c ", " -E -o /dev/null -c ", command)
    result = subprocess.run(command, shell=True, cwd=entry["directory"], capture_output=True, text=True)
    if result.returncode == 0:
        return None
    errors = [line for line in result.stderr.splitlines() if "error" in line]
    return "\n  ".join(errors[:3]) or result.stderr[-500:]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--source", required=True)
    parser.add_argument("--cmake", default="cmake")
    parser.add_argument("--generator", default="Ninja")
    parser.add_argument("--cxx", default="c++")
    parser.add_argument("--cuda", default="AUTO")
    args = parser.parse_args()
    source = os.path.abspath(args.source)
    with tempfile.TemporaryDirectory(prefix="dtrain-own-headers-") as build:
        configure = subprocess.run(
            [args.cmake, "-S", source, "-B", build, "-G", args.generator, "-DDTRAIN_OWN_HEADERS=ON",
             "-DBUILD_TESTING=OFF", "-DCMAKE_BUILD_TYPE=RelWithDebInfo", f"-DDTRAIN_CUDA={args.cuda}",
             f"-DCMAKE_CXX_COMPILER={args.cxx}", "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON"],
            capture_output=True, text=True)
        if configure.returncode != 0:
            print("cmake -DDTRAIN_OWN_HEADERS=ON failed:\n" + configure.stdout[-2000:] + configure.stderr[-2000:])
            return 1
        with open(os.path.join(build, "compile_commands.json")) as f:
            entries = json.load(f)
        product = [e for e in entries
                   if os.path.relpath(e["file"], source).split(os.sep)[0] in ("launcher", "worker", "cli")]
        failures = []
        with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
            for entry, error in zip(product, pool.map(preprocess, product)):
                if error:
                    failures.append(f"{os.path.relpath(entry['file'], source)}:\n  {error}")
        for failure in failures:
            print(failure)

        # The layout must narrow: with dtrain_spec's flags, a header of launcher/run is not found.
        spec_tu = next((e for e in product if e["file"].endswith("launcher/spec/job_spec.cpp")), None)
        if spec_tu is None:
            print("no compile command for launcher/spec/job_spec.cpp")
            return 1
        bad = os.path.join(build, "crosses_an_arrow.cpp")
        with open(bad, "w") as out:
            out.write('#include "launcher/run/run_recorder.h"\n')
        probe = dict(spec_tu, file=bad)
        probe["command"] = (spec_tu.get("command") or " ".join(spec_tu["arguments"])).replace(spec_tu["file"], bad)
        if preprocess(probe) is None:
            print("with DTRAIN_OWN_HEADERS=ON, dtrain_spec's flags still find launcher/run/run_recorder.h: "
                  "its include directories are not narrowed")
            return 1
        print(f"{len(product)} product translation units preprocess with only the include directories "
              f"of what their target links; {len(failures)} failed; launcher/spec cannot see launcher/run")
        return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
