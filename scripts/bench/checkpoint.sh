#!/usr/bin/env bash
# Checkpoint write throughput: the worker runtime's Checkpointer (CRC32C, temp file, fsync,
# rename, directory fsync, manifest, pruning the step before) vs
# `dd if=/dev/zero bs=1M count=N conv=fsync`, same sizes, same directory, interleaved
# repetitions; medians. Each checkpoint figure is one steady-state save (the tool saves once
# untimed first, so the timed save also verifies what it keeps and deletes the older step).
#
#   scripts/bench/checkpoint.sh BUILD_DIR [--dir DIR (default /tmp)] [--sizes-mib 16,64,256] [--reps 5]
set -euo pipefail
[ $# -ge 1 ] || { sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
build=$1
shift
dir=/tmp sizes=16,64,256 reps=5
while [ $# -gt 0 ]; do
  case $1 in
    --dir) dir=$2; shift 2 ;;
    --sizes-mib) sizes=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    *) echo "checkpoint.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
tool=$build/worker/bench/dtrain-bench-checkpoint
[ -x "$tool" ] || { echo "checkpoint.sh: no $tool; build it: cmake --build $build --target dtrain-bench-checkpoint" >&2; exit 2; }
work=$(mktemp -d "$dir/dtrain-bench-disk-XXXXXX")
trap 'rm -rf "$work"' EXIT

median() { sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }

echo "# checkpoint write: $(df -hT "$dir" | awk 'NR==2 {print $1 " (" $2 ")"}') at $dir; median of $reps; MB = 10^6 bytes"
echo "# load before: $(cut -d' ' -f1-3 /proc/loadavg) ($(nproc) cpus)"
printf '%8s  %12s  %12s  %8s  %14s  %14s\n' size_MiB ckpt_MB/s dd_MB/s ckpt/dd ckpt_median_s crc32c_MB/s
for size in ${sizes//,/ }; do
  ckpt_s=() dd_s=() crc=()
  for _ in $(seq 1 "$reps"); do
    # "checkpoint SIZE median_s min_s MB/s crc32c_MB/s" for one save
    output=$("$tool" --dir "$work" --sizes-mib "$size" --reps 1)
    crc_implementation=$(sed -n 's/^# crc32c: //p' <<<"$output")
    read -r _ _ seconds _ _ crc_rate < <(grep '^checkpoint ' <<<"$output")
    ckpt_s+=("$seconds")
    crc+=("$crc_rate")
    start=$(date +%s.%N)
    dd if=/dev/zero of="$work/dd.bin" bs=1M count="$size" conv=fsync status=none
    end=$(date +%s.%N)
    dd_s+=("$(echo "$end - $start" | bc -l)")
    rm -f "$work/dd.bin"
  done
  c=$(printf '%s\n' "${ckpt_s[@]}" | median)
  d=$(printf '%s\n' "${dd_s[@]}" | median)
  bytes=$((size * 1048576))
  printf '%8s  %12.1f  %12.1f  %8.2f  %14.3f  %14.0f\n' "$size" "$(echo "$bytes / $c / 1000000" | bc -l)" \
    "$(echo "$bytes / $d / 1000000" | bc -l)" "$(echo "$d / $c" | bc -l)" "$c" "$(printf '%s\n' "${crc[@]}" | median)"
done
echo "# crc32c implementation: $crc_implementation"
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
