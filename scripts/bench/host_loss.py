#!/usr/bin/env python3
"""Host-loss benchmark on the namespace test cluster: kill one host of 3 (testcluster.sh kill:
every process in its namespace, sshd included, like a power cut) while the reference trainer
runs, and time kill -> host.lost -> first resumed step, with dtrain's recovery phases.

  host_loss.py --dtrain BUILD/cli/dtrain [--reps 5] [--cases shrink,spare,spare-in-place]

  shrink  3 hosts x 2 slots, no spare: the job shrinks to 2 hosts (global batch kept)
  spare   3 hosts + 1 spare: the spare takes the lost host's ranks (world size kept)
  spare-in-place  the same with elastic.in_place: only the lost host's ranks start, on the
          spare; the other hosts' workers are carried over and hand them the state

Times: the harness's clock at the kill vs the events.jsonl stamps of host.lost and
recovery.completed (same machine, same clock); phases from recovery.completed. Reps outer,
cases inner, so load drift hits both alike. Needs root; brings up its own cluster (prefix
"bhl") and always takes it down. Exit 77 when the machine cannot host the cluster.
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
PREFIX = os.environ.get("DTRAIN_BENCH_CLUSTER_PREFIX", "bhl")
ENV = dict(os.environ, DTRAIN_TESTCLUSTER_PREFIX=PREFIX)


def cluster(*args, check=True):
    done = subprocess.run([TESTCLUSTER] + list(args), env=ENV, capture_output=True, text=True)
    if check and done.returncode != 0:
        raise RuntimeError("testcluster.sh %s: exit %d: %s" % (" ".join(args), done.returncode,
                                                            done.stderr.strip()[-300:]))
    return done


def parse_ts(text):
    moment = datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ")
    return moment.replace(tzinfo=datetime.timezone.utc).timestamp()


def read_events(home):
    events = []
    for path in glob.glob(os.path.join(home, "runs", "*", "events.jsonl")):
        with open(path) as log:
            for number, line in enumerate(log):
                if number == 0:
                    continue
                try:
                    events.append(json.loads(line))
                except ValueError:
                    pass  # a line being written
    return events


def wait_for(predicate, timeout, what):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise TimeoutError("timed out after %ds waiting for %s" % (timeout, what))


def write_spec(path, env, name, spare, dtrain, in_place=False):
    host = lambda n: "%s-h%d" % (PREFIX, n)  # noqa: E731
    lines = ["version: 1", "name: " + name, "hosts:"] + ["  - " + host(n) for n in (1, 2, 3)]
    if spare:
        lines += ["spares:", "  - " + host(4)]
    lines += ["slots_per_host: 2", "ssh:", "  user: " + env["DTRAIN_TESTCLUSTER_USER"],
              "  identity: [%s]" % env["DTRAIN_TESTCLUSTER_KEY"],
              "  known_hosts: " + env["DTRAIN_TESTCLUSTER_KNOWN_HOSTS"],
              "  connect_timeout: 5s", "  remote_dtrain: " + dtrain,
              'worker:\n  command: [dtrain-train, --steps, "400", --log-every, "100"]\n  backend: gloo',
              "batch: {global: 24, micro: 2}",
              "checkpoint: {interval_steps: 50, keep: 3}",
              "elastic: {min_hosts: 2, max_restarts: 1%s}" % (", in_place: true" if in_place else ""),
              "heartbeat: {interval: 200ms, timeout: 2s, hang_timeout: 10s}", "stop_grace: 2s"]
    with open(path, "w") as out:
        out.write("\n".join(lines) + "\n")


def one_run(args, env, case, work):
    home = os.path.join(work, "home")
    os.makedirs(home)
    spec = os.path.join(work, "job.yaml")
    write_spec(spec, env, "bench-" + case, case.startswith("spare"), args.dtrain, case == "spare-in-place")
    log = open(os.path.join(work, "dtrain.out"), "w")
    job = subprocess.Popen([TESTCLUSTER, "exec", "ctl", "env", "DTRAIN_HOME=" + home, args.dtrain, "submit", spec],
                           env=ENV, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for(lambda: any(e.get("ev") == "checkpoint.committed" and e.get("step", 0) >= 100
                             for e in read_events(home)), 120, "checkpoint step 100")
        kill_t = time.time()
        cluster("kill", "3")
        kill_cmd_ms = (time.time() - kill_t) * 1000
        job.wait(timeout=180)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGINT)
            job.wait(timeout=30)
        log.close()
    events = read_events(home)
    lost = [e for e in events if e.get("ev") == "host.lost"]
    completed = [e for e in events if e.get("ev") == "recovery.completed"]
    if not lost or not completed:
        raise RuntimeError("no host.lost / recovery.completed (exit %s; see %s)" % (job.returncode, work))
    plans = [e for e in events if e.get("ev") == "plan.generation"]
    return {"exit": job.returncode, "kill_cmd_ms": kill_cmd_ms, "kill_to_lost_ms": (parse_ts(lost[0]["ts"]) - kill_t) * 1000,
            "kill_to_step_ms": (parse_ts(completed[0]["ts"]) - kill_t) * 1000,
            "phases": completed[0].get("phases", {}), "world": plans[-1].get("world_size") if plans else None,
            "lost": completed[0].get("steps_lost")}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dtrain", required=True)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--cases", default="shrink,spare")
    args = parser.parse_args()
    args.dtrain = os.path.abspath(args.dtrain)
    cases = args.cases.split(",")
    up = cluster("up", "4", check=False)
    if up.returncode != 0:
        print("# host_loss: the test cluster cannot come up (exit %d): %s" % (up.returncode, up.stderr.strip()[-200:]))
        return up.returncode
    try:
        env = {}
        with open(cluster("env").stdout.strip()) as text:
            for line in text:
                key, _, value = line.strip().partition("=")
                env[key] = value
        print("# host loss: testcluster.sh kill of 1 of 3 hosts (2 slots each, heartbeat 200ms/2s), "
              "reference trainer, %d reps; load before %s" % (args.reps, open("/proc/loadavg").read().split()[0]))
        print("# kill->: from the start of `testcluster.sh kill` (kill_cmd: how long that command took;"
              " the processes die somewhere inside it)")
        print("%-14s %3s %6s %9s %12s %12s %8s %8s %8s %8s %8s %8s %6s %5s" % (
            "case", "rep", "world", "kill_cmd", "kill->lost", "kill->step", "stop|abrt", "replan", "spawn", "rendzv",
            "1st_step", "total", "lost", "exit"))
        results = {case: [] for case in cases}
        for rep in range(1, args.reps + 1):
            for case in cases:
                # Shared with the hosts (their /tmp is private): the run directory holds the
                # checkpoints every host reads.
                work = tempfile.mkdtemp(prefix="dtrain-bench-hostloss-", dir="/var/tmp")
                try:
                    result = one_run(args, env, case, work)
                except (RuntimeError, TimeoutError, subprocess.TimeoutExpired) as failure:
                    print("%-14s %3d  failed: %s" % (case, rep, failure))
                    cluster("restart", "3", check=False)
                    continue
                cluster("restart", "3")
                p = result["phases"]
                print("%-14s %3d %6s %7.0fms %10.0fms %10.0fms %8s %8s %8s %8s %8s %8s %6s %5s" % (
                    case, rep, result["world"], result["kill_cmd_ms"], result["kill_to_lost_ms"], result["kill_to_step_ms"],
                    p.get("stop_ms", p.get("abort_ms", "-")), p.get("replan_ms", "-"), p.get("spawn_ms", "-"),
                    p.get("rendezvous_ms", "-"), p.get("first_step_ms", p.get("state_and_first_step_ms", "-")),
                    p.get("total_ms", "-"), result["lost"], result["exit"]))
                sys.stdout.flush()
                results[case].append(result)
                shutil.rmtree(work, ignore_errors=True)
        print("# medians")
        for case, runs in results.items():
            if not runs:
                continue
            med = lambda get: statistics.median([get(r) for r in runs])  # noqa: E731
            print("%-14s runs %d: kill command %.0f ms, kill->host.lost %.0f ms, kill->first resumed step %.0f ms; phases: %s" % (
                case, len(runs), med(lambda r: r["kill_cmd_ms"]), med(lambda r: r["kill_to_lost_ms"]), med(lambda r: r["kill_to_step_ms"]),
                ", ".join("%s %.0f" % (key[:-3], med(lambda r, k=key: r["phases"].get(k, 0)))
                          for key in ("stop_ms", "abort_ms", "replan_ms", "spawn_ms", "rendezvous_ms", "first_step_ms",
                                      "state_and_first_step_ms") if any(key in r["phases"] for r in runs))))
        print("# load after %s" % open("/proc/loadavg").read().split()[0])
    finally:
        cluster("down", check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
