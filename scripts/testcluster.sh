#!/usr/bin/env bash
# A real SSH test cluster on one machine: network namespaces as hosts.
#
#   testcluster.sh up N [--share DIR]... [--env NAME=VALUE]... [--slurm] [--kubernetes [--kube-gpus-per-node G] [--kube-jobset-crd]]
#                                N hosts (tears down stale state of the same prefix first); every
#                                host sees this checkout and each DIR at its own path. --env: every
#                                SSH session on the hosts gets NAME=VALUE (sshd SetEnv; e.g. a fake
#                                NVML or sysfs root under the host's private /tmp). --slurm:
#                                also a real Slurm (munged + slurmctld in ctl, slurmd per host).
#                                --kubernetes: also the emulated Kubernetes API server
#                                (tests/k8s/apiserver.py) at https://10.77.0.2:6443 in ctl, one Node
#                                per host with G nvidia.com/gpu (default 8); see tests/k8s/README.md
#                                --kube-jobset-crd: it serves the JobSet CRD's jobsets (stored
#                                and run by its JobSet controller), as where JobSet is installed
#   testcluster.sh kube-node H notready|ready
#                                forces node H's Ready condition (--kubernetes; its pods get
#                                Ready=False and are evicted after their not-ready toleration)
#   testcluster.sh down          removes everything it made; ends only processes in its namespaces
#   testcluster.sh status        one line per namespace
#   testcluster.sh partition H   takes H's switch port down (a clean partition; H stays alive)
#   testcluster.sh heal H        brings it back
#   testcluster.sh kill H        SIGKILLs every process in H's namespace, sshd included ("dead")
#   testcluster.sh restart H     starts H's sshd again (after kill H), and its slurmd with --slurm
#   testcluster.sh rekey H       new host key for H, sshd restarted (known_hosts NOT updated)
#   testcluster.sh exec H CMD... runs CMD as on H (H may be "ctl"); names resolve there
#   testcluster.sh env           prints the path of cluster.env
#
# H is a host number (1), a short name (h1), a full name (dt-h1) or "ctl".
#
# With --slurm (Debian packages slurm-wlm and munge): one munged (in ctl; its socket in the state
# dir, which every host sees), slurmctld in ctl, and one slurmd per host namespace, each with its
# own hostname, address, /run, /tmp (spool, log) and its own cgroup namespace rooted at
# /sys/fs/cgroup/<controller>/dtc-P-hI (cgroup v1), so proctrack/cgroup puts each node's steps in
# that node's own tree, as on separate machines. Partition "test" holds every host. Commands in
# ctl (and on the hosts) need SLURM_CONF=$DTRAIN_TESTCLUSTER_SLURM_CONF (testcluster.sh exec sets
# it). Without the v1 controllers under /sys/fs/cgroup (a cgroup v2-only machine), --slurm exits 77.
#
# Layout (prefix P = $DTRAIN_TESTCLUSTER_PREFIX, default "dt"; several prefixes coexist):
#   namespaces  P-sw (bridge br0, ports p1..pN and pc), P-ctl (10.77.0.2, where tests run
#               dtrain), P-h1..P-hN (10.77.0.11, .12, ...). No default route anywhere and no
#               link to the root namespace: no packet can leave the cluster.
#   each host   sshd (own ed25519 host key), own hostname (P-hI), and a private mount namespace
#               in which /run, the user's home and /tmp are per-host directories (so ~/.cache,
#               ~/.ssh and /tmp are not shared between hosts, as on real machines); /etc/hosts
#               names every cluster member. The shared trees (this checkout and every --share
#               DIR: the build tree under test) are bound back, read-write, at their own paths,
#               so binaries under test run on every host even from a checkout under /tmp or home.
#   state dir   $DTRAIN_TESTCLUSTER_ROOT/P (default /tmp/dtrain-testcluster/P), mode 0700:
#               cluster.env (KEY=VALUE, see write_env), id_ed25519 (user key), known_hosts
#               (names and IPs of every host), ssh_config (for OpenSSH: ssh -F), hosts
#               (/etc/hosts for the cluster), shared (the shared trees, one per line),
#               hosts/<name>/ (sshd config, key, log, pid, home, tmp).
#
# With --kubernetes (tests/k8s/README.md): a CA and server certificate (openssl; SAN 10.77.0.2 and
# 127.0.0.1), two bearer tokens and a kubeconfig under $STATE/kube/; the server runs in ctl (so
# `down` ends it), its pods' processes on the hosts (so `down` and `kill H` end them). cluster.env
# gains DTRAIN_TESTCLUSTER_KUBECONFIG (contexts dtrain-test, the default with every right, and
# no-exec, which may not create pods/exec; both in namespace dtrain-test),
# DTRAIN_TESTCLUSTER_KUBE_NAMESPACE, DTRAIN_TESTCLUSTER_KUBE_SERVER and
# DTRAIN_TESTCLUSTER_KUBE_REQUESTS (requests.jsonl: one line per request, no tokens).
#
# Exit status: 0 ok, 1 failure, 2 usage, 77 cannot run on this machine (not root, no ip netns,
# no sshd): tests treat 77 as "skip".
set -euo pipefail

PREFIX=${DTRAIN_TESTCLUSTER_PREFIX:-dt}
STATE_ROOT=${DTRAIN_TESTCLUSTER_ROOT:-/tmp/dtrain-testcluster}
STATE=$STATE_ROOT/$PREFIX
SUBNET=10.77.0
CTL_IP=$SUBNET.2
SW=$PREFIX-sw
CTL=$PREFIX-ctl
SSHD=${DTRAIN_TESTCLUSTER_SSHD:-/usr/sbin/sshd}

die() { echo "testcluster: $*" >&2; exit 1; }
cannot() { echo "testcluster: cannot run here: $*" >&2; exit 77; }
usage() { sed -n '4,24p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

host_ip() { echo "$SUBNET.$((10 + $1))"; }
host_name() { echo "$PREFIX-h$1"; }

check_prefix() {
  [[ $PREFIX =~ ^[a-z][a-z0-9]{0,11}$ ]] ||
    die "DTRAIN_TESTCLUSTER_PREFIX '$PREFIX' must be 1-12 lowercase letters/digits, starting with a letter"
}

preflight() {
  [ "$(id -u)" -eq 0 ] || cannot "needs root (network namespaces, mounts); uid is $(id -u); run it with sudo"
  command -v ip >/dev/null || cannot "no 'ip' command; install iproute2"
  ip netns list >/dev/null 2>&1 || cannot "'ip netns' does not work here: $(ip netns list 2>&1 | head -1)"
  [ -x "$SSHD" ] || cannot "no sshd at $SSHD; install openssh-server (or set DTRAIN_TESTCLUSTER_SSHD)"
  local tool
  for tool in ssh-keygen unshare nsenter mount hostname; do
    command -v "$tool" >/dev/null || cannot "no '$tool' command"
  done
  # Creating a namespace is what fails in unprivileged containers even as uid 0.
  local probe="$PREFIX-probe$$"
  if ! err=$(ip netns add "$probe" 2>&1); then
    cannot "cannot create a network namespace: $err"
  fi
  ip netns del "$probe" 2>/dev/null || true
}

# Namespaces of this prefix: P-sw, P-ctl, P-h<digits>.
our_namespaces() {
  ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$PREFIX-(sw|ctl|h[0-9]+)\$" || true
}

# This script and its ancestors: never signalled, even when run from inside a namespace of ours.
ANCESTORS=" "
ancestors() {
  local pid=$$
  while [ -n "$pid" ] && [ "$pid" -gt 1 ]; do
    ANCESTORS+="$pid "
    pid=$(awk '{print $4}' "/proc/$pid/stat" 2>/dev/null || true)
  done
}
netns_pids() {
  local pid
  for pid in $(ip netns pids "$1" 2>/dev/null || true); do
    [[ $ANCESTORS == *" $pid "* ]] || echo "$pid"
  done
}

# SIGTERM, then SIGKILL after a grace, every process whose network namespace is $1. Only
# processes inside our own namespaces are ever signalled, by pid.
end_processes_in() {
  local ns=$1 pids i
  pids=$(netns_pids "$ns")
  [ -n "$pids" ] || return 0
  kill -TERM $pids 2>/dev/null || true
  for i in $(seq 1 40); do
    pids=$(netns_pids "$ns")
    [ -n "$pids" ] || return 0
    sleep 0.05
  done
  kill -KILL $pids 2>/dev/null || true
  for i in $(seq 1 100); do
    pids=$(netns_pids "$ns")
    [ -n "$pids" ] || return 0
    sleep 0.02
  done
  echo "testcluster: processes still in $ns after SIGKILL: $pids" >&2
  return 1
}

cmd_down() {
  local ns failed=0
  for ns in $(our_namespaces); do
    end_processes_in "$ns" || failed=1
  done
  for ns in $(our_namespaces); do
    ip netns del "$ns" 2>/dev/null || { echo "testcluster: could not delete namespace $ns" >&2; failed=1; }
  done
  # A --slurm cluster's per-host cgroup trees (empty now that their processes are gone).
  for ns in $(ls -d /sys/fs/cgroup/freezer"$(own_cgroup freezer)"/dtc-"$PREFIX"-h* 2>/dev/null); do
    remove_host_cgroups "${ns##*/dtc-}"
  done
  # The host homes/tmp dirs were only bind-mounted inside namespaces that are gone now.
  rm -rf "$STATE"
  rmdir "$STATE_ROOT" 2>/dev/null || true
  return $failed
}

# Resolves H to a host index (1..N), or "ctl".
resolve_host() {
  local h=$1
  case $h in
    ctl|"$CTL") echo ctl; return ;;
    "$PREFIX"-h*) h=${h#"$PREFIX"-h} ;;
    h*) h=${h#h} ;;
  esac
  [[ $h =~ ^[0-9]+$ ]] || die "unknown host '$1'; use a number, h1, $PREFIX-h1 or ctl"
  [ -f "$STATE/cluster.env" ] || die "no cluster with prefix '$PREFIX' (run: testcluster.sh up N)"
  local count
  count=$(sed -n 's/^DTRAIN_TESTCLUSTER_HOSTS=//p' "$STATE/cluster.env")
  [ "$h" -ge 1 ] && [ "$h" -le "$count" ] || die "unknown host '$1'; the cluster has hosts 1..$count"
  echo "$h"
}

link_member() {  # ns port ip
  local ns=$1 port=$2 ip_addr=$3
  ip -n "$SW" link add "$port" type veth peer name eth0 netns "$ns"
  ip -n "$SW" link set "$port" master br0 up
  ip -n "$ns" link set lo up
  ip -n "$ns" addr add "$ip_addr/24" dev eth0
  ip -n "$ns" link set eth0 up
}

write_sshd_config() {  # dir [NAME=VALUE...]
  local dir=$1
  shift
  cat >"$dir/sshd_config" <<EOF
# testcluster: one sshd per host namespace
ListenAddress 0.0.0.0:22
ListenAddress 0.0.0.0:2222
HostKey $dir/ssh_host_ed25519_key
PidFile $dir/sshd.pid
AuthorizedKeysFile $STATE/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
PubkeyAuthentication yes
StrictModes no
UsePAM no
UseDNS no
PrintMotd no
Subsystem sftp internal-sftp
MaxStartups 100:30:200
MaxSessions 50
LogLevel VERBOSE
EOF
  # One SetEnv line: sshd takes the first SetEnv directive it reads and ignores later ones.
  [ $# -eq 0 ] || echo "SetEnv $*" >>"$dir/sshd_config"
}

# The user's home directory, which each host replaces with a private one.
user_home() { getent passwd "$(id -un)" | cut -d: -f6; }

# Checks a tree to share and prints it without a trailing slash. A tree that is / or holds
# /tmp, /run or the home would undo the hosts' privacy: refused.
check_share() {
  local path=$1 home
  home=$(user_home)
  case $path in
    /*) ;;
    *) die "up: --share '$path' must be an absolute path" ;;
  esac
  [ -d "$path" ] || die "up: --share '$path' is not a directory"
  [[ $path != *$'\n'* ]] || die "up: --share path holds a newline"
  path=${path%/}
  case "/tmp/ /run/ $home/" in
    "$path"/*|*" $path/"*)
      die "up: --share '${path:-/}' would share /tmp, /run or $home between hosts; share a directory below it" ;;
  esac
  printf '%s\n' "$path"
}

# Writes the trees to share ($@, checked) to $STATE/shared, one per line; a tree inside one
# listed before it is already shared with it.
write_shared() {
  local path listed
  : >"$STATE/shared"
  for path in "$@"; do
    while IFS= read -r listed; do
      case $path/ in "$listed"/*) continue 2 ;; esac
    done <"$STATE/shared"
    printf '%s\n' "$path" >>"$STATE/shared"
  done
}

# Starts sshd of host $1 in its own UTS + mount namespace. Private /run (sshd needs /run/sshd),
# home and /tmp. The state dir and the shared trees are bound back where they were (configs
# keep their paths; binaries under test stay reachable): each is first bound onto a spot in the
# host's new /run, which the home and /tmp do not cover, then the home and /tmp are replaced
# (the home first: its private copy lives under /tmp), then each is bound from that spot onto
# its own path again.
start_sshd() {
  local i=$1 name dir path
  local keep=("$STATE")
  name=$(host_name "$i")
  dir=$STATE/hosts/$name
  if [ -f "$STATE/shared" ]; then
    while IFS= read -r path; do
      [ -n "$path" ] && keep+=("$path")
    done <"$STATE/shared"
  fi
  rm -f "$dir/sshd.pid"
  ip netns exec "$name" unshare --uts --mount --propagation private -- /bin/sh -c '
      set -e
      hostname "$1"
      dir=$2 hosts_file=$3 home=$4 sshd=$5
      shift 5
      mount -n --bind "$dir/run" /run
      mount -n --bind "$hosts_file" /etc/hosts
      n=0
      for path in "$@"; do
        n=$((n + 1))
        mkdir -p "/run/testcluster-keep/$n"
        mount -n --rbind "$path" "/run/testcluster-keep/$n"
      done
      mount -n --bind "$dir/home" "$home"
      mount -n --bind "$dir/tmp" /tmp
      n=0
      for path in "$@"; do
        n=$((n + 1))
        mkdir -p "$path"
        mount -n --rbind "/run/testcluster-keep/$n" "$path"
        umount -n -l "/run/testcluster-keep/$n"
        rmdir "/run/testcluster-keep/$n"
      done
      rmdir /run/testcluster-keep 2>/dev/null || true
      exec "$sshd" -f "$dir/sshd_config" -E "$dir/sshd.log"' \
    sh "$name" "$dir" "$STATE/hosts_file" "$(user_home)" "$SSHD" "${keep[@]}" ||
    die "sshd of $name did not start; see $dir/sshd.log"
}

# Waits until $1:22 accepts a TCP connection from the control namespace.
wait_reachable() {
  local ip_addr=$1 i
  for i in $(seq 1 200); do
    if ip netns exec "$CTL" timeout 1 bash -c "exec 3<>/dev/tcp/$ip_addr/22" 2>/dev/null; then
      return 0
    fi
    sleep 0.025
  done
  return 1
}

# ---- Slurm (--slurm) ----------------------------------------------------------------------------

SLURM_CONTROLLERS="freezer memory cpuset devices cpu cpuacct pids"

slurm_preflight() {
  local tool
  for tool in munged slurmctld slurmd srun sbatch scontrol sinfo; do
    command -v "$tool" >/dev/null ||
      cannot "--slurm needs '$tool'; install the Debian packages slurm-wlm and munge (scripts/setup.sh)"
  done
  cgroup_v1_usable ||
    cannot "--slurm needs the cgroup v1 controllers ($SLURM_CONTROLLERS, name=systemd) under /sys/fs/cgroup"
}

# Each host gets its own cgroup v1 tree: the v1 controllers must be mounted in this namespace.
cgroup_v1_usable() {
  local c
  for c in $SLURM_CONTROLLERS systemd; do
    [ "$(stat -f -c %T "/sys/fs/cgroup/$c" 2>/dev/null)" = cgroupfs ] || return 1
  done
}

write_slurm_conf() {  # count proctrack
  local count=$1 proctrack=$2 dir=$STATE/slurm i cpus
  cpus=$(nproc)
  {
    echo "# testcluster: a real Slurm over the namespace hosts (generated by testcluster.sh)"
    echo "ClusterName=$PREFIX"
    echo "SlurmctldHost=$CTL($CTL_IP)"
    echo "AuthType=auth/munge"
    echo "CredType=cred/munge"
    echo "AuthInfo=socket=$dir/munge/munge.socket"
    echo "SlurmUser=root"
    echo "SlurmdUser=root"
    echo "StateSaveLocation=$dir/ctld"
    echo "SlurmctldPidFile=$dir/ctld/slurmctld.pid"
    echo "SlurmctldLogFile=$dir/ctld/slurmctld.log"
    # Private per host: /tmp and /run are the host's own.
    echo "SlurmdSpoolDir=/tmp/slurmd"
    echo "SlurmdPidFile=/run/slurmd.pid"
    echo "SlurmdLogFile=/tmp/slurmd.log"
    echo "ProctrackType=$proctrack"
    echo "TaskPlugin=task/none"
    echo "JobAcctGatherType=jobacct_gather/linux"
    echo "AccountingStorageType=accounting_storage/none"
    echo "JobCompType=jobcomp/none"
    echo "SchedulerType=sched/backfill"
    echo "SelectType=select/cons_tres"
    echo "SelectTypeParameters=CR_Core"
    echo "MpiDefault=none"
    echo "ReturnToService=2"
    # A killed host is noticed in seconds, not minutes.
    echo "SlurmdTimeout=10"
    echo "SlurmctldTimeout=10"
    echo "InactiveLimit=0"
    echo "KillWait=5"
    echo "MinJobAge=30"
    for i in $(seq 1 "$count"); do
      echo "NodeName=$(host_name "$i") NodeAddr=$(host_ip "$i") CPUs=$cpus RealMemory=1000 State=UNKNOWN"
    done
    echo "PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP"
  } >"$dir/slurm.conf"
  {
    echo "CgroupPlugin=cgroup/v1"
    echo "CgroupMountpoint=/sys/fs/cgroup"
    echo "CgroupAutomount=no"
  } >"$dir/cgroup.conf"
  chmod 0644 "$dir/slurm.conf" "$dir/cgroup.conf"
}

# This process's cgroup in v1 controller $1 ("systemd" is the named hierarchy).
own_cgroup() {
  local key=$1
  [ "$key" = systemd ] && key=name=systemd
  awk -F: -v k="$key" '$2 == k {print $3}' /proc/self/cgroup | sed 's:/$::'
}

# Host $1's cgroup in controller $2, as this (root) namespace sees it: beside ours, never above.
host_cgroup() { echo "/sys/fs/cgroup/$2$(own_cgroup "$2")/dtc-$1"; }

# Removes host $1's cgroup trees (deepest first); its processes must be gone already.
remove_host_cgroups() {
  local c dir
  for c in $SLURM_CONTROLLERS systemd; do
    dir=$(host_cgroup "$1" "$c")
    [ -d "$dir" ] || continue
    find "$dir" -depth -type d -exec rmdir {} \; 2>/dev/null || true
  done
}

# Makes host $1's cgroup trees and moves the calling shell ($2: its pid) into them.
enter_host_cgroups() {
  local name=$1 shell_pid=$2 c dir
  for c in $SLURM_CONTROLLERS systemd; do
    dir=$(host_cgroup "$name" "$c")
    mkdir -p "$dir"
    if [ "$c" = cpuset ]; then
      cat "$(dirname "$dir")/cpuset.cpus" >"$dir/cpuset.cpus"
      cat "$(dirname "$dir")/cpuset.mems" >"$dir/cpuset.mems"
    fi
    echo "$shell_pid" >"$dir/cgroup.procs"
  done
}

# slurmd of host $1, inside the host's own network, hostname and mounts (entered through its
# sshd), in its own cgroup trees and a cgroup namespace rooted there. The host's /sys (remounted
# by ip netns exec) gets the v1 controllers mounted from inside that namespace, so the host sees
# its own tree as the whole of /sys/fs/cgroup, and slurmd's slurm/uid_0/job_J/step_S cgroups of
# different hosts never meet.
start_slurmd() {
  local i=$1 name pid
  name=$(host_name "$i")
  pid=$(cat "$STATE/hosts/$name/sshd.pid" 2>/dev/null || true)
  [ -n "$pid" ] || die "slurmd of $name: its sshd is not running"
  (
    enter_host_cgroups "$name" "$BASHPID"
    exec nsenter -t "$pid" -n -u -m -- unshare --cgroup -- /bin/sh -c '
        set -e
        conf=$1 controllers=$2
        mkdir -p /tmp/slurmd
        mountpoint -q /sys/fs/cgroup || mount -n -t tmpfs -o mode=755 cgroup /sys/fs/cgroup
        for c in $controllers; do
          mkdir -p "/sys/fs/cgroup/$c"
          mountpoint -q "/sys/fs/cgroup/$c" || mount -n -t cgroup -o "$c" cgroup "/sys/fs/cgroup/$c"
        done
        mkdir -p /sys/fs/cgroup/systemd
        mountpoint -q /sys/fs/cgroup/systemd ||
          mount -n -t cgroup -o none,name=systemd cgroup /sys/fs/cgroup/systemd
        exec slurmd -f "$conf"' sh "$STATE/slurm/slurm.conf" "$SLURM_CONTROLLERS"
  ) || die "slurmd of $name did not start; see $STATE/hosts/$name/tmp/slurmd.log"
}

# munged and slurmctld in ctl, slurmd on each of the $1 hosts; waits until every node is idle.
slurm_up() {
  local count=$1 dir=$STATE/slurm i state
  mkdir -p "$dir/munge" "$dir/ctld"
  chmod 0755 "$dir"
  chmod 0711 "$dir/munge"
  # munge refuses a key readable by others; 1 KiB of randomness as mungekey makes.
  head -c 1024 /dev/urandom >"$dir/munge/munge.key"
  chmod 0400 "$dir/munge/munge.key"
  write_slurm_conf "$count" proctrack/cgroup
  ip netns exec "$CTL" munged -f --socket="$dir/munge/munge.socket" --key-file="$dir/munge/munge.key" \
    --log-file="$dir/munge/munged.log" --pid-file="$dir/munge/munged.pid" \
    --seed-file="$dir/munge/munged.seed" || die "munged did not start; see $dir/munge/munged.log"
  ctl_command slurmctld -f "$dir/slurm.conf"
  "${CTL_COMMAND[@]}" || die "slurmctld did not start; see $dir/ctld/slurmctld.log"
  for i in $(seq 1 "$count"); do start_slurmd "$i"; done
  wait_slurm_idle "$count" || die "Slurm nodes not idle after 30 s: $state; see $dir/ctld/slurmctld.log"
}

# Waits (30 s at most) until $1 nodes report idle to slurmctld.
wait_slurm_idle() {
  local count=$1 i idle
  for i in $(seq 1 300); do
    idle=$(SLURM_CONF=$STATE/slurm/slurm.conf ip netns exec "$CTL" sinfo -h -N -t idle -o %N 2>/dev/null | sort -u | wc -l)
    [ "$idle" -ge "$count" ] && return 0
    sleep 0.1
  done
  return 1
}
# ---- Kubernetes (--kubernetes) ------------------------------------------------------------------

KUBE_PORT=6443

kube_preflight() {
  command -v openssl >/dev/null || cannot "--kubernetes needs openssl (its certificates)"
  [ -x /usr/bin/python3 ] || cannot "--kubernetes needs /usr/bin/python3 (the emulated API server)"
}

# A CA, a server certificate for 10.77.0.2 and 127.0.0.1, and one random token per user.
kube_credentials() {
  local dir=$STATE/kube
  mkdir -p "$dir/nodes"
  openssl req -x509 -newkey rsa:2048 -nodes -days 7 -subj "/CN=dtrain-testcluster-ca" \
    -keyout "$dir/ca.key" -out "$dir/ca.crt" 2>/dev/null || die "openssl could not make the CA"
  openssl req -newkey rsa:2048 -nodes -subj "/CN=kube-apiserver" \
    -keyout "$dir/server.key" -out "$dir/server.csr" 2>/dev/null || die "openssl could not make the server key"
  printf 'subjectAltName=IP:%s,IP:127.0.0.1,DNS:kubernetes,DNS:localhost\nextendedKeyUsage=serverAuth\n' \
    "$CTL_IP" >"$dir/server.ext"
  openssl x509 -req -in "$dir/server.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" -CAcreateserial \
    -days 7 -extfile "$dir/server.ext" -out "$dir/server.crt" 2>/dev/null ||
    die "openssl could not sign the server certificate"
  local admin no_exec
  admin=$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')
  no_exec=$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')
  printf '{"tokens": {"%s": "dtrain-admin", "%s": "no-exec"}}\n' "$admin" "$no_exec" >"$dir/users.json"
  cat >"$dir/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: dtrain-testcluster
  cluster:
    server: https://$CTL_IP:$KUBE_PORT
    certificate-authority: $dir/ca.crt
users:
- name: dtrain-admin
  user:
    token: $admin
- name: no-exec
  user:
    token: $no_exec
contexts:
- name: dtrain-test
  context: {cluster: dtrain-testcluster, user: dtrain-admin, namespace: dtrain-test}
- name: no-exec
  context: {cluster: dtrain-testcluster, user: no-exec, namespace: dtrain-test}
current-context: dtrain-test
EOF
}

# Starts the emulated API server in ctl (so `down` ends it) and waits until it accepts
# connections; then adds the Kubernetes keys to cluster.env.
kube_up() {
  local gpus=$1 jobset=$2 dir=$STATE/kube i server extra=()
  [ "$jobset" = 0 ] || extra+=(--jobset-crd)
  kube_credentials
  server="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/tests/k8s/apiserver.py"
  ip netns exec "$CTL" setsid /usr/bin/python3 "$server" --listen "$CTL_IP:$KUBE_PORT" \
    --cert "$dir/server.crt" --key "$dir/server.key" --users "$dir/users.json" --state "$dir" \
    --cluster-env "$STATE/cluster.env" --gpus-per-node "$gpus" --namespace dtrain-test "${extra[@]}" \
    </dev/null >"$dir/apiserver.log" 2>&1 &
  echo $! >"$dir/apiserver.pid"
  for i in $(seq 1 200); do
    if ip netns exec "$CTL" timeout 1 bash -c "exec 3<>/dev/tcp/$CTL_IP/$KUBE_PORT" 2>/dev/null; then
      {
        echo "DTRAIN_TESTCLUSTER_KUBECONFIG=$dir/kubeconfig"
        echo "DTRAIN_TESTCLUSTER_KUBE_NAMESPACE=dtrain-test"
        echo "DTRAIN_TESTCLUSTER_KUBE_SERVER=https://$CTL_IP:$KUBE_PORT"
        echo "DTRAIN_TESTCLUSTER_KUBE_REQUESTS=$dir/requests.jsonl"
      } >>"$STATE/cluster.env"
      return 0
    fi
    kill -0 "$(cat "$dir/apiserver.pid")" 2>/dev/null || break
    sleep 0.05
  done
  die "the emulated API server did not start; see $dir/apiserver.log"
}

# kube-node H notready|ready: the node emulator reads kube/nodes/<name>.notready.
cmd_kube_node() {
  [ $# -eq 2 ] || die "kube-node: give a host and notready|ready"
  local i name
  i=$(resolve_host "$1")
  [ "$i" != ctl ] || die "kube-node: use a host, not ctl"
  [ -d "$STATE/kube/nodes" ] || die "kube-node: the cluster was not started with --kubernetes"
  name=$(host_name "$i")
  case $2 in
    notready) : >"$STATE/kube/nodes/$name.notready" ;;
    ready) rm -f "$STATE/kube/nodes/$name.notready" ;;
    *) die "kube-node: '$2' must be notready or ready" ;;
  esac
}

write_env() {  # count
  local count=$1 i
  {
    echo "DTRAIN_TESTCLUSTER_PREFIX=$PREFIX"
    echo "DTRAIN_TESTCLUSTER_STATE=$STATE"
    echo "DTRAIN_TESTCLUSTER_HOSTS=$count"
    echo "DTRAIN_TESTCLUSTER_USER=$(id -un)"
    echo "DTRAIN_TESTCLUSTER_KEY=$STATE/id_ed25519"
    echo "DTRAIN_TESTCLUSTER_KNOWN_HOSTS=$STATE/known_hosts"
    echo "DTRAIN_TESTCLUSTER_SSH_CONFIG=$STATE/ssh_config"
    echo "DTRAIN_TESTCLUSTER_HOSTS_FILE=$STATE/hosts_file"
    echo "DTRAIN_TESTCLUSTER_CONTROL_NS=$CTL"
    echo "DTRAIN_TESTCLUSTER_CONTROL_IP=$CTL_IP"
    echo "DTRAIN_TESTCLUSTER_SWITCH_NS=$SW"
    for i in $(seq 1 "$count"); do
      echo "HOST_${i}_NAME=$(host_name "$i")"
      echo "HOST_${i}_IP=$(host_ip "$i")"
      echo "HOST_${i}_NS=$(host_name "$i")"
      echo "HOST_${i}_DIR=$STATE/hosts/$(host_name "$i")"
    done
  } >"$STATE/cluster.env.tmp"
  mv "$STATE/cluster.env.tmp" "$STATE/cluster.env"
}

cmd_up() {
  local count=${1:-}
  [[ $count =~ ^[0-9]+$ ]] && [ "$count" -ge 1 ] && [ "$count" -le 200 ] ||
    die "up: host count '$count' must be a number from 1 to 200"
  shift
  # This checkout is always shared: the tests and their binaries live in it.
  local shared=("$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)")
  local with_slurm=0 with_kubernetes=0 kube_gpus=8 kube_jobset=0
  local session_env=()
  while [ $# -gt 0 ]; do
    case $1 in
      --share)
        [ $# -ge 2 ] || die "up: --share needs a directory"
        shared+=("$(check_share "$2")")
        shift 2 ;;
      --env)
        [ $# -ge 2 ] || die "up: --env needs NAME=VALUE"
        # sshd_config splits SetEnv's arguments at blanks and reads quotes: allow neither.
        [[ $2 =~ ^[A-Za-z_][A-Za-z0-9_]*=[^[:space:]\"\']*$ ]] ||
          die "up: --env '$2' must be NAME=VALUE with no blanks or quotes in VALUE"
        session_env+=("$2")
        shift 2 ;;
      --slurm) with_slurm=1; shift ;;
      --kubernetes) with_kubernetes=1; shift ;;
      --kube-gpus-per-node)
        [ $# -ge 2 ] && [[ $2 =~ ^[0-9]+$ ]] || die "up: --kube-gpus-per-node needs a number"
        kube_gpus=$2
        shift 2 ;;
      --kube-jobset-crd) kube_jobset=1; shift ;;
      *) die "up: unknown argument '$1'; usage: testcluster.sh up N [--share DIR]... [--env NAME=VALUE]... [--slurm] [--kubernetes [--kube-gpus-per-node G] [--kube-jobset-crd]]" ;;
    esac
  done
  preflight
  [ "$with_slurm" = 0 ] || slurm_preflight
  [ "$with_kubernetes" = 0 ] || kube_preflight
  cmd_down >/dev/null 2>&1 || true
  umask 077
  mkdir -p "$STATE/hosts"
  chmod 0700 "$STATE_ROOT" "$STATE"
  ssh-keygen -q -t ed25519 -N '' -C "dtrain-testcluster-$PREFIX" -f "$STATE/id_ed25519"
  cp "$STATE/id_ed25519.pub" "$STATE/authorized_keys"
  write_shared "${shared[@]}"

  ip netns add "$SW"
  ip -n "$SW" link set lo up
  ip -n "$SW" link add br0 type bridge
  ip -n "$SW" link set br0 up
  ip netns add "$CTL"
  link_member "$CTL" pc "$CTL_IP"

  local i name ip_addr dir
  {
    echo "127.0.0.1 localhost"
    echo "$CTL_IP $CTL"
    for i in $(seq 1 "$count"); do echo "$(host_ip "$i") $(host_name "$i")"; done
  } >"$STATE/hosts_file"
  chmod 0644 "$STATE/hosts_file"
  : >"$STATE/known_hosts"
  {
    for i in $(seq 1 "$count"); do
      printf 'Host %s\n  HostName %s\n' "$(host_name "$i")" "$(host_ip "$i")"
    done
    printf 'Host *\n  User %s\n  IdentityFile %s\n  IdentitiesOnly yes\n' "$(id -un)" "$STATE/id_ed25519"
    printf '  UserKnownHostsFile %s\n  StrictHostKeyChecking yes\n  BatchMode yes\n' "$STATE/known_hosts"
    printf '  ConnectTimeout 5\n  LogLevel ERROR\n'
  } >"$STATE/ssh_config"

  for i in $(seq 1 "$count"); do
    name=$(host_name "$i")
    ip_addr=$(host_ip "$i")
    dir=$STATE/hosts/$name
    mkdir -p "$dir/run/sshd" "$dir/home" "$dir/tmp"
    chmod 0755 "$dir/run" "$dir/run/sshd"
    chmod 0700 "$dir/home"
    chmod 1777 "$dir/tmp"
    ip netns add "$name"
    link_member "$name" "p$i" "$ip_addr"
    ssh-keygen -q -t ed25519 -N '' -C "$name" -f "$dir/ssh_host_ed25519_key"
    echo "$name,$ip_addr $(cut -d' ' -f1,2 "$dir/ssh_host_ed25519_key.pub")" >>"$STATE/known_hosts"
    write_sshd_config "$dir" ${session_env[@]+"${session_env[@]}"}
    start_sshd "$i"
  done
  write_env "$count"
  for i in $(seq 1 "$count"); do
    wait_reachable "$(host_ip "$i")" ||
      die "sshd of $(host_name "$i") is not reachable from $CTL; see $STATE/hosts/$(host_name "$i")/sshd.log"
  done
  if [ "$with_slurm" = 1 ]; then
    slurm_up "$count"
    echo "DTRAIN_TESTCLUSTER_SLURM_CONF=$STATE/slurm/slurm.conf" >>"$STATE/cluster.env"
    echo "DTRAIN_TESTCLUSTER_SLURM_PARTITION=test" >>"$STATE/cluster.env"
  fi
  [ "$with_kubernetes" = 0 ] || kube_up "$kube_gpus" "$kube_jobset"
  echo "testcluster: $count hosts up (prefix $PREFIX)$([ "$with_slurm" = 1 ] && echo ", Slurm")$([ "$with_kubernetes" = 1 ] && echo ", Kubernetes"); env: $STATE/cluster.env"
}

cmd_status() {
  [ -f "$STATE/cluster.env" ] || { echo "testcluster: no cluster with prefix '$PREFIX'"; return 0; }
  local count i name port_state sshd_state pid nprocs
  count=$(sed -n 's/^DTRAIN_TESTCLUSTER_HOSTS=//p' "$STATE/cluster.env")
  printf '%-14s %-12s %-6s %-14s %s\n' NAME IP PORT SSHD PROCESSES
  printf '%-14s %-12s %-6s %-14s %s\n' "$CTL" "$CTL_IP" - - "$(ip netns pids "$CTL" 2>/dev/null | wc -l)"
  for i in $(seq 1 "$count"); do
    name=$(host_name "$i")
    port_state=down
    ip -n "$SW" link show "p$i" 2>/dev/null | grep -q 'state UP\|,UP' && port_state=up
    sshd_state=dead
    pid=$(cat "$STATE/hosts/$name/sshd.pid" 2>/dev/null || true)
    if [ -n "$pid" ] && ip netns pids "$name" 2>/dev/null | grep -qx "$pid"; then
      sshd_state="pid $pid"
    fi
    nprocs=$(ip netns pids "$name" 2>/dev/null | wc -l)
    printf '%-14s %-12s %-6s %-14s %s\n' "$name" "$(host_ip "$i")" "$port_state" "$sshd_state" "$nprocs"
  done
}

# CTL_COMMAND: the argv that runs "$@" as on ctl (its network, hostname and /etc/hosts).
ctl_command() {
  CTL_COMMAND=(ip netns exec "$CTL" unshare --mount --uts --propagation private -- /bin/sh -c '
      mount -n --bind "$1" /etc/hosts && hostname "$2" && shift 2 && exec "$@"'
    sh "$STATE/hosts_file" "$CTL" "$@")
}

cmd_exec() {
  local target
  target=$(resolve_host "$1")
  shift
  [ $# -ge 1 ] || die "exec: no command given"
  if [ -f "$STATE/slurm/slurm.conf" ]; then export SLURM_CONF=$STATE/slurm/slurm.conf; fi
  if [ "$target" = ctl ]; then
    ctl_command "$@"
    exec "${CTL_COMMAND[@]}"
  fi
  local name pid
  name=$(host_name "$target")
  pid=$(cat "$STATE/hosts/$name/sshd.pid" 2>/dev/null || true)
  if [ -n "$pid" ] && ip netns pids "$name" 2>/dev/null | grep -qx "$pid"; then
    # The host's own view: its network, hostname and private /run, home and /tmp.
    exec nsenter -t "$pid" -n -u -m -- "$@"
  fi
  echo "testcluster: $name has no sshd (killed?); running in its network namespace only" >&2
  exec ip netns exec "$name" "$@"
}

main() {
  check_prefix
  ancestors
  local command=${1:-}
  [ -n "$command" ] || usage
  shift
  case $command in
    up) cmd_up "$@" ;;
    down)
      [ "$(id -u)" -eq 0 ] || cannot "needs root; uid is $(id -u)"
      cmd_down ;;
    status) cmd_status ;;
    env) echo "$STATE/cluster.env" ;;
    partition|heal)
      [ $# -eq 1 ] || die "$command: give one host"
      local i
      i=$(resolve_host "$1")
      [ "$i" != ctl ] || die "$command: the control namespace cannot be partitioned"
      ip -n "$SW" link set "p$i" "$([ "$command" = partition ] && echo down || echo up)" ;;
    kill)
      [ $# -eq 1 ] || die "kill: give one host"
      local i pids
      i=$(resolve_host "$1")
      [ "$i" != ctl ] || die "kill: use a host, not ctl"
      pids=$(netns_pids "$(host_name "$i")")
      [ -z "$pids" ] || kill -KILL $pids 2>/dev/null || true
      end_processes_in "$(host_name "$i")" ;;
    restart|rekey)
      [ $# -eq 1 ] || die "$command: give one host"
      local i name dir pid
      i=$(resolve_host "$1")
      [ "$i" != ctl ] || die "$command: use a host, not ctl"
      name=$(host_name "$i")
      dir=$STATE/hosts/$name
      pid=$(cat "$dir/sshd.pid" 2>/dev/null || true)
      # Only the listening sshd; sessions already open keep running, as on a real host.
      if [ -n "$pid" ] && ip netns pids "$name" 2>/dev/null | grep -qx "$pid"; then
        kill -TERM "$pid"
        while kill -0 "$pid" 2>/dev/null; do sleep 0.02; done
      fi
      if [ "$command" = rekey ]; then
        rm -f "$dir/ssh_host_ed25519_key" "$dir/ssh_host_ed25519_key.pub"
        ssh-keygen -q -t ed25519 -N '' -C "$name" -f "$dir/ssh_host_ed25519_key"
      fi
      start_sshd "$i"
      wait_reachable "$(host_ip "$i")" || die "sshd of $name is not reachable; see $dir/sshd.log"
      if [ "$command" = restart ] && [ -f "$STATE/slurm/slurm.conf" ] &&
        ! ip netns pids "$name" 2>/dev/null | xargs -r -n1 -I{} cat /proc/{}/comm 2>/dev/null | grep -qx slurmd; then
        start_slurmd "$i"
      fi ;;
    kube-node) cmd_kube_node "$@" ;;
    exec)
      [ $# -ge 1 ] || die "exec: give a host and a command"
      cmd_exec "$@" ;;
    -h|--help|help) usage ;;
    *) echo "testcluster: unknown command '$command'" >&2; usage ;;
  esac
}

main "$@"
