#!/usr/bin/env bash
# Runs a self-contained drill and keeps its report: the verdict JSON, the human table and the
# drill's progress lines go to $DTRAIN_DRILL_REPORTS (default $DTRAIN_HOME/drill-reports, or
# ~/.local/state/dtrain/drill-reports), one set of files per drill, named by time. Exits with
# the drill's status (0 pass, 1 an objective missed, 2 usage, 3 the drill could not run), so
# cron mails on failure when MAILTO is set.
#
# Example crontab line (every night at 03:17; dtrain on PATH or DTRAIN set):
#   17 3 * * *  /opt/dtrain/scripts/drill-cron.sh /opt/dtrain/configs/drill.yaml >/dev/null 2>&1 || echo "dtrain drill failed, see ~/.local/state/dtrain/drill-reports"
set -uo pipefail

if [ $# -lt 1 ]; then
  echo "usage: $0 DRILL.yaml [dtrain drill options...]" >&2
  exit 2
fi
spec=$1
shift
dtrain=${DTRAIN:-dtrain}
state_home=${XDG_STATE_HOME:-$HOME/.local/state}
reports=${DTRAIN_DRILL_REPORTS:-${DTRAIN_HOME:-$state_home/dtrain}/drill-reports}
mkdir -p "$reports" || exit 3
stamp=$(date -u +%Y%m%d-%H%M%S)
base="$reports/drill-$stamp"

"$dtrain" drill --spec "$spec" --json "$@" >"$base.json" 2>"$base.log"
status=$?
# The human table is rebuilt from the history so the kept report reads like the terminal one.
"$dtrain" drill --history >"$base.history.txt" 2>>"$base.log" || true
verdict=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("verdict","?"))' "$base.json" 2>/dev/null || echo "?")
echo "$(date -u +%FT%TZ) drill $spec: verdict $verdict (exit $status), report $base.json" | tee -a "$reports/drills.log"
exit $status
