#!/usr/bin/env python3
"""Scale benchmark: one real supervisor over a simulated cluster (dtrain-sim: the real driver
and supervisor, agents simulated in-process by sim::FakeCluster, speaking the real
protocol over socketpairs), at several sizes.

  sim.py --build BUILD [--build OTHER ...] [--hosts 128,512,1024,2048] [--slots 8] [--reps 3]
         [--steady 10] [--fault host-loss] [--interval 1s] [--tree off,on] [--fanout N]
         [--ssh-setup-ms MS] [--max-parallel N]

--tree off,on runs each size flat (every host its own connection) and as a relay tree (spec
scale.tree on: about sqrt(hosts) relays carry the others' streams); --ssh-setup-ms models the
cost of one SSH session (per hop; at most --max-parallel at once per initiator), so that
submit → every worker running is a launch time under that latency.

With several --build directories (a before and an after), every repetition runs each build in
turn at each size, so that both see the same machine moment; the medians come per build.

Per run: supervisor CPU (% of one core; the process's CPU minus the simulation thread's, over a
steady window where every rank beats once per interval), peak RSS of the whole process, events
written per second over the run, time from the host's loss (failure.detected) to the decision
(recovery.started), to the new generation's spawn and to its first step, hosts lost (anything
above 1 is a host the supervisor lost to its own slowness), submit → every worker running, and
how long `dtrain status RUN` and `dtrain report RUN` take on the resulting run log. Then medians
per size.
Standard library only; every run's DTRAIN_HOME is a temporary directory removed afterwards.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def one_run(build, hosts, slots, steady, fault, interval, timeout, tree="off", extra=()):
    home = tempfile.mkdtemp(prefix="dtrain-sim-bench-")
    try:
        command = [os.path.join(build, "cli", "dtrain-sim"), "--hosts", str(hosts), "--slots", str(slots),
                   "--interval", interval, "--steady", "%ds" % steady, "--fault", fault, "--home", home,
                   "--tree", tree] + list(extra)
        try:
            done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=timeout,
                                  text=True)
        except subprocess.TimeoutExpired:
            return {"hosts": hosts, "error": "timed out after %ds" % timeout}
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        if not lines:
            return {"hosts": hosts, "error": "no result (exit %d)" % done.returncode}
        result = json.loads(lines[-1])
        run_id = os.path.basename(result["run_dir"])
        env = dict(os.environ, DTRAIN_HOME=home)
        started = time.monotonic()
        status = subprocess.run([os.path.join(build, "cli", "dtrain"), "status", run_id], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
        result["status_s"] = time.monotonic() - started
        result["status_exit"] = status.returncode
        started = time.monotonic()
        report = subprocess.run([os.path.join(build, "cli", "dtrain"), "report", run_id], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300)
        result["report_s"] = time.monotonic() - started
        result["report_exit"] = report.returncode
        return result
    finally:
        shutil.rmtree(home, ignore_errors=True)


COLUMNS = [("ranks", "ranks", "%d"), ("supervisor_cpu_percent", "cpu %", "%.1f"),
           ("peak_rss_mb", "rss MB", "%.0f"), ("frames_per_second", "frames/s", "%.0f"),
           ("events_per_second", "events/s", "%.0f"), ("submit_to_running_ms", "submit→running ms", "%d"),
           ("detected_to_decision_ms", "detect→decision ms", "%d"), ("detected_to_spawn_ms", "detect→spawn ms", "%d"),
           ("detected_to_first_step_ms", "detect→1st step ms", "%d"), ("hosts_lost", "hosts lost", "%d"),
           ("hosts_reattached", "re-attached", "%d"), ("status_s", "status s", "%.2f"),
           ("report_s", "report s", "%.2f"), ("exit_code", "exit", "%d")]


def row(result, label):
    if "error" in result:
        return "| %s%d | %s |" % (label, result["hosts"], result["error"])
    cells = []
    for key, _, fmt in COLUMNS:
        value = result.get(key)
        cells.append("-" if value is None else fmt % value)
    return "| %s%d | %s |" % (label, result["hosts"], " | ".join(cells))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", required=True, action="append",
                        help="build directory with cli/dtrain-sim and cli/dtrain (repeat to compare builds)")
    parser.add_argument("--hosts", default="128,512,1024,2048")
    parser.add_argument("--slots", type=int, default=8)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--steady", type=int, default=10, help="seconds of the measured steady window")
    parser.add_argument("--fault", default="host-loss")
    parser.add_argument("--interval", default="1s")
    parser.add_argument("--timeout", type=int, default=600, help="seconds per run")
    parser.add_argument("--tree", default="off", help="off, on, or off,on (both, each size)")
    parser.add_argument("--fanout", type=int, default=0)
    parser.add_argument("--ssh-setup-ms", type=int, default=0)
    parser.add_argument("--max-parallel", type=int, default=64)
    args = parser.parse_args()
    sizes = [int(h) for h in args.hosts.split(",")]
    trees = args.tree.split(",")
    extra = ["--fanout", str(args.fanout), "--ssh-setup-ms", str(args.ssh_setup_ms),
             "--max-parallel", str(args.max_parallel)]
    print("ssh setup %d ms per session, at most %d at once per initiator" % (args.ssh_setup_ms, args.max_parallel))
    print("load before: %s" % loadavg())
    header = "| hosts | " + " | ".join(title for _, title, _ in COLUMNS) + " |"
    print(header)
    print("|" + "---|" * (len(COLUMNS) + 1))
    variants = [(build, tree) for build in args.build for tree in trees]
    def label_of(build, tree):
        parts = ([build] if len(args.build) > 1 else []) + (["tree " + tree] if len(trees) > 1 else [])
        return ", ".join(parts) + ": " if parts else ""
    label = {variant: label_of(*variant) for variant in variants}
    builds = variants
    results = {(variant, size): [] for variant in variants for size in sizes}
    for rep in range(args.reps):
        order = sizes if rep % 2 == 0 else list(reversed(sizes))
        turn = variants if rep % 2 == 0 else list(reversed(variants))
        for size in order:
            for variant in turn:
                build, tree = variant
                result = one_run(build, size, args.slots, args.steady, args.fault, args.interval, args.timeout,
                                 tree, extra)
                results[(variant, size)].append(result)
                print(row(result, label[variant]), flush=True)
    print("\nmedians (%d reps):" % args.reps)
    print(header)
    print("|" + "---|" * (len(COLUMNS) + 1))
    for build in builds:
        for size in sizes:
            good = [r for r in results[(build, size)] if "error" not in r]
            if not good:
                print("| %s%d | no successful run |" % (label[build], size))
                continue
            median = {"hosts": size}
            for key, _, _ in COLUMNS:
                values = [r[key] for r in good if isinstance(r.get(key), (int, float))]
                if values:
                    median[key] = statistics.median(values)
            print(row(median, label[build]))
    print("load after: %s" % loadavg())
    return 0


if __name__ == "__main__":
    sys.exit(main())
