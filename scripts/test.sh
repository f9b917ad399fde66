#!/usr/bin/env bash
# Installs what is missing, builds every target (the product, tests, fuzzers, benchmarks; the
# quickstart builds only the product), and runs the whole test suite through ctest.
# .ci/run calls exactly this. Extra arguments go to ctest (e.g. -R spec, -L integration,
# -LE cluster). At the end it says how many tests were skipped and why (a test that cannot run
# on this machine exits 77 after printing "skipped: <reason>", tests/skip.h); its exit status
# is ctest's.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh --tests
build_dir=${DTRAIN_BUILD_DIR:-build}
jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDTRAIN_CUDA=AUTO >/dev/null
cmake --build "$build_dir" -j "$jobs"
cd "$build_dir"

# ctest's own summary ends in "The following tests did not run: ... (Skipped)"; keep a copy to
# find those names, and its log for what each of them printed.
summary=$(mktemp)
trap 'rm -f "$summary"' EXIT
status=0
ctest --output-on-failure --timeout 600 -j "$jobs" "$@" | tee "$summary" || status=${PIPESTATUS[0]}

# Names of the skipped tests, one per line ("  12 - unit/x/case (Skipped)").
skipped_names=$(sed -n 's/^[[:space:]]*[0-9]\{1,\} - \(.*\) (Skipped)$/\1/p' "$summary")
if [ -n "$skipped_names" ]; then
  # LastTest.log holds every test's output in blocks that begin "N/M Test: <name>"; the first
  # "skipped: " line of a skipped test's block is its reason.
  printf '%s\n' "$skipped_names" | awk '
    FNR == NR { skipped[$0] = 1; count++; next }
    /^[0-9]+\/[0-9]+ Test: / { name = $0; sub(/^[0-9]+\/[0-9]+ Test: /, "", name); next }
    name != "" && (name in skipped) && !(name in reason) && /^skipped: / {
      reason[name] = substr($0, 10)
    }
    END {
      for (test in skipped) {
        why = (test in reason) ? reason[test] : "(no \"skipped: <reason>\" line in its output)"
        by_reason[why]++
      }
      printf "\n%d test%s skipped:\n", count, count == 1 ? "" : "s"
      fflush()
      for (why in by_reason) printf "  %4d  %s\n", by_reason[why], why | "sort -k1,1nr"
      close("sort -k1,1nr")
    }' - Testing/Temporary/LastTest.log
fi
exit "$status"
