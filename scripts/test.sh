#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite through ctest.
# .ci/run calls exactly this. Extra arguments go to ctest (e.g. -R spec, -L integration).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
build_dir=${DTRAIN_BUILD_DIR:-build}
jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDTRAIN_CUDA=AUTO >/dev/null
cmake --build "$build_dir" -j "$jobs"
cd "$build_dir"
ctest --output-on-failure --timeout 600 -j "$jobs" "$@"
