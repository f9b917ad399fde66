#!/usr/bin/env bash
# Checkpoint write throughput: the worker runtime's Checkpointer (CRC32C, temp file, fsync,
# rename, directory fsync, manifest) vs `dd if=/dev/zero bs=1M count=N conv=fsync`, same sizes,
# same directory, interleaved repetitions (each goes first every other time); medians, then
# every repetition's time (this disk's times vary a lot with the load). Each checkpoint figure
# is one steady-state save (the tool saves once untimed first, so the timed save has an older
# step to prune; pruning itself runs after save() returns, and the next save waits for it).
#
#   scripts/bench/checkpoint.sh BUILD_DIR [--dir DIR (default /tmp)] [--sizes-mib 16,64,256] [--reps 5]
#   scripts/bench/checkpoint.sh BUILD_DIR --stall [--dir DIR] [--steps 61] [--interval 5]
#                               [--model '--hidden 1024 --layers 4']
#
# --stall: how long the training loop stops per save. dtrain-train --standalone runs three
# times (no checkpoints; synchronous saves; --ckpt-async), every step logged and timestamped as
# its line arrives. The gap between the lines of steps N and N+1, less step N+1's own step_ms,
# is what the loop did between the two steps: beat and log, plus the save when N is a multiple
# of --interval. Stall per save = median gap after a save step - median gap after the others.
set -euo pipefail
[ $# -ge 1 ] || { sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
build=$1
shift
dir=/tmp sizes=16,64,256 reps=5 stall=0 steps=61 interval=5 model='--hidden 1024 --layers 4'
while [ $# -gt 0 ]; do
  case $1 in
    --dir) dir=$2; shift 2 ;;
    --sizes-mib) sizes=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --stall) stall=1; shift ;;
    --steps) steps=$2; shift 2 ;;
    --interval) interval=$2; shift 2 ;;
    --model) model=$2; shift 2 ;;
    *) echo "checkpoint.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
median() { sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }

if ((stall)); then
  trainer=$build/cli/dtrain-train
  [ -x "$trainer" ] || { echo "checkpoint.sh: no $trainer; build it: cmake --build $build --target dtrain-train" >&2; exit 2; }
  work=$(mktemp -d "$dir/dtrain-bench-stall-XXXXXX")
  trap 'rm -rf "$work"' EXIT
  echo "# training stall per save: dtrain-train --standalone $model --steps $steps, a save every $interval steps, at $dir"
  echo "# load before: $(cut -d' ' -f1-3 /proc/loadavg) ($(nproc) cpus)"
  printf '%-6s  %12s  %14s  %14s  %12s  %10s  %10s  %8s\n' mode step_ms gap_plain_ms gap_save_ms stall_ms stall/step ckpt_MB wall_s
  for mode in none sync async; do
    ckpt=()
    case $mode in
      sync) ckpt=(--ckpt-dir "$work/$mode" --ckpt-interval "$interval") ;;
      async) ckpt=(--ckpt-dir "$work/$mode" --ckpt-interval "$interval" --ckpt-async) ;;
    esac
    start=$EPOCHREALTIME
    # shellcheck disable=SC2086
    "$trainer" --standalone $model --steps "$steps" --log-every 1 "${ckpt[@]}" |
      while IFS= read -r line; do printf '%s %s\n' "$EPOCHREALTIME" "$line"; done >"$work/$mode.log"
    wall=$(echo "$EPOCHREALTIME - $start" | bc -l)
    bytes=0
    [ "$mode" = none ] || bytes=$(find "$work/$mode" -name 'shard-*.bin' -printf '%s\n' | sort -g | tail -1)
    # "<time> step N loss L step_ms S": gap after step N-1 = time(N) - time(N-1) - step_ms(N).
    awk -v interval="$interval" -v mode="$mode" '
      $2 == "step" { t = $1; n = $3; ms = $7
        if (n > 1 && previous_n == n - 1) {
          gap = (t - previous_t) * 1000 - ms
          if (mode != "none" && (n - 1) % interval == 0) print "save", gap; else print "plain", gap
        }
        if (n > 1) print "step", ms
        previous_t = t; previous_n = n }' "$work/$mode.log" >"$work/$mode.gaps"
    step_ms=$(awk '$1 == "step" {print $2}' "$work/$mode.gaps" | median)
    plain=$(awk '$1 == "plain" {print $2}' "$work/$mode.gaps" | median)
    if [ "$mode" = none ]; then
      printf '%-6s  %12.1f  %14.2f  %14s  %12s  %10s  %10s  %8.1f\n' "$mode" "$step_ms" "$plain" - - - - "$wall"
    else
      saved=$(awk '$1 == "save" {print $2}' "$work/$mode.gaps" | median)
      printf '%-6s  %12.1f  %14.2f  %14.2f  %12.2f  %9.1f%%  %10.1f  %8.1f\n' "$mode" "$step_ms" "$plain" "$saved" \
        "$(echo "$saved - $plain" | bc -l)" "$(echo "100 * ($saved - $plain) / $step_ms" | bc -l)" \
        "$(echo "$bytes / 1000000" | bc -l)" "$wall"
    fi
  done
  echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
  exit 0
fi

tool=$build/worker/bench/dtrain-bench-checkpoint
[ -x "$tool" ] || { echo "checkpoint.sh: no $tool; build it: cmake --build $build --target dtrain-bench-checkpoint" >&2; exit 2; }
work=$(mktemp -d "$dir/dtrain-bench-disk-XXXXXX")
trap 'rm -rf "$work"' EXIT

echo "# checkpoint write: $(df -hT "$dir" | awk 'NR==2 {print $1 " (" $2 ")"}') at $dir; median of $reps; MB = 10^6 bytes"
echo "# load before: $(cut -d' ' -f1-3 /proc/loadavg) ($(nproc) cpus)"
printf '%8s  %12s  %12s  %8s  %14s  %14s\n' size_MiB ckpt_MB/s dd_MB/s ckpt/dd ckpt_median_s crc32c_MB/s
run_checkpoint() {
  # "checkpoint SIZE median_s min_s MB/s crc32c_MB/s" for one save
  local output seconds crc_rate
  output=$("$tool" --dir "$work" --sizes-mib "$size" --reps 1)
  crc_implementation=$(sed -n 's/^# crc32c: //p' <<<"$output")
  read -r _ _ seconds _ _ crc_rate < <(grep '^checkpoint ' <<<"$output")
  ckpt_s+=("$seconds")
  crc+=("$crc_rate")
}
run_dd() {
  local start end
  start=$EPOCHREALTIME
  dd if=/dev/zero of="$work/dd.bin" bs=1M count="$size" conv=fsync status=none
  end=$EPOCHREALTIME
  dd_s+=("$(echo "$end - $start" | bc -l)")
  rm -f "$work/dd.bin"
}
raw=
for size in ${sizes//,/ }; do
  ckpt_s=() dd_s=() crc=()
  for rep in $(seq 1 "$reps"); do
    # Each starts on a settled disk (sync, untimed): the tool deletes two steps' files when it
    # is done and dd one file, and on a file system mounted with online discard the next
    # journal commit, i.e. the next fsync, pays for that (seen here: 0.3 s vs 1-2 s at 256 MiB
    # for whichever ran second). And each goes first every other time.
    if ((rep % 2)); then sync; run_checkpoint; sync; run_dd; else sync; run_dd; sync; run_checkpoint; fi
  done
  c=$(printf '%s\n' "${ckpt_s[@]}" | median)
  d=$(printf '%s\n' "${dd_s[@]}" | median)
  bytes=$((size * 1048576))
  printf '%8s  %12.1f  %12.1f  %8.2f  %14.3f  %14.0f\n' "$size" "$(echo "$bytes / $c / 1000000" | bc -l)" \
    "$(echo "$bytes / $d / 1000000" | bc -l)" "$(echo "$d / $c" | bc -l)" "$c" "$(printf '%s\n' "${crc[@]}" | median)"
  raw="$raw# $size MiB, each repetition (s): checkpoint ${ckpt_s[*]}; dd $(printf '%.3f ' "${dd_s[@]}")"$'\n'
done
printf '%s' "$raw"
echo "# crc32c implementation: $crc_implementation"
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
