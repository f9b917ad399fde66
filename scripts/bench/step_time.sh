#!/usr/bin/env bash
# Trainer step time: configs/quickstart.yaml's job (dtrain-train --hidden 64 --layers 2, global
# batch 64 = ranks x micro 8 x accumulation, Gloo, checkpoint every 50) on 1, 2 and 4 local
# ranks, with every step logged. Prints rank 0's median step_ms over steps 11..200 (the
# trainer's own timer: compute + allreduce + optimizer, checkpoint writes excluded), median of
# --reps runs, and the wall time of the whole `dtrain submit`.
#
#   scripts/bench/step_time.sh BUILD_DIR [--ranks 1,2,4] [--reps 3]
set -euo pipefail
[ $# -ge 1 ] || { sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
build=$(cd "$1" && pwd)
shift
ranks_list=1,2,4 reps=3
while [ $# -gt 0 ]; do
  case $1 in
    --ranks) ranks_list=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    *) echo "step_time.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
dtrain=$build/cli/dtrain
[ -x "$dtrain" ] && [ -x "$build/cli/dtrain-train" ] ||
  { echo "step_time.sh: build dtrain and dtrain-train first: cmake --build $build --target dtrain dtrain-train" >&2; exit 2; }
work=$(mktemp -d /tmp/dtrain-bench-step-XXXXXX)
trap 'rm -rf "$work"' EXIT

median() { sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }

echo "# trainer step time (quickstart model, global batch 64); median of $reps runs"
echo "# load before: $(cut -d' ' -f1-3 /proc/loadavg) ($(nproc) cpus)"
printf '%5s  %5s  %14s  %12s  %14s  %12s\n' ranks accum step_ms_median step_ms_min samples_per_s submit_wall_s
for ranks in ${ranks_list//,/ }; do
  per_run=() walls=()
  for rep in $(seq 1 "$reps"); do
    run=$work/r$ranks-$rep
    mkdir -p "$run"
    cat >"$run/spec.yaml" <<SPEC
version: 1
name: bench-step
slots_per_host: $ranks
worker:
  command: [dtrain-train, --steps, "200", --hidden, "64", --layers, "2", --log-every, "1"]
  backend: gloo
batch:
  global: 64
  micro: 8
heartbeat:
  interval: 500ms
  timeout: 5s
  hang_timeout: 30s
checkpoint:
  interval_steps: 50
  keep: 3
stop_grace: 5s
SPEC
    start=$(date +%s.%N)
    (cd "$run" && DTRAIN_HOME=$run/home timeout 300 "$dtrain" submit spec.yaml >"$run/out" 2>&1) ||
      { echo "step_time.sh: dtrain submit failed ($ranks ranks): $(tail -3 "$run/out")" >&2; exit 1; }
    end=$(date +%s.%N)
    walls+=("$(echo "$end - $start" | bc -l)")
    per_run+=("$(awk '$1 == "step" && $2 > 10 {print $6}' "$run"/home/runs/*/ranks/0.log | median)")
  done
  m=$(printf '%s\n' "${per_run[@]}" | median)
  lo=$(printf '%s\n' "${per_run[@]}" | sort -g | head -1)
  printf '%5s  %5s  %14.2f  %12.2f  %14.0f  %12.2f\n' "$ranks" "$((64 / (ranks * 8)))" "$m" "$lo" \
    "$(echo "64 * 1000 / $m" | bc -l)" "$(printf '%s\n' "${walls[@]}" | median)"
done
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
