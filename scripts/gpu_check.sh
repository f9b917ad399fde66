#!/usr/bin/env bash
# The checks that need a real GPU, as one script to run when a GPU machine is lent (its time is
# short: build and test everything else first). Exit 0: every check passed; 1: a check failed;
# 77: no GPU here (skipped, says why). A summary is written to $OUT/gpu_check.txt (or /tmp).
#
#   scripts/gpu_check.sh [BUILD_DIR] [--no-build] [--dry-run]
#
#  1. nvidia-smi lists the GPUs (else skip);
#  2. configure with DTRAIN_CUDA=ON and build (the NCCL worker path) unless --no-build;
#  3. the tests that skip without a GPU: `ctest -R "NCCL|GPU"` (trainer: NCCL matches Gloo's loss;
#     hybrid TP 2 x PP 2 on NCCL, which needs 4 GPUs and says so with fewer; in-place recovery on
#     NCCL, a survivor aborting its communicator at gen.changed, which needs 2);
#  4. the agent's GPU metrics through the real NVML (dlopen of libnvidia-ml.so.1): a local job's
#     metrics.jsonl names gpu_source "nvml", one entry per GPU, and memory.total as nvidia-smi
#     reports it (within 1 %);
#  5. the nvidia-smi fallback: the same job with DTRAIN_NVML_LIBRARY pointing nowhere reports
#     gpu_source "nvidia-smi".
# --dry-run exercises the script here, without a GPU: tests/fakes' nvidia-smi and fake NVML
# stand in, steps 2-3 are left out.
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
build=$repo/build
do_build=1 dry=0
for arg in "$@"; do
  case $arg in
    --no-build) do_build=0 ;;
    --dry-run) dry=1 do_build=0 ;;
    -*) echo "gpu_check.sh: unknown option '$arg'" >&2; exit 2 ;;
    *) build=$(cd "$arg" && pwd) ;;
  esac
done
summary=${OUT:-/tmp}/gpu_check.txt
: > "$summary"
say() { echo "$*" | tee -a "$summary"; }
failed=0
check() {  # check NAME COMMAND...: runs it, records pass/fail
  local name=$1
  shift
  if "$@"; then say "PASS $name"; else say "FAIL $name"; failed=1; fi
}

if [ "$dry" = 1 ]; then
  export PATH=$repo/tests/fakes:$PATH
  fake_nvml=$(find "$build" -name 'libfake_nvml.so' -print -quit)
  [ -n "$fake_nvml" ] || { echo "gpu_check.sh: --dry-run needs the fake NVML: cmake --build $build --target fake_nvml" >&2; exit 2; }
  export DTRAIN_NVML_LIBRARY=$fake_nvml
fi

# 1. GPUs
query=index,utilization.gpu,memory.used,memory.total,power.draw,temperature.gpu,ecc.errors.corrected.volatile.total,ecc.errors.uncorrected.volatile.total
if ! gpus_csv=$(nvidia-smi --query-gpu=$query --format=csv,noheader,nounits 2>&1); then
  say "SKIP no GPU here: nvidia-smi: ${gpus_csv:-not found}"
  exit 77
fi
gpu_count=$(printf '%s\n' "$gpus_csv" | grep -c .)
say "gpus: $gpu_count ($(date -u +%FT%TZ), $(hostname))"
printf '%s\n' "$gpus_csv" | sed 's/^/  /' | tee -a "$summary"

# 2-3. the NCCL path and its tests
if [ "$do_build" = 1 ]; then
  check "configure with CUDA/NCCL" cmake -S "$repo" -B "$build" -G Ninja -DDTRAIN_CUDA=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo
  check "build" cmake --build "$build" -j "$(nproc)"
  # --no-tests=error: a regex that matches nothing is a failure, not a pass; -E gpu_check: not
  # the dry run of this script. A skip (exit 77) passes ctest, so the output is searched for one:
  # the NCCL tests skip only when no GPU or no NCCL build is there, which here is a failure.
  ctest_nccl() {
    local log=${OUT:-/tmp}/gpu_check_ctest.log
    ctest --test-dir "$build" -R "NCCL|GPU" -E gpu_check --no-tests=error --output-on-failure > "$log" 2>&1
    local rc=$?
    cat "$log" | tail -20 | tee -a "$summary"
    # A case named "(skips without N GPUs)" may skip on a host with fewer (tests/skip.h
    # require_gpus); ctest's lines about a test carry its name.
    [ "$rc" = 0 ] && ! grep -v -E "skips without [0-9]+ GPUs" "$log" | grep -q "Skipped"
  }
  check "ctest -R 'NCCL|GPU' (none skipped but for want of GPUs)" ctest_nccl
fi

# 4-5. the agent's GPU metrics, from a real local job
dtrain=$build/cli/dtrain
[ -x "$dtrain" ] || { say "FAIL no $dtrain (build it first)"; exit 1; }
work=$(mktemp -d /tmp/dtrain-gpu-check-XXXXXX)
trap 'rm -rf "$work"' EXIT
cat > "$work/job.yaml" <<'EOF'
version: 1
name: gpucheck
hosts: [localhost]
slots_per_host: 1
worker: {command: [sleep, "7"]}
heartbeat: {interval: 1s}
EOF

# gpu_metrics_match EXPECTED_SOURCE: runs the job, checks metrics.jsonl's newest resources line.
gpu_metrics_match() {
  local expected=$1 home
  home=$(mktemp -d "$work/home-XXXXXX")
  DTRAIN_HOME=$home "$dtrain" submit "$work/job.yaml" > "$home/submit.out" 2>&1 ||
    { sed 's/^/    /' "$home/submit.out" | tail -20; return 1; }
  local metrics
  metrics=$(ls "$home"/runs/*/metrics.jsonl 2>/dev/null | head -1)
  [ -n "$metrics" ] || { echo "    no metrics.jsonl"; return 1; }
  python3 - "$metrics" "$expected" "$gpu_count" "$dry" "$gpus_csv" 2>&1 <<'PY' | tee -a "$summary"
import json, sys
path, expected, count, dry, csv = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1", sys.argv[5]
host = None
for line in open(path):
    try:
        entry = json.loads(line)
    except ValueError:
        continue
    for h in entry.get("hosts", []) if isinstance(entry, dict) else []:
        if isinstance(h, dict) and "gpu_source" in h:
            host = h
if host is None:
    sys.exit("    no host resources line in " + path)
print("    %s: gpu_source %s, %d GPUs: %s" % (expected, host.get("gpu_source"), len(host.get("gpus", [])),
      json.dumps(host.get("gpus", []))[:400]))
if host.get("gpu_source") != expected:
    sys.exit("    expected gpu_source %s (gpu_error: %s)" % (expected, host.get("gpu_error")))
if len(host.get("gpus", [])) != count:
    sys.exit("    expected %d GPUs" % count)
if not dry:  # the real NVML and nvidia-smi must agree on the memory size
    totals = {int(f.split(",")[0]): float(f.split(",")[3]) for f in csv.splitlines() if f.strip()}
    for gpu in host["gpus"]:
        want, got = totals.get(gpu["index"]), gpu.get("memory_total_mb")
        if want is None or got is None or abs(got - want) > 0.01 * want:
            sys.exit("    GPU %s memory_total_mb %s, nvidia-smi says %s" % (gpu["index"], got, want))
PY
  return "${PIPESTATUS[0]}"
}
check "agent GPU metrics through NVML" gpu_metrics_match nvml
nvml_library=${DTRAIN_NVML_LIBRARY-}
export DTRAIN_NVML_LIBRARY=/nonexistent/libnvidia-ml.so.1
check "agent GPU metrics through the nvidia-smi fallback" gpu_metrics_match nvidia-smi
if [ -n "$nvml_library" ]; then export DTRAIN_NVML_LIBRARY=$nvml_library; else unset DTRAIN_NVML_LIBRARY; fi
say "summary: $summary"
exit $failed
