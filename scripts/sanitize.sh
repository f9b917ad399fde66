#!/usr/bin/env bash
# The unit tests under AddressSanitizer + UndefinedBehaviorSanitizer (leaks included), in their
# own build directory (default build-asan; Debug, no CUDA). Run it after changing memory-heavy
# code. Exit status: ctest's.
#
#   scripts/sanitize.sh [BUILD_DIR]
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$repo/build-asan}
flags="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DDTRAIN_CUDA=OFF \
  -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" >/dev/null
targets=$(cd "$build" && ninja -t targets all | sed -n 's/^\(tests\/unit_[a-z_]*_test\):.*/\1/p' | sort -u)
# shellcheck disable=SC2086
cmake --build "$build" --target $targets
export ASAN_OPTIONS=detect_leaks=1:halt_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
cd "$build" && ctest -R '^unit/' -j "$(nproc)" --output-on-failure
