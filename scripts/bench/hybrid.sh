#!/usr/bin/env bash
# Hybrid parallelism in dtrain-train (issue 13): step time and samples/s of DP 4, TP 2 x DP 2,
# PP 2 x DP 2 and TP 2 x PP 2 on 4 local ranks (Gloo, `dtrain submit` on localhost), one model
# (--hidden 256 --layers 3: a column+row pair per pipeline stage) and one global batch (64 =
# data x micro 4 x accumulation). Then the pipeline bubble: PP 2 on 2 ranks at 1..16
# micro-batches per step, each stage's idle time (blocked in send/recv with its neighbour, over
# the whole 1F1B schedule) against (p-1)/(m+p-1). Numbers are the trainer's own timers (mean
# over steps 2..N, rank 0 for the step); median of --reps runs. Also prints each layout's final
# loss next to one rank's (the correctness bound docs/hybrid-parallelism.md quotes). The bubble sweep uses
# --hidden 1024 and global batch 256, so that a micro-batch's compute outweighs a send/recv.
#
#   scripts/bench/hybrid.sh BUILD_DIR [--steps 100] [--reps 3]
set -euo pipefail
[ $# -ge 1 ] || { sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
build=$(cd "$1" && pwd)
shift
steps=100 reps=3
while [ $# -gt 0 ]; do
  case $1 in
    --steps) steps=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    *) echo "hybrid.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
dtrain=$build/cli/dtrain
[ -x "$dtrain" ] && [ -x "$build/cli/dtrain-train" ] ||
  { echo "hybrid.sh: build dtrain and dtrain-train first: cmake --build $build --target dtrain dtrain-train" >&2; exit 2; }
work=$(mktemp -d /tmp/dtrain-bench-hybrid-XXXXXX)
trap 'rm -rf "$work"' EXIT

median() { sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }

# run NAME SLOTS TENSOR PIPELINE GLOBAL MICRO [HIDDEN [STEPS]]: one `dtrain submit`; prints the
# run directory.
run() {
  local dir=$work/$1
  mkdir -p "$dir"
  cat >"$dir/spec.yaml" <<SPEC
version: 1
name: bench-hybrid
slots_per_host: $2
worker:
  command: [dtrain-train, --hidden, "${7:-256}", --layers, "3", --steps, "${8:-$steps}", --log-every, "0"]
  backend: gloo
parallelism: {tensor: $3, pipeline: $4}
batch: {global: $5, micro: $6}
SPEC
  (cd "$dir" && DTRAIN_HOME=$dir/home "$dtrain" submit spec.yaml >"$dir/submit.log" 2>&1) ||
    { echo "hybrid.sh: run $1 failed:" >&2; cat "$dir/submit.log" >&2; exit 1; }
  ls -d "$dir"/home/runs/*
}

# Fields of a rank log's timing lines.
step_ms() { sed -n 's/.*timing over [0-9]* steps: step \([0-9.]*\) ms.*/\1/p' "$1"; }
final_loss() { sed -n 's/.*final step=[0-9]* loss=\([0-9.]*\).*/\1/p' "$1"; }
idle_pct() { sed -n 's/.*pipeline stage [0-9]* of [0-9]*: idle \([0-9.]*\)%.*/\1/p' "$1"; }
# The mean idle % of stage S's ranks in run directory D.
stage_idle() {
  grep -h "pipeline stage $2 of" "$1"/ranks/*.log | sed -n 's/.*idle \([0-9.]*\)%.*/\1/p' |
    awk '{s += $1; n++} END {if (n) printf "%.1f", s / n; else printf "-"}'
}

echo "# dtrain-train hybrid layouts on 4 local ranks: --hidden 256 --layers 3, global batch 64, micro 4, $steps steps, median of $reps"
echo "# $(date -u +%Y-%m-%dT%H:%MZ), load before: $(cut -d' ' -f1-3 /proc/loadavg) ($(nproc) cpus)"
one=$(run one 1 1 1 64 4)
reference=$(final_loss "$one/ranks/0.log")
printf '%-22s %6s %9s %10s %14s %14s %12s\n' layout accum step_ms samples/s "idle stage0 %" "idle stage1 %" "1F1B bubble %"
for layout in "DP4 1 1" "TP2xDP2 2 1" "PP2xDP2 1 2" "TP2xPP2 2 2"; do
  set -- $layout
  name=$1 tensor=$2 pipeline=$3
  data=$((4 / (tensor * pipeline)))
  accum=$((64 / (data * 4)))
  times=() idle0=() idle1=() losses=()
  for rep in $(seq 1 "$reps"); do
    dir=$(run "$name-$rep" 4 "$tensor" "$pipeline" 64 4)
    times+=("$(step_ms "$dir/ranks/0.log")")
    losses+=("$(final_loss "$dir/ranks/0.log")")
    if [ "$pipeline" -gt 1 ]; then
      idle0+=("$(stage_idle "$dir" 0)")
      idle1+=("$(stage_idle "$dir" 1)")
    fi
  done
  step=$(printf '%s\n' "${times[@]}" | median)
  formula=-
  i0=- i1=-
  if [ "$pipeline" -gt 1 ]; then
    formula=$(awk -v p="$pipeline" -v m="$accum" 'BEGIN {printf "%.1f", 100 * (p - 1) / (m + p - 1)}')
    i0=$(printf '%s\n' "${idle0[@]}" | median)
    i1=$(printf '%s\n' "${idle1[@]}" | median)
  fi
  printf '%-22s %6s %9s %10.0f %14s %14s %12s\n' "$name" "$accum" "$step" "$(awk -v s="$step" 'BEGIN {print 64000 / s}')" \
    "$i0" "$i1" "$formula"
  echo "#   final loss ${losses[0]} vs one rank $reference (relative difference $(awk -v a="${losses[0]}" -v b="$reference" 'BEGIN {d = a - b; if (d < 0) d = -d; printf "%.2g", d / b}'))" >&2
done

echo
bubble_steps=$(( steps < 20 ? steps : 20 ))
echo "# pipeline bubble: PP 2 on 2 ranks, --hidden 1024, global batch 256 = m micro-batches of 256/m, $bubble_steps steps"
printf '%4s %9s %14s %14s %12s\n' m step_ms "idle stage0 %" "idle stage1 %" "1F1B bubble %"
for m in 1 2 4 8 16; do
  idle0=() idle1=() times=()
  for rep in $(seq 1 "$reps"); do
    dir=$(run "bubble-$m-$rep" 2 1 2 256 $((256 / m)) 1024 "$bubble_steps")
    times+=("$(step_ms "$dir/ranks/0.log")")
    idle0+=("$(stage_idle "$dir" 0)")
    idle1+=("$(stage_idle "$dir" 1)")
  done
  printf '%4s %9s %14s %14s %12s\n' "$m" "$(printf '%s\n' "${times[@]}" | median)" \
    "$(printf '%s\n' "${idle0[@]}" | median)" "$(printf '%s\n' "${idle1[@]}" | median)" \
    "$(awk -v m="$m" 'BEGIN {printf "%.1f", 100 / (m + 1)}')"
done
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
