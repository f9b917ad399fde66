#!/usr/bin/env bash
# `dtrain usage` over a registry of N synthetic runs (default 100,000; 2 hosts x 8 GPUs each,
# one in ten shrinking half-way), inserted through launcher/registry's API by the hidden
# `dtrain registry fill-synthetic`. Goal (issue 15): every grouping under 1 s, and the read
# commands too. Prints the fill time and the median of 5 wall-clock runs of each `dtrain usage
# --by ...`, `dtrain history --limit 50`, `dtrain hosts --reliability` and `dtrain usage --capacity`
# (a month of days for the 500 hosts).
#
#   scripts/bench/registry.sh BUILD_DIR [RUNS]
set -euo pipefail
[ $# -ge 1 ] || { sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
build=$1
runs=${2:-100000}
dtrain=$build/cli/dtrain
[ -x "$dtrain" ] || { echo "registry.sh: no $dtrain; build it: cmake --build $build --target dtrain" >&2; exit 2; }
home=$(mktemp -d /tmp/dtrain-bench-registry.XXXXXX)
trap 'rm -rf "$home"' EXIT
export DTRAIN_HOME=$home
now() { date +%s.%N; }
echo "# load before: $(cut -d' ' -f1-3 /proc/loadavg) ($(nproc) cpus)"
start=$(now)
"$dtrain" registry fill-synthetic --runs "$runs" >/dev/null
echo "fill: $runs runs in $(echo "$(now) - $start" | bc) s; registry $(du -h "$home/registry.db" | cut -f1)"
# Median of 5 wall-clock runs of `dtrain ARGS...`.
time_command() {
  local times=()
  for _ in 1 2 3 4 5; do
    start=$(now)
    "$dtrain" "$@" >/dev/null
    times+=("$(echo "$(now) - $start" | bc)")
  done
  median=$(printf '%s\n' "${times[@]}" | sort -n | sed -n 3p)
  echo "$* over $runs runs: median ${median} s (of ${times[*]})"
}
for by in tenant user host month; do
  time_command usage --by "$by"
done
time_command history --limit 50
time_command hosts --reliability
time_command usage --capacity --since 2026-03 --until 2026-04
start=$(now)
"$dtrain" usage --by month --since 2026-03 --until 2026-04 >/dev/null
echo "usage --by month --since 2026-03 --until 2026-04: $(echo "$(now) - $start" | bc) s"
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
