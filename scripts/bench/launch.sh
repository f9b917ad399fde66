#!/usr/bin/env bash
# Launch benchmark: time to "all workers started" on 1, 2, 4, 8 hosts of the namespace test
# cluster (scripts/testcluster.sh), dtrain vs `pdsh -S -w HOSTS true`, from the control namespace,
# same hosts, same user key, same known_hosts.
#
#   scripts/bench/launch.sh DTRAIN [--hosts 1,2,4,8] [--reps 5]
#
# dtrain: `dtrain submit` of a spec whose worker is /bin/true (one per host), with
# ssh.remote_dtrain set to DTRAIN itself (no copying); the figure is submit start -> the last
# worker.started event (from events.jsonl, ms stamps); "exit" is until `dtrain submit` returns
# (workers reaped, agents stopped, resources released). pdsh: start -> exit of
# `pdsh -S -w HOSTS true` over OpenSSH (PDSH_RCMD_TYPE=ssh, the cluster's ssh_config).
# Needs root (network namespaces). Brings up its own cluster (prefix "bnch") and always takes it
# down. Exit 77 when the machine cannot host the cluster.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
testcluster=$repo/scripts/testcluster.sh
export DTRAIN_TESTCLUSTER_PREFIX=${DTRAIN_BENCH_CLUSTER_PREFIX:-bnch}

# --- inside the control namespace: one measurement -----------------------------------------
if [ "${1:-}" = --in-ctl ]; then
  # --in-ctl DTRAIN TOOL HOSTS(comma list) WORKDIR
  dtrain=$2 tool=$3 hosts=$4 work=$5
  source "$(DTRAIN_TESTCLUSTER_PREFIX=$DTRAIN_TESTCLUSTER_PREFIX "$testcluster" env)"
  if [ "$tool" = pdsh ]; then
    start=$(date +%s.%N)
    PDSH_RCMD_TYPE=ssh PDSH_SSH_ARGS="-F $DTRAIN_TESTCLUSTER_SSH_CONFIG -x %h" \
      pdsh -S -w "$hosts" true >"$work/pdsh.out" 2>&1 || { echo "pdsh failed: $(tail -3 "$work/pdsh.out")" >&2; exit 1; }
    end=$(date +%s.%N)
    echo "$start $end -"
    exit 0
  fi
  spec=$work/launch.yaml
  {
    echo "version: 1"
    echo "name: bench-launch"
    echo "hosts:"
    for host in ${hosts//,/ }; do echo "  - $host"; done
    echo "slots_per_host: 1"
    echo "ssh:"
    echo "  user: $DTRAIN_TESTCLUSTER_USER"
    echo "  identity: [$DTRAIN_TESTCLUSTER_KEY]"
    echo "  known_hosts: $DTRAIN_TESTCLUSTER_KNOWN_HOSTS"
    echo "  connect_timeout: 30s"  # 64 handshakes at once on 2 loaded cores can take longer than 5 s (so can pdsh's)
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
            moment = datetime.datetime.strptime(event["ts"], "%Y-%m-%dT%H:%M:%S.%fZ")
            stamps.append(moment.replace(tzinfo=datetime.timezone.utc).timestamp())
print("%.3f" % max(stamps) if stamps else "-")
EOF
)
  echo "$start $end $last_started"
  exit 0
fi

# --- outside: the cluster and the table -------------------------------------------------------
[ $# -ge 1 ] || { sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
dtrain=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
shift
host_counts=1,2,4,8
reps=5
while [ $# -gt 0 ]; do
  case $1 in
    --hosts) host_counts=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    *) echo "launch.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
[ -x "$dtrain" ] || { echo "launch.sh: '$dtrain' is not an executable dtrain; build it first" >&2; exit 2; }
command -v pdsh >/dev/null || { echo "launch.sh: no pdsh; apt-get install -y pdsh" >&2; exit 77; }
max_hosts=0
for n in ${host_counts//,/ }; do [ "$n" -gt "$max_hosts" ] && max_hosts=$n; done

work=$(mktemp -d /tmp/dtrain-bench-launch-XXXXXX)
cleanup() {
  "$testcluster" down >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
status=0
"$testcluster" up "$max_hosts" >"$work/up.log" 2>&1 || status=$?
if [ $status -ne 0 ]; then
  echo "# launch: the test cluster cannot come up (exit $status): $(tail -2 "$work/up.log")"
  exit "$status"
fi
source "$("$testcluster" env)"

host_list() {  # N -> bnch-h1,bnch-h2,...
  local n=$1 i list=""
  for i in $(seq 1 "$n"); do list+="${list:+,}$PREFIX_HOST$i"; done
  echo "$list"
}
PREFIX_HOST=$DTRAIN_TESTCLUSTER_PREFIX-h

measure() {  # tool n rep -> "start end last_started"
  local dir=$work/$1-$2-$3
  mkdir -p "$dir"
  timeout 120 "$testcluster" exec ctl "$here/launch.sh" --in-ctl "$dtrain" "$1" "$(host_list "$2")" "$dir"
}

# One untimed round first: sshd's first exec of a binary and the page cache are not launch costs.
measure pdsh "$max_hosts" warm >/dev/null
measure dtrain "$max_hosts" warm >/dev/null

echo "# launch: time to all workers started; namespace cluster hosts (sshd each), one trivial worker per"
echo "# host; median of $reps (min in brackets); load before: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%5s  %22s  %22s  %22s\n' hosts "dtrain_started_s" "dtrain_exit_s" "pdsh_true_s"
for n in ${host_counts//,/ }; do
  started=() exited=() pdsh=()
  for rep in $(seq 1 "$reps"); do
    read -r s e last < <(measure dtrain "$n" "$rep")
    started+=("$(echo "$last - $s" | bc -l)")
    exited+=("$(echo "$e - $s" | bc -l)")
    read -r s e _ < <(measure pdsh "$n" "$rep")
    pdsh+=("$(echo "$e - $s" | bc -l)")
  done
  stats() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {printf "%.3f [%.3f]", v[int((NR+1)/2)], v[1]}'; }
  printf '%5s  %22s  %22s  %22s\n' "$n" "$(stats "${started[@]}")" "$(stats "${exited[@]}")" "$(stats "${pdsh[@]}")"
done
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
