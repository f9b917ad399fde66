#!/usr/bin/env bash
# Installs what is missing, builds dtrain (Release), and runs a real job on the embedded
# localhost default: configs/quickstart.yaml, 4 workers of the reference trainer.
# It builds only what that job needs: `dtrain` (controller and agent, with the Python bootstrap
# embedded) and `dtrain-train` (the reference trainer, which links the worker runtime).
# Tests, fuzzers and benchmarks are built by scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
build_dir=${DTRAIN_BUILD_DIR:-build-release}
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDTRAIN_CUDA=AUTO >/dev/null
cmake --build "$build_dir" -j "$(nproc 2>/dev/null || echo 2)" --target dtrain dtrain-train

dtrain="$build_dir/cli/dtrain"
echo
echo "== $dtrain submit configs/quickstart.yaml"
status=0
"$dtrain" submit configs/quickstart.yaml || status=$?
last_run=$("$dtrain" status --json | python3 -c 'import json,sys; runs=json.load(sys.stdin); print(runs[-1]["run_id"], runs[-1]["path"]) if runs else None' 2>/dev/null || true)
echo
if [ -n "$last_run" ]; then
  read -r run_id run_dir <<<"$last_run"
  echo "The run log is in $run_dir. Look at it with:"
  echo "  $dtrain status $run_id        # state, ranks, recent events"
  echo "  $dtrain logs $run_id --tail 5 # what the workers printed"
  echo "  less $run_dir/events.jsonl    # every event, one JSON object a line"
fi
exit $status
