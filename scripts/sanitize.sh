#!/usr/bin/env bash
# The test suite under AddressSanitizer + UndefinedBehaviorSanitizer (leaks included), in its own
# build directory (default build-asan; Debug, no CUDA). Run it after changing memory-heavy code.
#
#   scripts/sanitize.sh [--all] [BUILD_DIR] [-- CTEST_ARGS...]
#
#   (default)  builds and runs the unit tests (ctest -R '^unit/').
#   --all      builds everything (dtrain, dtrain-train, the benches, every test, the fuzz corpus
#              replays) instrumented and runs every test: unit, integration (the namespace-cluster
#              ones too, when root: they skip, exit 77, otherwise) and fuzz. CTEST_ARGS narrow it,
#              e.g. `-- -LE cluster` while another cluster suite runs on the machine.
#
# Exit status: 0 when ctest passed AND no process wrote a sanitizer report; 1 when a report was
# written (they are printed); else ctest's.
#
# Where reports go. A sanitized dtrain starts processes whose stderr nobody keeps (a supervisor
# detached with stdio on /dev/null, agents over SSH on the test cluster, workers) and whose
# environment is not the test's (SSH does not pass ASAN_OPTIONS; workers get the spec's env). So
# the options are compiled into every executable (scripts/sanitizer_defaults.cpp, linked through
# CMAKE_EXE_LINKER_FLAGS) and every report is written to BUILD_DIR/sanitizer-logs/
# (asan.<exe>.<pid>, ubsan.<exe>.<pid>), in the build tree that the test cluster shares at the
# same path. The script empties that directory before the tests and fails if anything is in it
# afterwards, even when every test passed (a report from a child the test did not watch).
# ASAN_OPTIONS / UBSAN_OPTIONS / LSAN_OPTIONS from your environment still override single options.
#
# The options, and why:
#   ASan   halt_on_error=1       first error ends the process (ASan cannot go on safely anyway)
#          abort_on_error=0      exit instead of SIGABRT: no core files, and the exit code says
#          exitcode=86           it was a sanitizer (dtrain itself uses 0-5, 70, 130; tests use 77)
#          detect_leaks=1        LeakSanitizer at every normal exit(), in every process
#          check_initialization_order=1   static-init order bugs across translation units
#          log_exe_name=1, log_path=BUILD_DIR/sanitizer-logs/asan   (one file per process)
#   UBSan  halt_on_error=1, print_stacktrace=1, exitcode=86, log_exe_name=1, reports in
#          sanitizer-logs/ubsan.* (built with -fno-sanitize-recover=undefined: every finding fatal)
# What needs no option (checked, so a test does not fail for something that is not a bug):
#   - fork()ed children that exec, or _exit(127) when exec fails, never run LeakSanitizer (it
#     runs from exit(), and dtrain's children use exec/_exit only); a detached supervisor exits
#     normally and is leak-checked.
#   - processes ended by SIGKILL (fault tests, fences) write nothing: no false report, and no
#     leak check either.
#   - nothing in dtrain or its tests sets RLIMIT_AS (ASan reserves terabytes of shadow address
#     space and fails to start under one); the unit tests' RLIMIT_FSIZE does not matter to ASan.
#   - the agent's gdb sample attaches to a worker and detaches before the worker exits; LSan only
#     refuses to run while the process is still being traced.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)

all=0
build=
ctest_args=()
while (($#)); do
  case $1 in
    --all) all=1; shift ;;
    --) shift; ctest_args=("$@"); break ;;
    -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "sanitize.sh: unknown option '$1'; usage: scripts/sanitize.sh [--all] [BUILD_DIR] [-- CTEST_ARGS...]" >&2; exit 2 ;;
    *) [[ -z $build ]] || { echo "sanitize.sh: one BUILD_DIR only (got '$build' and '$1')" >&2; exit 2; }
       build=$1; shift ;;
  esac
done
build=${build:-$repo/build-asan}
mkdir -p "$build"
build=$(cd "$build" && pwd)
case $build in
  *[\'\"\\:]*) echo "sanitize.sh: BUILD_DIR '$build' has a quote, backslash or colon; the sanitizer option" \
                    "parser cannot take it as a log path: choose another directory" >&2; exit 2 ;;
esac
logs=$build/sanitizer-logs
mkdir -p "$logs"

# The compiled-in options (see above). Rebuilt only when the source changes, so that the
# executables are not all relinked on every run.
defaults_obj=$build/sanitizer_defaults.o
if [[ ! -f $defaults_obj || $repo/scripts/sanitizer_defaults.cpp -nt $defaults_obj ]]; then
  "${CXX:-c++}" -c -O1 -g -DDTRAIN_SANITIZER_LOG_DIR="\"$logs\"" -DDTRAIN_SANITIZER_EXITCODE=86 \
    "$repo/scripts/sanitizer_defaults.cpp" -o "$defaults_obj"
fi

flags="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DDTRAIN_CUDA=OFF \
  -DCMAKE_CXX_FLAGS="$flags" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined \"$defaults_obj\"" >/dev/null

if ((all)); then
  cmake --build "$build"
  filter=()
else
  targets=$(cd "$build" && ninja -t targets all | sed -n 's/^\(tests\/unit_[a-z0-9_]*_test\):.*/\1/p' | sort -u)
  # shellcheck disable=SC2086
  cmake --build "$build" --target $targets
  filter=(-R '^unit/')
fi

find "$logs" -mindepth 1 -maxdepth 1 \( -name 'asan.*' -o -name 'ubsan.*' \) -delete
status=0
(cd "$build" && ctest "${filter[@]}" "${ctest_args[@]}" -j "$(nproc)" --output-on-failure) || status=$?

mapfile -t reports < <(find "$logs" -mindepth 1 -maxdepth 1 -type f \( -name 'asan.*' -o -name 'ubsan.*' \) | sort)
if ((${#reports[@]})); then
  for report in "${reports[@]}"; do
    echo "==== $report"
    cat "$report"
  done
  echo "sanitize.sh: ${#reports[@]} sanitizer report(s) above, kept in $logs" >&2
  exit 1
fi
echo "sanitize.sh: no sanitizer reports (ctest exit status $status)"
exit "$status"
