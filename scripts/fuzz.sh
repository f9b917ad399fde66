#!/usr/bin/env bash
# libFuzzer campaigns on the parsers of untrusted input (fuzz/, docs/architecture.md §6). Builds the targets
# with clang in their own build directory (-DDTRAIN_FUZZ=ON), then fuzzes each target in turn
# for SECONDS, starting from its seed corpus fuzz/corpus/<target>/. New inputs go to
# <build>/corpus/<target>/, never into the seed folder; crashes go to <build>/artifacts/<target>/.
# Prints one summary line per target (also appended to <build>/fuzz-summary.txt).
#
#   scripts/fuzz.sh [TARGET|all] [SECONDS]        default: all targets, 600 s each
#   DTRAIN_FUZZ_BUILD_DIR=dir                      default: build-fuzz
#
# A crash: reproduce with `<build>/fuzz/fuzz_<target> <artifact>`, shrink it with
# `-minimize_crash=1 -runs=10000`, fix the parser, and add the input to fuzz/corpus/<target>/
# so every test run replays it. Exit status: 0 when no target crashed, 1 otherwise.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
build=${DTRAIN_FUZZ_BUILD_DIR:-$repo/build-fuzz}
wanted=${1:-all}
seconds=${2:-600}
if ! [[ $seconds =~ ^[0-9]+$ ]] || [ "$seconds" -eq 0 ]; then
  echo "fuzz.sh: SECONDS must be a whole number above 0, not '$seconds'" >&2
  exit 2
fi

# clang and its libFuzzer runtime: Debian packages, installed like scripts/setup.sh does.
missing=()
command -v clang++ >/dev/null 2>&1 || missing+=(clang)
dpkg-query -W -f='${Status}' libclang-rt-14-dev 2>/dev/null | grep -q 'install ok installed' ||
  missing+=(libclang-rt-14-dev)
if [ ${#missing[@]} -gt 0 ]; then
  echo "fuzz.sh: installing ${missing[*]}"
  sudo_cmd=()
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || { echo "fuzz.sh: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
    sudo_cmd=(sudo)
  fi
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

CC=clang CXX=clang++ cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DDTRAIN_CUDA=OFF -DDTRAIN_FUZZ=ON >/dev/null
# The targets the tree has (targets whose parser is missing are left out by fuzz/CMakeLists.txt).
available=$(cmake --build "$build" --target help | sed -n 's/^\(fuzz_[a-z_]*\):.*/\1/p' | sed 's/^fuzz_//' | sort -u)
if [ "$wanted" = all ]; then
  targets=$available
elif grep -qx "$wanted" <<<"$available"; then
  targets=$wanted
else
  echo "fuzz.sh: no fuzz target '$wanted'; the targets are:" $available >&2
  exit 2
fi
# shellcheck disable=SC2046
cmake --build "$build" --target $(sed 's/^/fuzz_/' <<<"$targets")

# Longest input per target: big enough for every seed and for what the parser sees in practice
# (a spec, a hostfile, a few frames), small enough that the fuzzer spends its time on structure.
max_len() {
  case $1 in
    hostlist) echo 256 ;;
    host_filters|control_request) echo 1024 ;;
    spec_loader|agent_frame) echo 8192 ;;
    *) echo 4096 ;;
  esac
}

status=0
for target in $targets; do
  work=$build/corpus/$target
  artifacts=$build/artifacts/$target
  log=$build/logs/$target.log
  mkdir -p "$work" "$artifacts" "$build/logs"
  # -timeout: a unit that takes 30 s is a bug even on a loaded machine (10 s gave false alarms
  # while other builds ran).
  options=(-max_len="$(max_len "$target")" -timeout=30 -rss_limit_mb=2048 -artifact_prefix="$artifacts/"
           -print_final_stats=1)
  [ -f "$repo/fuzz/dict/$target.dict" ] && options+=(-dict="$repo/fuzz/dict/$target.dict")
  echo "fuzz.sh: $target for ${seconds}s (log: $log)"
  before=$(find "$work" -type f | wc -l)
  : >"$log"
  # libFuzzer stops at the first crash; start it again (the crash is kept as an artifact) until
  # the time is up, so one bug does not end the campaign. At most 20 starts.
  started=$SECONDS
  execs=0 starts=0 code=0
  while remaining=$((seconds - (SECONDS - started))); [ "$remaining" -gt 0 ] && [ "$starts" -lt 20 ]; do
    starts=$((starts + 1))
    set +e
    ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
      "$build/fuzz/fuzz_$target" "${options[@]}" -max_total_time="$remaining" "$work" "$repo/fuzz/corpus/$target" \
      >"$log.run" 2>&1
    code=$?
    set -e
    cat "$log.run" >>"$log"
    run_execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log.run" | tail -1 || true)
    execs=$((execs + ${run_execs:-0}))
    [ "$code" -eq 0 ] && break
  done
  rm -f "$log.run"
  elapsed=$((SECONDS - started))
  rate=$(( execs / (elapsed > 0 ? elapsed : 1) ))
  # (|| true: grep finds nothing in the log of a target that failed to start)
  coverage=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | sed 's/cov: //' || true)
  features=$(grep -o 'ft: [0-9]*' "$log" | tail -1 | sed 's/ft: //' || true)
  added=$(( $(find "$work" -type f | wc -l) - before ))
  crashes=$(grep -o "Test unit written to [^ ]*" "$log" | sed 's/Test unit written to //' | sort -u || true)
  if [ -n "$crashes" ] || [ "$code" -ne 0 ]; then
    status=1
    found="findings: $(tr '\n' ' ' <<<"${crashes:-exit $code, see $log}")"
  else
    found="findings: none"
  fi
  line="fuzz: $target: ${elapsed}s, $execs execs, $rate execs/s, cov ${coverage:-?} ft ${features:-?}, +$added corpus inputs, $starts start(s), $found"
  echo "$line"
  echo "$(date -u +%FT%TZ) $line" >>"$build/fuzz-summary.txt"
done
exit $status
