#!/usr/bin/env bash
# Launch benchmark, srun vs SSH: time to "all workers started" on 1, 2, 4, 8 hosts of the
# namespace test cluster with a real Slurm (scripts/testcluster.sh up N --slurm), from the
# control namespace:
#   srun  `dtrain submit` of a spec with hosts: slurm inside `salloc -N n` (agents as one srun
#         step: transport srun); the allocation itself is not timed (salloc runs the timed part)
#   ssh   `dtrain submit` of the same hosts listed, over the built-in libssh2 client, with
#         ssh.remote_dtrain set to the binary (no copying), outside any allocation
# The worker is /bin/true, one per host. The figure is submit start -> the last worker.started
# event (events.jsonl stamps); "exit" is until `dtrain submit` returns (workers reaped, agents
# stopped, resources released).
#
#   scripts/bench/launch_srun.sh DTRAIN [--hosts 1,2,4,8] [--reps 5]
#
# Needs root and the Debian packages slurm-wlm and munge. Brings up its own cluster (prefix
# "bnsl") and always takes it down. Exit 77 when the machine cannot host it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
testcluster=$repo/scripts/testcluster.sh
export DTRAIN_TESTCLUSTER_PREFIX=${DTRAIN_BENCH_CLUSTER_PREFIX:-bnsl}

# --- inside the control namespace (and, for srun, the allocation): one measurement ----------
if [ "${1:-}" = --in-ctl ]; then
  # --in-ctl DTRAIN TRANSPORT HOSTS(comma list) WORKDIR
  dtrain=$2 transport=$3 hosts=$4 work=$5
  source "$(DTRAIN_TESTCLUSTER_PREFIX=$DTRAIN_TESTCLUSTER_PREFIX "$testcluster" env)"
  spec=$work/launch.yaml
  {
    echo "version: 1"
    echo "name: bench-launch-$transport"
    if [ "$transport" = srun ]; then
      echo "hosts: slurm"
    else
      echo "hosts:"
      for host in ${hosts//,/ }; do echo "  - $host"; done
    fi
    echo "slots_per_host: 1"
    echo "ssh:"
    echo "  user: $DTRAIN_TESTCLUSTER_USER"
    echo "  identity: [$DTRAIN_TESTCLUSTER_KEY]"
    echo "  known_hosts: $DTRAIN_TESTCLUSTER_KNOWN_HOSTS"
    echo "  connect_timeout: 30s"
    echo "  remote_dtrain: $dtrain"
    echo "worker:"
    echo "  command: [/bin/true]"
    echo "  workdir: /"
  } >"$spec"
  export DTRAIN_HOME=$work/home
  start=$(date +%s.%N)
  "$dtrain" submit "$spec" >"$work/dtrain.out" 2>&1 || { echo "dtrain submit failed: $(tail -3 "$work/dtrain.out")" >&2; exit 1; }
  end=$(date +%s.%N)
  last_started=$(python3 - "$DTRAIN_HOME" <<'EOF'
import datetime, glob, json, sys
stamps = []
for path in glob.glob(sys.argv[1] + "/runs/*/events.jsonl"):
    for line in open(path):
        event = json.loads(line)
        if event.get("ev") == "worker.started":
            stamp = datetime.datetime.strptime(event["ts"], "%Y-%m-%dT%H:%M:%S.%fZ")
            stamps.append(stamp.replace(tzinfo=datetime.timezone.utc).timestamp())
print(max(stamps) if stamps else "-")
EOF
)
  echo "$start $end $last_started"
  exit 0
fi

dtrain=${1:?usage: launch_srun.sh DTRAIN [--hosts 1,2,4,8] [--reps 5]}
shift
host_counts=1,2,4,8
reps=5
while [ $# -gt 0 ]; do
  case $1 in
    --hosts) host_counts=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    *) echo "launch_srun.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
dtrain=$(cd "$(dirname "$dtrain")" && pwd)/$(basename "$dtrain")
max_hosts=$(tr ',' '\n' <<<"$host_counts" | sort -n | tail -1)

work=$(mktemp -d "$(dirname "$dtrain")/launch-srun-bench.XXXXXX")  # under the build tree: shared
cleanup() { "$testcluster" down >/dev/null 2>&1 || true; rm -rf "$work"; }
trap cleanup EXIT
status=0
"$testcluster" up "$max_hosts" --share "$(dirname "$dtrain")" --slurm >"$work/up.log" 2>&1 || status=$?
if [ "$status" -eq 77 ]; then cat "$work/up.log" >&2; exit 77; fi
[ "$status" -eq 0 ] || { cat "$work/up.log" >&2; exit 1; }
source "$("$testcluster" env)"

median() { sort -n | awk '{a[NR]=$1} END {if (NR % 2) print a[(NR+1)/2]; else printf "%.3f\n", (a[NR/2]+a[NR/2+1])/2}'; }

printf '%-6s %-10s %-18s %-18s\n' hosts transport "started (median s)" "exit (median s)"
for n in ${host_counts//,/ }; do
  hosts=$(for i in $(seq 1 "$n"); do printf '%s,' "$DTRAIN_TESTCLUSTER_PREFIX-h$i"; done)
  hosts=${hosts%,}
  # The SSH side needs every host key in known_hosts: the cluster wrote them at `up`.
  for transport in srun ssh; do
    : >"$work/started" ; : >"$work/exit"
    for rep in $(seq 1 "$reps"); do
      run_dir=$work/$transport-$n-$rep
      mkdir -p "$run_dir"
      if [ "$transport" = srun ]; then
        line=$("$testcluster" exec ctl salloc -Q -N "$n" --nodelist="$hosts" --ntasks-per-node=1 \
                 "$0" --in-ctl "$dtrain" srun "$hosts" "$run_dir")
      else
        line=$("$testcluster" exec ctl "$0" --in-ctl "$dtrain" ssh "$hosts" "$run_dir")
      fi
      read -r start end last <<<"$line"
      [ "$last" != - ] || { echo "no worker.started in $run_dir" >&2; exit 1; }
      awk -v s="$start" -v l="$last" 'BEGIN {printf "%.3f\n", l - s}' >>"$work/started"
      awk -v s="$start" -v e="$end" 'BEGIN {printf "%.3f\n", e - s}' >>"$work/exit"
    done
    printf '%-6s %-10s %-18s %-18s\n' "$n" "$transport" "$(median <"$work/started")" "$(median <"$work/exit")"
  done
done
