#!/usr/bin/env bash
# What the health checks (dtrain-spec(5) `health:`, issue 29) cost on the launch path.
#  1. `dtrain agent --health-probe REQUEST` REPS times: the built-in checks alone (no site
#     command), with an empty request and with a checkpoint directory + master 127.0.0.1;
#     median and min of the process's wall time and of the checks' own `ms`.
#  2. `dtrain submit` of a trivial job on two local agents, health enabled vs `enabled: false`,
#     REPS times each, interleaved: run.submitted → run.state launching from the run log (the
#     supervisor waits for both hosts' start reports in between).
#
#   scripts/bench/health.sh BUILD_DIR [REPS]     (default 10)
set -euo pipefail
[ $# -ge 1 ] || { sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
build=$1
reps=${2:-10}
dtrain=$build/cli/dtrain
[ -x "$dtrain" ] || { echo "health.sh: no $dtrain; build it: cmake --build $build --target dtrain" >&2; exit 2; }
work=$(mktemp -d /tmp/dtrain-bench-health.XXXXXX)
trap 'rm -rf "$work"' EXIT
echo "# load before: $(cut -d' ' -f1-3 /proc/loadavg) ($(nproc) cpus)"

python3 - "$dtrain" "$work" "$reps" <<'PY'
import json, os, statistics, subprocess, sys, time
dtrain, work, reps = sys.argv[1], sys.argv[2], int(sys.argv[3])

def probe(request):
    walls, own = [], []
    for _ in range(reps):
        start = time.monotonic()
        out = subprocess.run([dtrain, "agent", "--health-probe", json.dumps(request)], capture_output=True, text=True,
                             timeout=60)
        walls.append((time.monotonic() - start) * 1000)
        try:
            own.append(json.loads(out.stdout)["ms"])
        except (ValueError, KeyError):
            sys.exit("health.sh: --health-probe printed no report: " + out.stdout + out.stderr)
    return walls, own

ckpt = os.path.join(work, "ckpt")
os.makedirs(ckpt)
print("| request | process wall (median [min]) | checks' own ms (median [min]) |")
print("|---|---|---|")
for label, request in [("empty", {}), ("checkpoint dir + master 127.0.0.1", {"checkpoint_dir": ckpt, "master_addr": "127.0.0.1"})]:
    walls, own = probe(request)
    print(f"| {label} | {statistics.median(walls):.1f} ms [{min(walls):.1f}] | {statistics.median(own):.1f} ms [{min(own):.1f}] |")

def launching_ms(enabled):
    home = os.path.join(work, "home")
    spec = os.path.join(work, "job.yaml")
    with open(spec, "w") as f:
        f.write("version: 1\nname: health-bench\nhosts: [localhost, 127.0.0.1]\nslots_per_host: 1\n"
                "worker: {command: [/bin/true]}\nconsistency: off\n"
                f"health: {{enabled: {'true' if enabled else 'false'}}}\n")
    env = dict(os.environ, DTRAIN_HOME=home)
    subprocess.run([dtrain, "submit", spec], env=env, capture_output=True, timeout=120, check=True)
    runs = sorted(os.listdir(os.path.join(home, "runs")))
    lines = open(os.path.join(home, "runs", runs[-1], "events.jsonl"))
    events = [e for e in (json.loads(line) for line in lines) if "ev" in e]  # the first line is the header
    def ts(event):
        from datetime import datetime
        return datetime.fromisoformat(event["ts"].replace("Z", "+00:00")).timestamp() * 1000
    submitted = next(e for e in events if e["ev"] == "run.submitted")
    launching = next(e for e in events if e["ev"] == "run.state" and e.get("state") == "launching")
    return ts(launching) - ts(submitted)

timings = {True: [], False: []}
for i in range(reps):
    for enabled in ([True, False] if i % 2 == 0 else [False, True]):
        timings[enabled].append(launching_ms(enabled))
on, off = statistics.median(timings[True]), statistics.median(timings[False])
print()
print("| submit → launching, 2 local agents | median [min] |")
print("|---|---|")
print(f"| health enabled: false | {off:.1f} ms [{min(timings[False]):.1f}] |")
print(f"| health enabled (default) | {on:.1f} ms [{min(timings[True]):.1f}] |")
print(f"| difference | {on - off:+.1f} ms |")
PY
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
