#!/usr/bin/env bash
# Runs every benchmark of docs/performance.md in priority order, each under its
# own time limit and all under a total budget; a benchmark that cannot run here (no root for
# the namespace cluster, no torch) says so and the rest go on.
#
#   scripts/bench/run_all.sh [--build DIR] [--no-build] [--budget SECONDS] [--quick]
#
#   --build DIR    build directory (default: build-release); the benchmark targets are built
#                  there first (Release recommended: cmake -DCMAKE_BUILD_TYPE=Release)
#   --no-build     use the binaries already in DIR
#   --budget S     total seconds for all benchmarks (default 3600); each gets what is left
#   --quick        fewer repetitions (3 for recovery/launch/checkpoint, 2 for step time, 1 for fan-out)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
build=$repo/build-release budget=3600 quick=0 build_first=1
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --budget) budget=$2; shift 2 ;;
    --quick) quick=1; shift ;;
    --no-build) build_first=0; shift ;;
    -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run_all.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
build=$(mkdir -p "$build" && cd "$build" && pwd)
if [ $build_first -eq 1 ]; then
  if [ ! -f "$build/build.ninja" ] && [ ! -f "$build/Makefile" ]; then
    cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null || exit 1
  fi
  cmake --build "$build" --target dtrain dtrain-sim dtrain-train dtrain-bench-allreduce dtrain-bench-checkpoint >/dev/null ||
    { echo "run_all.sh: build failed in $build" >&2; exit 1; }
fi

reps=5 step_reps=3 fanout_reps=3
[ $quick -eq 1 ] && reps=3 step_reps=2 fanout_reps=1
deadline=$(($(date +%s) + budget))
failed=()
run() {  # name limit_seconds command...
  local name=$1 limit=$2 left code
  shift 2
  left=$((deadline - $(date +%s)))
  [ "$limit" -gt "$left" ] && limit=$left
  echo
  echo "== $name  ($(uptime | sed 's/.*load/load/'))"
  if [ "$limit" -le 10 ]; then
    echo "# skipped: the total budget is spent"
    failed+=("$name(skipped)")
    return
  fi
  timeout --kill-after=20 "$limit" "$@"
  code=$?
  case $code in
    0) ;;
    77) echo "# skipped: cannot run on this machine" ;;
    124|137) echo "# stopped after ${limit}s"; failed+=("$name(timeout)") ;;
    *) failed+=("$name(exit $code)") ;;
  esac
}

echo "# dtrain benchmarks: $(uname -srm), $(nproc) cpus, $(git -C "$repo" rev-parse --short HEAD 2>/dev/null)"
# A torchrun SIGSTOP repetition alone takes ~60 s (process-group timeout, then its 30 s TERM grace).
run recovery 2400 python3 "$here/recovery.py" --dtrain "$build/cli/dtrain" --reps "$reps" \
  --cases trainer,ddp-dtrain,ddp-dtrain-store,ddp-torchrun --faults kill,stop --torch-python /usr/bin/python3
run sim 900 python3 "$here/sim.py" --build "$build" --reps "$reps"
run host_loss 900 python3 "$here/host_loss.py" --dtrain "$build/cli/dtrain" --reps "$reps"
run launch 600 "$here/launch.sh" "$build/cli/dtrain" --reps "$reps"
run fanout 900 python3 "$here/fanout.py" --dtrain "$build/cli/dtrain" --reps "$fanout_reps"
run allreduce 600 "$here/allreduce.sh" "$build" --reps "$reps"
run checkpoint 600 "$here/checkpoint.sh" "$build" --reps "$reps"
run step_time 600 "$here/step_time.sh" "$build" --reps "$step_reps"
run health 300 "$here/health.sh" "$build" 10
echo
if [ ${#failed[@]} -gt 0 ]; then
  echo "# not complete: ${failed[*]}"
  exit 1
fi
echo "# all benchmarks ran"
