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
fi

# The emulated Kubernetes cluster's test (tests/k8s) drives the real kubectl: Debian's newer
# `kubectl` package where the archive has it (WebSocket exec), else `kubernetes-client` (1.20,
# SPDY exec only: the exec checks then fail, naming it). Only with --tests, only when missing.
kubectl_package=()
if $with_tests && ! command -v kubectl >/dev/null 2>&1; then
  for candidate in kubectl kubernetes-client; do
    if apt-cache show "$candidate" >/dev/null 2>&1; then
      kubectl_package=("$candidate")
      break
    fi
  done
  [ ${#kubectl_package[@]} -gt 0 ] ||
    echo "setup: no kubectl package (kubectl or kubernetes-client) in the apt sources; the tests/k8s test will skip" >&2
fi

missing=("${kubectl_package[@]}")
for package in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$package")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi

echo "setup: installing ${missing[*]}"
sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    sudo_cmd=(sudo)
  else
    echo "setup: need root (or sudo) to install: ${missing[*]}" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
