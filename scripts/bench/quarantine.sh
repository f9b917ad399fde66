#!/usr/bin/env bash
# What reading the registry's quarantine costs `dtrain plan` (submit, run and resume read it the
# same way): the mean wall-clock time of N runs of `dtrain plan` on an 8-host spec with no
# registry, with 10,000 past (expired) quarantines and 100 active ones, and with 10,000 active
# ones. The rows are inserted with python3's sqlite3 into a registry made by `dtrain hosts
# quarantine` (schema 2).
#
#   scripts/bench/quarantine.sh BUILD_DIR [N]
set -euo pipefail
[ $# -ge 1 ] || { sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
dtrain=$1/cli/dtrain
runs=${2:-30}
[ -x "$dtrain" ] || { echo "quarantine.sh: no $dtrain; build it: cmake --build $1 --target dtrain" >&2; exit 2; }
work=$(mktemp -d /tmp/dtrain-bench-quarantine.XXXXXX)
trap 'rm -rf "$work"' EXIT
cat > "$work/spec.yaml" <<'EOF'
version: 1
name: bench
hosts: [gpu001, gpu002, gpu003, gpu004, gpu005, gpu006, gpu007, gpu008]
spares: [gpu009, gpu010]
slots_per_host: 8
worker: {command: ["true"]}
EOF
fill() {  # fill HOME PAST ACTIVE
  mkdir -p "$1"
  DTRAIN_HOME=$1 "$dtrain" hosts quarantine gpu003 --reason bench > /dev/null
  python3 - "$1/registry.db" "$2" "$3" <<'EOF'
import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1])
now = int(time.time() * 1000)
past = [(f"old{i:05d}", "bench", '["x"]', now - 10**9 - i, now - 10**8, f"run-{i}") for i in range(int(sys.argv[2]))]
active = [(f"act{i:05d}", "bench", '["x"]', now - i, now + 86400000, f"run-a{i}") for i in range(int(sys.argv[3]))]
db.executemany("INSERT INTO quarantine (host, reason, evidence, since_ms, until_ms, source) VALUES (?,?,?,?,?,?)",
               past + active)
db.commit()
EOF
}
mkdir -p "$work/none"
fill "$work/history" 10000 100
fill "$work/active" 0 10000
echo "# load before: $(cut -d' ' -f1-3 /proc/loadavg) ($(nproc) cpus); mean of $runs runs each"
for home in none history active; do
  start=$(date +%s%N)
  for _ in $(seq "$runs"); do DTRAIN_HOME=$work/$home "$dtrain" plan "$work/spec.yaml" > /dev/null 2>&1; done
  echo "$home: $(( ($(date +%s%N) - start) / runs / 1000000 )) ms per dtrain plan"
done
