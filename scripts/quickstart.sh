#!/usr/bin/env bash
# Installs what is missing, builds dtrain (Release), and runs a real job on the embedded
# localhost default: configs/quickstart.yaml, 4 workers of the reference trainer.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
build_dir=${DTRAIN_BUILD_DIR:-build-release}
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDTRAIN_CUDA=AUTO >/dev/null
cmake --build "$build_dir" -j "$(nproc 2>/dev/null || echo 2)"

dtrain="$build_dir/cli/dtrain"
echo
echo "== $dtrain submit configs/quickstart.yaml"
status=0
"$dtrain" submit configs/quickstart.yaml || status=$?
run_id=$("$dtrain" status --json | python3 -c 'import json,sys; runs=json.load(sys.stdin); print(runs[-1]["id"] if runs else "")' 2>/dev/null || true)
echo
if [ -n "$run_id" ]; then
  echo "Look at the run:"
  echo "  $dtrain status $run_id        # state, ranks, recent events"
  echo "  $dtrain logs $run_id --tail 5 # what the workers printed"
  echo "  cat \$($dtrain status $run_id --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[\"state\"][\"spec_path\"].rsplit(\"/\",1)[0])')/events.jsonl"
fi
exit $status
