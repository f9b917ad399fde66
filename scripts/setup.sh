#!/usr/bin/env bash
# Installs, with apt, the Debian packages that dtrain's build and tests need — only those missing.
# Idempotent and non-interactive; when everything is present it only runs dpkg queries.
# CUDA and NCCL are optional: the build detects them under /usr/local/cuda (-DDTRAIN_CUDA=AUTO).
# `--tests` adds what only the test suite needs (scripts/test.sh passes it; the quickstart does
# not): python3-torch, so that a fresh machine runs the unmodified-PyTorch-script tests instead of
# skipping them.
set -euo pipefail

with_tests=false
for argument in "$@"; do
  case "$argument" in
    --tests) with_tests=true ;;
    *) echo "setup: unknown option '$argument'; the only option is --tests" >&2; exit 2 ;;
  esac
done

packages=(
  build-essential cmake ninja-build pkg-config
  libcli11-dev libyaml-cpp-dev libspdlog-dev doctest-dev nlohmann-json3-dev
  libsimdjson-dev  # the supervisor reads agent beats with it (launcher/proto/beat_parser.cpp)
  libssh2-1-dev libgloo-dev libasio-dev libsqlite3-dev libssl-dev
  libjemalloc-dev  # the supervisor's allocator (CMakeLists.txt: DTRAIN_JEMALLOC)
  openssh-server openssh-client iproute2 procps python3
  nftables  # the partition-host drill's opt-in firewall method, and its test on the namespace cluster
  prometheus  # promtool: the tests lint metrics.prom with `promtool check metrics`
  chromium  # headless: the report tests check report.html's DOM (--dump-dom) and keep a screenshot
  slurm-wlm munge  # testcluster.sh up N --slurm: a real Slurm over the namespace hosts (cluster_slurm tests)
)
if $with_tests; then
  packages+=(python3-torch)  # the unmodified-script, DDP and in-place PyTorch tests (tests/skip.h)
  packages+=(tmux)  # a real terminal for the terminal-output test (capture-pane)
  packages+=(pdsh)  # scripts/bench/launch.sh and fanout.py time `pdsh -S true` beside dtrain (without it they exit 77)
fi

missing=()
for package in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$package")
  fi
done

# The emulated Kubernetes cluster's tests (tests/k8s, cluster_kubernetes_test) drive the real
# kubectl: Debian's `kubectl` package where the archive has it, else `kubernetes-client` (1.20:
# SPDY exec only, so those tests then skip naming its version). Only with --tests, only when
# missing, and never fatal: without it those tests skip.
need_kubectl=false
if $with_tests && ! command -v kubectl >/dev/null 2>&1; then need_kubectl=true; fi

install_kubectl() {
  local candidate
  for candidate in kubectl kubernetes-client; do
    if "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "$candidate" >/dev/null 2>&1; then
      echo "setup: installed $candidate for the Kubernetes tests"
      return 0
    fi
  done
  echo "setup: no kubectl package (kubectl or kubernetes-client) could be installed; the Kubernetes tests will skip" >&2
}

if [ ${#missing[@]} -eq 0 ] && ! $need_kubectl; then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi

sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    sudo_cmd=(sudo)
  elif [ ${#missing[@]} -eq 0 ]; then
    echo "setup: no kubectl and no root (or sudo) to install it; the Kubernetes tests will skip" >&2
    exit 0
  else
    echo "setup: need root (or sudo) to install: ${missing[*]}" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
if $need_kubectl; then install_kubectl; fi
