#!/usr/bin/env python3
"""Launch fan-out benchmark (issue 32): dtrain flat, dtrain with a relay tree, and pdsh, on 16,
32 and 64 hosts of the namespace test cluster (scripts/testcluster.sh), from its control
namespace, same hosts, same user key, same known_hosts.

  fanout.py --dtrain BUILD/cli/dtrain [--hosts 16,32,64] [--reps 3] [--fanout N]
            [--run-timeout 180] [--out FILE]

Cases, interleaved: for each host count, --reps repetitions of the three cases, in reverse order
every other repetition (so load drift hits all three alike):
  pdsh   `pdsh -S -w HOSTS true` over OpenSSH (PDSH_RCMD_TYPE=ssh; PDSH_SSH_ARGS with the
         cluster's ssh_config: its user key and known_hosts, strict host keys), pdsh's default
         fan-out (32); start -> exit.
  flat   `dtrain submit` of a spec whose worker is /bin/true (one slot per host), with
         ssh.remote_dtrain = DTRAIN itself (no copying) and `scale: {tree: off}`: the supervisor
         connects to every host itself.
  tree   the same with `scale: {tree: on}` (fanout: dtrain's default, about the square root of
         the hosts; --fanout N: `scale: {tree: on, fanout: N}`): the supervisor reaches the
         relays, each relay starts its hosts' agents over SSH.
dtrain figures: submit start -> the last worker.started event (events.jsonl, ms stamps: same
machine, same clock) and submit start -> `dtrain submit` returned (workers reaped, agents
stopped, run log closed). A dtrain run counts only if it exits 0 and every host has a
worker.started; a tree run also needs host.connected events with relayed_by (hosts reached
through a relay), a flat run none. A run that fails either way, or does not end within
--run-timeout (then it is stopped: SIGINT, after 30 s SIGKILL, to the process group the
benchmark started), is reported as failed in its row and left out of the medians.

One untimed round of each case at the largest host count first (sshd's first exec of a binary
and the page cache are not launch costs). Prints every row, then per host count median [min] of
each column (and when the hosts' agents said hello: host.connected, for the tree the relays'
first) and the load average before/after; --out FILE: every row as JSON. Needs root and
pdsh; brings up its own cluster (prefix "bfo", or $DTRAIN_BENCH_CLUSTER_PREFIX) and always takes
it down. Exit 77 ("skipped: ...") when it cannot run here, 1 when a run failed.
"""
import argparse
import datetime
import glob
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
TESTCLUSTER = os.path.join(REPO, "scripts", "testcluster.sh")
PREFIX = os.environ.get("DTRAIN_BENCH_CLUSTER_PREFIX", "bfo")
ENV = dict(os.environ, DTRAIN_TESTCLUSTER_PREFIX=PREFIX)
CASES = ("pdsh", "flat", "tree")
STOP_GRACE_S = 30


# --- inside the control namespace: one timed command ---------------------------------------------
def in_ctl(argv):
    """--in-ctl OUTFILE CMD...: runs CMD (stdout and stderr to OUTFILE), prints one JSON line
    {start, end, rc} (time.time(), taken in the control namespace around the command alone)."""
    out_path, command = argv[0], argv[1:]
    with open(out_path, "w") as out:
        start = time.time()
        child = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        # A stop from the harness signals the whole process group: the command handles it, this
        # process waits for it to end.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        rc = child.wait()
        end = time.time()
    print(json.dumps({"start": start, "end": end, "rc": rc}))
    return 0


# --- outside ------------------------------------------------------------------------------------
def skipped(reason):
    print("skipped: " + reason)
    sys.stdout.flush()
    return 77


def cluster(*args, check=True, timeout=600):
    done = subprocess.run([TESTCLUSTER] + list(args), env=ENV, capture_output=True, text=True, timeout=timeout)
    if check and done.returncode != 0:
        raise RuntimeError("testcluster.sh %s: exit %d: %s" % (" ".join(args), done.returncode,
                                                            done.stderr.strip()[-300:]))
    return done


def loadavg():
    with open("/proc/loadavg") as text:
        return " ".join(text.read().split()[:3])


def parse_ts(text):
    """events.jsonl time stamps: 2025-01-02T03:04:05.678Z (UTC, ms)."""
    moment = datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ")
    return moment.replace(tzinfo=datetime.timezone.utc).timestamp()


def read_events(home):
    events = []
    for path in glob.glob(os.path.join(home, "runs", "*", "events.jsonl")):
        with open(path) as log:
            for line in log:
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                if isinstance(event, dict):
                    events.append(event)
    return events


def host_names(n):
    return ["%s-h%d" % (PREFIX, i) for i in range(1, n + 1)]


def write_spec(path, env, dtrain, hosts, case, fanout):
    lines = ["version: 1", "name: bench-fanout-" + case, "hosts:"] + ["  - " + h for h in hosts]
    lines += ["slots_per_host: 1", "ssh:",
              "  user: " + env["DTRAIN_TESTCLUSTER_USER"],
              "  identity: [%s]" % env["DTRAIN_TESTCLUSTER_KEY"],
              "  known_hosts: " + env["DTRAIN_TESTCLUSTER_KNOWN_HOSTS"],
              # 64 handshakes at once on 2 loaded cores can take longer than 5 s (as in launch.sh)
              "  connect_timeout: 30s",
              "  remote_dtrain: " + dtrain,
              "worker:", "  command: [/bin/true]", "  workdir: /"]
    if case == "flat":
        lines.append("scale: {tree: off}")
    elif fanout:
        lines.append("scale: {tree: on, fanout: %d}" % fanout)
    else:
        lines.append("scale: {tree: on}")
    with open(path, "w") as out:
        out.write("\n".join(lines) + "\n")


def run_in_ctl(command, out_path, timeout, stop_signal):
    """Runs `command` in the control namespace, timed there. Returns (times dict or None, error).
    On a timeout the process group this started gets stop_signal, then SIGKILL after a grace."""
    argv = [TESTCLUSTER, "exec", "ctl", sys.executable, os.path.abspath(__file__), "--in-ctl", out_path] + command
    job = subprocess.Popen(argv, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           start_new_session=True)
    try:
        stdout, stderr = job.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        # job is not reaped yet, so its pid (= the process group's id) is still ours.
        os.killpg(job.pid, stop_signal)
        try:
            job.communicate(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            os.killpg(job.pid, signal.SIGKILL)
            job.communicate()
        return None, "did not end within %d s (stopped)" % timeout
    if job.returncode != 0:
        return None, "harness exit %d: %s" % (job.returncode, stderr.strip()[-200:])
    try:
        return json.loads(stdout.strip().splitlines()[-1]), None
    except (ValueError, IndexError):
        return None, "no timing from the control namespace: %r" % stdout[-200:]


def tail(path, lines=3):
    try:
        with open(path, errors="replace") as text:
            return " | ".join(line.strip() for line in text.read().strip().splitlines()[-lines:])
    except OSError:
        return ""


def measure(args, env, case, n, rep, work):
    """One run; returns its row (ok False with an error when it failed)."""
    hosts = host_names(n)
    directory = os.path.join(work, "%s-%d-%s" % (case, n, rep))
    os.makedirs(directory)
    out_path = os.path.join(directory, "out.log")
    row = {"hosts": n, "rep": rep, "case": case, "ok": False, "error": None, "load1": loadavg().split()[0],
           "wall_s": None, "started_s": None, "exit_s": None}
    if case == "pdsh":
        # pdsh reads its rcmd module and ssh arguments from the environment (as launch.sh)
        command = ["env", "PDSH_RCMD_TYPE=ssh",
                   "PDSH_SSH_ARGS=-F %s -x %%h" % env["DTRAIN_TESTCLUSTER_SSH_CONFIG"],
                   "pdsh", "-S", "-w", ",".join(hosts), "true"]
        times, error = run_in_ctl(command, out_path, args.run_timeout, signal.SIGTERM)
        if times:
            row["wall_s"] = row["exit_s"] = times["end"] - times["start"]
            row["rc"] = times["rc"]
            if times["rc"] != 0:
                error = "pdsh exit %d: %s" % (times["rc"], tail(out_path))
        row["error"] = error
        row["ok"] = error is None
        return row

    home = os.path.join(directory, "home")
    spec = os.path.join(directory, "fanout.yaml")
    write_spec(spec, env, args.dtrain, hosts, case, args.fanout)
    command = ["env", "DTRAIN_HOME=" + home, args.dtrain, "submit", spec]
    times, error = run_in_ctl(command, out_path, args.run_timeout, signal.SIGINT)
    events = read_events(home)
    started = {}
    for event in events:
        if event.get("ev") == "worker.started" and "ts" in event:
            started[event.get("host")] = max(started.get(event.get("host"), 0), parse_ts(event["ts"]))
    connected = [e for e in events if e.get("ev") == "host.connected"]
    relayed = [e for e in connected if e.get("relayed_by")]
    row["workers_started"] = len(started)
    row["hosts_connected"] = len(connected)
    row["relayed"] = len(relayed)
    row["relays"] = len({e["relayed_by"] for e in relayed})
    row["hosts_lost"] = sum(1 for e in events if e.get("ev") == "host.lost")
    row["fanout"] = args.fanout if case == "tree" else None
    if times:
        row["rc"] = times["rc"]
        row["exit_s"] = times["end"] - times["start"]
        if started:
            row["started_s"] = max(started.values()) - times["start"]
        # The first hop: hosts the supervisor reached itself (every host when flat, the relays in
        # a tree); then every host's agent connected (a relayed host's hello came through its relay).
        direct = [parse_ts(e["ts"]) for e in connected if not e.get("relayed_by") and "ts" in e]
        every = [parse_ts(e["ts"]) for e in connected if "ts" in e]
        row["direct_connected_s"] = max(direct) - times["start"] if direct else None
        row["all_connected_s"] = max(every) - times["start"] if every else None
        missing = [h for h in hosts if h not in started]
        if times["rc"] != 0:
            error = "dtrain submit exit %d: %s" % (times["rc"], tail(out_path))
        elif missing:
            error = "no worker.started on %d of %d hosts (%s%s)" % (len(missing), n, ", ".join(missing[:4]),
                                                                   ", ..." if len(missing) > 4 else "")
        elif case == "tree" and not relayed:
            error = "tree: no host.connected with relayed_by (no host was reached through a relay)"
        elif case == "flat" and relayed:
            error = "flat: %d hosts reached through a relay" % len(relayed)
    row["error"] = error
    row["ok"] = error is None
    if row["ok"]:
        shutil.rmtree(directory, ignore_errors=True)
    else:
        row["kept"] = directory
    return row


def fmt(value):
    return "-" if value is None else "%.2f" % value


def print_row(row):
    if row["case"] == "pdsh":
        figures = "wall %s s" % fmt(row["wall_s"])
    else:
        figures = "started %s s, exit %s s, workers %s/%d, relayed %s via %s relays; connected: direct %s s, all %s s" % (
            fmt(row["started_s"]), fmt(row["exit_s"]), row.get("workers_started"), row["hosts"],
            row.get("relayed"), row.get("relays"), fmt(row.get("direct_connected_s")), fmt(row.get("all_connected_s")))
    print("%5d %3s %-5s %-6s %s  (load %s)%s" % (row["hosts"], row["rep"], row["case"], "ok" if row["ok"] else "FAILED",
                                                figures, row["load1"], "" if row["ok"] else "  " + str(row["error"])))
    sys.stdout.flush()


def stats(values):
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    return "%.2f s [%.2f]" % (statistics.median(values), min(values))


def print_table(n, rows, reps):
    ok = lambda case: [r for r in rows if r["case"] == case and r["ok"]]  # noqa: E731
    failed = {case: sum(1 for r in rows if r["case"] == case and not r["ok"]) for case in CASES}
    print()
    print("# %d hosts: median [min] of the runs that succeeded (of %d each); load now %s" % (n, reps, loadavg()))
    print("| hosts | flat: submit → all started | flat: submit → exit | tree: submit → all started | "
          "tree: submit → exit | pdsh -S true | failed (flat/tree/pdsh) |")
    print("|---|---|---|---|---|---|---|")
    print("| %d | %s | %s | %s | %s | %s | %d/%d/%d |" % (
        n, stats([r["started_s"] for r in ok("flat")]), stats([r["exit_s"] for r in ok("flat")]),
        stats([r["started_s"] for r in ok("tree")]), stats([r["exit_s"] for r in ok("tree")]),
        stats([r["wall_s"] for r in ok("pdsh")]), failed["flat"], failed["tree"], failed["pdsh"]))
    relays = sorted({r["relays"] for r in ok("tree")})
    if relays:
        print("# tree: %s relays, %s hosts relayed; host.connected of the relays (the first hop) %s, of every host %s"
              % ("/".join(map(str, relays)), "/".join(map(str, sorted({r["relayed"] for r in ok("tree")}))),
                 stats([r["direct_connected_s"] for r in ok("tree")]), stats([r["all_connected_s"] for r in ok("tree")])))
    if ok("flat"):
        print("# flat: host.connected of every host %s" % stats([r["all_connected_s"] for r in ok("flat")]))
    sys.stdout.flush()


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--in-ctl":
        return in_ctl(sys.argv[2:])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "),
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("--dtrain", required=True, help="the dtrain binary (BUILD/cli/dtrain); every host runs it")
    parser.add_argument("--hosts", default="16,32,64", help="host counts, comma-separated (default 16,32,64)")
    parser.add_argument("--reps", type=int, default=3, help="repetitions per host count (default 3)")
    parser.add_argument("--fanout", type=int, default=None,
                        help="scale.fanout for the tree runs (default: dtrain's, about sqrt(hosts))")
    parser.add_argument("--run-timeout", type=int, default=180, help="seconds per run before it is stopped (default 180)")
    parser.add_argument("--out", help="write every row as JSON to this file")
    args = parser.parse_args()
    try:
        counts = [int(n) for n in args.hosts.split(",") if n.strip()]
    except ValueError:
        parser.error("--hosts must be comma-separated numbers, e.g. 16,32,64")
    if not counts or any(n < 2 or n > 200 for n in counts):
        parser.error("--hosts: every count must be 2..200 (a tree needs at least 2 hosts)")
    if args.reps < 1:
        parser.error("--reps must be >= 1")
    if args.fanout is not None and args.fanout < 2:
        parser.error("--fanout must be >= 2")
    args.dtrain = os.path.abspath(args.dtrain)
    if not (os.path.isfile(args.dtrain) and os.access(args.dtrain, os.X_OK)):
        parser.error("'%s' is not an executable dtrain; build it first" % args.dtrain)
    if os.geteuid() != 0:
        return skipped("needs root (network namespaces of scripts/testcluster.sh); run it with sudo")
    if not shutil.which("pdsh"):
        return skipped("no pdsh; apt-get install -y pdsh (scripts/setup.sh --tests installs it)")

    work = tempfile.mkdtemp(prefix="dtrain-bench-fanout-")
    rows = []
    load_before = loadavg()
    try:
        up = cluster("up", str(max(counts)), check=False)
        if up.returncode == 77:
            return skipped("the test cluster cannot come up here: " + up.stderr.strip()[-200:])
        if up.returncode != 0:
            print("# fanout: the test cluster did not come up (exit %d): %s" % (up.returncode, up.stderr.strip()[-300:]))
            return 1
        env = {}
        with open(cluster("env").stdout.strip()) as text:
            for line in text:
                key, _, value = line.strip().partition("=")
                env[key] = value
        print("# launch fan-out: dtrain flat (scale.tree off), dtrain tree (scale.tree on, fanout %s), "
              "pdsh -S -w HOSTS true (ssh rcmd, default fan-out 32)" % (args.fanout or "default"))
        print("# namespace cluster %s: %d hosts, one sshd each, %d cpus; worker /bin/true, one per host; "
              "%d reps per host count, interleaved; load before %s; %s UTC" % (
                  PREFIX, max(counts), os.cpu_count(), args.reps, load_before,
                  datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M")))
        warm = max(counts)
        for case in CASES:
            row = measure(args, env, case, warm, "warm", work)
            if not row["ok"]:
                print("# warm-up %s at %d hosts failed: %s" % (case, warm, row["error"]))
        print("%5s %3s %-5s %-6s %s" % ("hosts", "rep", "case", "result", "figures"))
        for n in counts:
            for rep in range(1, args.reps + 1):
                order = CASES if rep % 2 else tuple(reversed(CASES))
                for case in order:
                    row = measure(args, env, case, n, rep, work)
                    rows.append(row)
                    print_row(row)
            print_table(n, [r for r in rows if r["hosts"] == n], args.reps)
        print()
        print("# load before %s, after %s; %s UTC" % (load_before, loadavg(),
                                                      datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M")))
        failed = [r for r in rows if not r["ok"]]
        if failed:
            print("# %d of %d runs failed (kept: %s)" % (len(failed), len(rows),
                                                         ", ".join(r.get("kept", "-") for r in failed)))
            return 1
        return 0
    finally:
        if args.out and rows:
            with open(args.out, "w") as out:
                json.dump({"prefix": PREFIX, "dtrain": args.dtrain, "hosts": counts, "reps": args.reps,
                           "fanout": args.fanout, "cpus": os.cpu_count(), "load_before": load_before,
                           "load_after": loadavg(), "rows": rows}, out, indent=1)
                out.write("\n")
        down = cluster("down", check=False)
        if down.returncode != 0:
            print("# testcluster.sh down: exit %d: %s" % (down.returncode, down.stderr.strip()[-200:]))
        if not any(not r["ok"] for r in rows):
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
