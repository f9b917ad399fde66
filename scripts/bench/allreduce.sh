#!/usr/bin/env bash
# Gloo allreduce bandwidth and latency, 1-64 MiB float32, on 2 and 4 local ranks (processes),
# through the worker runtime's Communicator (worker/bench/allreduce_bench.cpp).
#
#   scripts/bench/allreduce.sh BUILD_DIR [extra dtrain-bench-allreduce flags, e.g. --reps 3]
set -euo pipefail
[ $# -ge 1 ] || { sed -n '2,5p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
build=$1
shift
tool=$build/worker/bench/dtrain-bench-allreduce
[ -x "$tool" ] || { echo "allreduce.sh: no $tool; build it: cmake --build $build --target dtrain-bench-allreduce" >&2; exit 2; }
echo "# load before: $(cut -d' ' -f1-3 /proc/loadavg) ($(nproc) cpus)"
"$tool" --ranks 2,4 --sizes-mib 1,2,4,8,16,32,64 --reps 5 "$@"
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
