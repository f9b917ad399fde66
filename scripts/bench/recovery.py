#!/usr/bin/env python3
"""Recovery benchmark: kill -9 or SIGSTOP one worker of a running 4-worker job, time the fault
-> first resumed training step.

  recovery.py --dtrain BUILD/cli/dtrain [--reps 5] [--cases trainer,ddp-dtrain,ddp-torchrun]
              (more cases: ddp-dtrain-pool, ddp-dtrain-store, ddp-dtrain-in-place, ddp-dtrain-standby,
              trainer-in-place, trainer-standby) [--faults kill,stop]
              [--hang-timeout 5] [--pg-timeout 20]
              [--kill-at 110] [--run-timeout 240] [--torch-python /usr/bin/python3]

Cases:
  trainer-in-place  the same with elastic.in_place: only the failed rank's process is replaced;
                 the survivors re-rendezvous and hand it the newest completed step (issue 17).
  trainer-in-place-no-health  the same with health: {enabled: false}: the cost of the health gate
                 (the failed rank's host checks itself before its replacement starts; issue 29).
  trainer        dtrain-train (the reference trainer) on 4 local workers under dtrain, Gloo,
                 checkpoint every 20 steps; timings from dtrain's own events (failure.detected,
                 recovery.completed) against the harness's fault time.
  ddp-dtrain     scripts/bench/ddp_train.py (plain PyTorch DDP, Gloo, CPU, checkpoint every 20
  ddp-torchrun   steps) under dtrain (instrumented: the bootstrap's beats are its steps) and under
                 torchrun --max_restarts=3 --monitor_interval=0.1; both timed from the script's
                 own step log (wall clock, same machine).
  ddp-dtrain-store  the same script with --dtrain-store under dtrain: its process group
                 rendezvouses through dtrain's KV store (over the agent's unix socket) instead
                 of a TCPStore that rank 0 opens at MASTER_PORT (torch 1.13's TCPStore client
                 retries a refused connect only once a second); the script then beats itself.
                 Not in the default --cases.
  ddp-dtrain-standby / trainer-standby  in place with elastic.standby_per_host: 1: the
                 replacement is a warm standby (started, torch imported) taking the rank.
  ddp-dtrain-pool  the same unmodified script under dtrain with `worker.pool: {per_host: 4}`: the
                 agent keeps 4 processes of the command waiting in the bootstrap with torch
                 imported; the restarted generation's ranks are those processes taking their rank
                 (only then does the script run). The fault waits until the pool is ready (4
                 processes with torch mapped and the agent's socket open) and the pool's memory
                 per process (RSS, PSS from /proc/PID/smaps_rollup) is measured then; the script
                 is given more steps and the job is stopped (SIGINT) after the first resumed step,
                 since the pool's first fill takes longer than --kill-at steps. Not in the default
                 --cases.
  ddp-dtrain-in-place  the same script with --in-place under dtrain with elastic.in_place: the
                 survivors keep their processes and rejoin (dtrain_worker.InPlace), only rank 1
                 is started again and takes the newest completed step from rank 0 by broadcast;
                 f->exec is then that one new process. Not in the default --cases.
Faults (--faults, default both), injected into rank 1 once rank 0 has logged step >= --kill-at:
  kill           SIGKILL.
  stop           SIGSTOP: the rank hangs, alive. dtrain finds it by its beats after
                 heartbeat.hang_timeout (--hang-timeout, written into the spec), samples it and
                 restarts the generation; torchrun has no hang detection: the other ranks block in
                 Gloo until the process group's timeout (--pg-timeout, given to ddp_train.py under
                 both launchers; 0 = torch's default, 30 min) raises, they exit, and torchrun
                 restarts the group (closing the stopped rank: SIGTERM, 30 s, SIGKILL).
Every case prints its repetitions and medians per fault. Every job is waited for or stopped (a
stopped rank gets SIGCONT first), and every worker process it started is checked gone (killed by
pid, and reported, if not) before the next. Standard library only; the DDP cases need torch
importable by --torch-python (skipped if not).
"""
import argparse
import datetime
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DDP_SCRIPT = os.path.join(HERE, "ddp_train.py")
POLL_S = 0.005


def parse_ts(text):
    """events.jsonl time stamps: 2025-01-02T03:04:05.678Z (UTC, ms)."""
    moment = datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ")
    return moment.replace(tzinfo=datetime.timezone.utc).timestamp()


def read_events(run_dir):
    events = []
    try:
        with open(os.path.join(run_dir, "events.jsonl")) as lines:
            for line in lines:
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                if "ev" in event:
                    events.append(event)
    except FileNotFoundError:
        pass
    return events


def first_event(events, name):
    for event in events:
        if event["ev"] == name:
            return event
    return None


def wait_for(predicate, timeout, what):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(POLL_S)
    raise TimeoutError("%s: not within %.0fs" % (what, timeout))


def pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie child of someone else counts as gone
        with open("/proc/%d/stat" % pid) as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Job:
    """A launcher process in its own session; stop() ends it and everything it started."""

    def __init__(self, argv, cwd, env, log_path):
        self.log = open(log_path, "wb")
        self.proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=self.log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)

    def wait(self, timeout):
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, first_signal=signal.SIGINT, grace=15):
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, first_signal)
            except ProcessLookupError:
                pass
            if self.wait(grace) is None:
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait()
        self.log.close()
        return self.proc.returncode



# --- faults --------------------------------------------------------------------------------------

FAULT_SIGNALS = {"kill": signal.SIGKILL, "stop": signal.SIGSTOP}
FAULT_NAMES = {"kill": "kill -9", "stop": "SIGSTOP"}


def is_worker_process(pid, marker):
    """Whether pid is still one of our workers (its command line names `marker`), so that a
    recycled pid of someone else is never signalled."""
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as cmdline:
            return marker.encode() in cmdline.read()
    except OSError:
        return False


def finish(job, first_signal, victim, worker_pids, marker):
    """Ends a job, whatever state the repetition left it in: a stopped victim gets SIGCONT first
    (a stopped process keeps TERM pending and would outlive the launcher's grace), then the
    launcher's session is stopped; then every worker process the job ever started must be gone:
    one that is not is killed by pid and reported. Returns (exit code, the pids left over)."""
    if victim and is_worker_process(victim, marker):
        try:
            os.kill(victim, signal.SIGCONT)
        except ProcessLookupError:
            pass
    code = job.stop(first_signal)
    # The launcher's own stop path ends its workers; give a worker that is being reaped a moment.
    left = []
    try:
        wait_for(lambda: not [pid for pid in worker_pids() if pid_alive(pid) and is_worker_process(pid, marker)],
                 10, "the job's workers exiting")
    except TimeoutError:
        left = [pid for pid in worker_pids() if pid_alive(pid) and is_worker_process(pid, marker)]
        for pid in left:
            for sig in (signal.SIGCONT, signal.SIGKILL):
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
        print("# LEFT OVER after the job ended: worker pids %s (killed now)" % left)
    return code, left


# --- the DDP script: one step log for both launchers -------------------------------------------

DDP_MARKER = "ddp_train.py"


def read_step_log(mark_dir):
    """[(kind, step or rank, t, restart, pid)] from ddp_train.py's step log."""
    entries = []
    try:
        with open(os.path.join(mark_dir, "steps.log")) as lines:
            for line in lines:
                fields = line.split()
                if len(fields) < 4 or not line.endswith("\n"):
                    continue
                values = dict(field.split("=", 1) for field in fields[2:] if "=" in field)
                entries.append((fields[0], int(fields[1]), float(values["t"]), values["restart"],
                                int(values.get("pid", 0))))
    except FileNotFoundError:
        pass
    return entries


def ddp_worker_pids(mark_dir):
    """Every worker process of the job so far: each rank's every start logs "exec ... pid=P"."""
    return lambda: sorted({entry[4] for entry in read_step_log(mark_dir) if entry[0] == "exec" and entry[4]})


def read_pid(mark_dir, rank):
    try:
        with open(os.path.join(mark_dir, "pid-%d" % rank)) as text:
            return int(text.read().strip() or 0)
    except (FileNotFoundError, ValueError):
        return 0


def ddp_args(args, work, steps=None):
    argv = [DDP_SCRIPT, "--steps", str(steps or args.kill_at + 40), "--ckpt-every", "20",
            "--ckpt-dir", os.path.join(work, "ckpt"), "--mark-dir", os.path.join(work, "mark")]
    if args.pg_timeout > 0:  # 0: torch's default process-group timeout (30 min)
        argv += ["--pg-timeout", "%g" % args.pg_timeout]
    return argv


class ExitWatch:
    """When the old generation's processes went: the first of the victim's peers, and the victim
    (for a hang, these show who ended the generation and when). Polled with the step log."""

    def __init__(self, victim, peers, fault_t):
        self.victim, self.peers, self.fault_t = victim, peers, fault_t
        self.peer_gone_s = None
        self.victim_gone_s = None

    def poll(self):
        now = time.time() - self.fault_t
        if self.peer_gone_s is None and any(pid and not pid_alive(pid) for pid in self.peers):
            self.peer_gone_s = now
        if self.victim_gone_s is None and not pid_alive(self.victim):
            self.victim_gone_s = now


def fault_and_time_ddp(args, work, job, fault, injected, new_workers=4, before_fault=None):
    """Sends `fault` to rank 1 at step >= kill_at; returns the timings seen in the step log.
    `injected` (a dict) gets the victim's pid as soon as it is signalled, for the cleanup.
    new_workers: how many processes the recovery starts (4; in place, only the victim's).
    before_fault: called first (it may wait); what it returns goes into the result."""
    mark = os.path.join(work, "mark")
    ready = before_fault() if before_fault else {}

    def reached():
        steps = [e for e in read_step_log(mark) if e[0] == "step"]
        return steps[-1] if steps and steps[-1][1] >= args.kill_at else None

    last = wait_for(reached, args.run_timeout, "rank 0 reaching step %d" % args.kill_at)
    pids = [read_pid(mark, rank) for rank in range(4)]
    victim = pids[1]
    fault_t = time.time()
    os.kill(victim, FAULT_SIGNALS[fault])
    injected["victim"] = victim
    restart_at_fault = last[3]
    exits = ExitWatch(victim, [pid for rank, pid in enumerate(pids) if rank != 1], fault_t)

    def resumed():
        exits.poll()
        for kind, step, t, restart, _ in read_step_log(mark):
            if kind == "step" and restart != restart_at_fault:
                return (step, t)
        if job.proc.poll() is not None:
            raise RuntimeError("the launcher exited (code %s) before a resumed step" % job.proc.returncode)
        return None

    first_step, first_t = wait_for(resumed, args.run_timeout, "first step after the restart (not recovered)")
    entries = read_step_log(mark)
    execs = [e[2] for e in entries if e[0] == "exec" and e[3] != restart_at_fault]
    before = [e[1] for e in entries if e[0] == "step" and e[3] == restart_at_fault]
    resume = [e for e in entries if e[0] == "resume" and e[3] != restart_at_fault]
    resume_step = resume[0][1] if resume else first_step - 1
    # The launcher's part ends when the last new worker runs the script; the rest (importing
    # torch, rendezvous, loading the checkpoint, one step) is the script's and the same for both.
    respawn_s = max(execs) - fault_t if len(execs) >= new_workers else None
    # Rank 0's own phases after the restart: interpreter start -> torch imported -> rendezvous
    # (init_process_group) done -> first step (which includes loading the checkpoint).
    def rank0(kind):
        stamps = [e[2] for e in entries if e[0] == kind and e[1] == 0 and e[3] != restart_at_fault]
        return stamps[0] if stamps else None
    exec0, imported0, joined0 = rank0("exec"), rank0("imported"), rank0("joined")
    script = {}
    if None not in (exec0, imported0, joined0):
        script = {"import_s": imported0 - exec0, "rendezvous_s": joined0 - imported0, "to_step_s": first_t - joined0}
    return {"fault_t": fault_t, "fault_to_step_s": first_t - fault_t, "fault_to_respawn_s": respawn_s,
            "peer_gone_s": exits.peer_gone_s, "victim_gone_s": exits.victim_gone_s,
            "last_step": max(before), "resume_step": resume_step, "steps_lost": max(before) - resume_step,
            "script": script, **ready}


def run_ddp_torchrun(args, work, fault):
    log_dir = os.path.join(work, "torchrun-logs")
    # torchrun as Debian's python3-torch installs it, or the module where no script is on PATH.
    torchrun = ["torchrun"] if shutil.which("torchrun") else [args.torch_python, "-m", "torch.distributed.run"]
    argv = torchrun + ["--nproc_per_node=4", "--max_restarts=3", "--monitor_interval=0.1",
            "--redirects=1", "--tee=1", "--log_dir=" + log_dir, "--master_port=%d" % free_port()] + ddp_args(args, work)
    env = dict(os.environ)
    job = Job(argv, work, env, os.path.join(work, "torchrun.out"))
    injected = {}
    try:
        result = fault_and_time_ddp(args, work, job, fault, injected)
        job.wait(args.run_timeout)
    finally:
        code, left = finish(job, signal.SIGTERM, injected.get("victim"),
                            ddp_worker_pids(os.path.join(work, "mark")), DDP_MARKER)
    result["exit"] = code
    result["left_over"] = left
    return result


def dtrain_env(home):
    env = dict(os.environ)
    env["DTRAIN_HOME"] = home
    return env


def only_run_dir(home):
    runs = os.path.join(home, "runs")

    def found():
        names = os.listdir(runs) if os.path.isdir(runs) else []
        return os.path.join(runs, names[0]) if names else None

    return wait_for(found, 30, "run directory under " + runs)


def dtrain_detection(run_dir, fault_t):
    events = read_events(run_dir)
    detected = first_event(events, "failure.detected")
    hang = first_event(events, "worker.hang")
    completed = first_event(events, "recovery.completed")
    out = {}
    if detected:
        out["detect_latency_ms"] = detected.get("latency_ms")
        out["fault_to_detected_ms"] = (parse_ts(detected["ts"]) - fault_t) * 1000
        out["detected_kind"] = detected.get("kind")
    if hang:
        # The rank blamed and the step it last beat: under the bootstrap, an unmodified script's
        # optimizer steps are its beats, so a step here means the beats found the hang.
        out["fault_to_hang_ms"] = (parse_ts(hang["ts"]) - fault_t) * 1000
        out["hang"] = {key: hang.get(key) for key in ("rank", "step", "phase", "silent_ms")}
    off = first_event(events, "hang_detection.off")
    if off:
        out["hang_detection_off"] = off.get("ranks")
    if completed:
        out["phases"] = completed.get("phases", {})
        out["steps_lost_event"] = completed.get("steps_lost")
        out["resume_step_event"] = completed.get("resume_step")
        out["fault_to_completed_s"] = parse_ts(completed["ts"]) - fault_t
    return out


def event_timeline(run_dir, detected_gen=0):
    """Recovery phases from the event times, for workers that never beat (no recovery.completed):
    stop = recovery.started -> resources.released (old generation), replan = -> generation.spawned,
    spawn = -> the last worker.started of the new generation. Milliseconds."""
    events = read_events(run_dir)

    def when(name, gen, last=False):
        stamps = [parse_ts(e["ts"]) for e in events if e["ev"] == name and e.get("gen") == gen]
        return (max(stamps) if last else min(stamps)) if stamps else None

    started = when("recovery.started", detected_gen)
    released = when("resources.released", detected_gen, last=True)
    spawned = when("generation.spawned", detected_gen + 1)
    running = when("worker.started", detected_gen + 1, last=True)
    if None in (started, released, spawned, running):
        return {}
    return {"stop_ms": (released - started) * 1000, "replan_ms": (spawned - released) * 1000,
            "spawn_ms": (running - spawned) * 1000}


def write_spec(path, name, command, hang_timeout_s, extra="", elastic="max_restarts: 3", worker_extra=""):
    # Timeouts must nest (interval < timeout < hang_timeout); the host-silence timeout does not
    # matter on one host, so it sits halfway.
    quoted = ", ".join(json.dumps(part) for part in command)
    with open(path, "w") as spec:
        spec.write("version: 1\nname: %s\nslots_per_host: 4\n" % name)
        spec.write("worker:\n  command: [%s]\n  backend: gloo\n%s" % (quoted, worker_extra))
        spec.write("elastic: {%s}\n" % elastic)
        spec.write("heartbeat: {interval: 500ms, timeout: %dms, hang_timeout: %dms}\n" %
                   (hang_timeout_s * 500, hang_timeout_s * 1000))
        spec.write("stop_grace: 5s\n" + extra)


def elastic_line(in_place, standby):
    line = "max_restarts: 3"
    if in_place:
        line += ", in_place: true"
    if standby:
        line += ", standby_per_host: %d" % standby
    return line


def pool_processes(mark_dir):
    """Processes of the pool of the job whose step log is in mark_dir (their command line names
    it; their environment says DTRAIN_STANDBY=bootstrap, kept in /proc after the assign): pid ->
    (torch mapped and a socket open, i.e. ready)."""
    found = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        try:
            with open("/proc/%d/cmdline" % pid, "rb") as cmdline:
                if mark_dir.encode() not in cmdline.read():
                    continue
            with open("/proc/%d/environ" % pid, "rb") as environ:
                if b"DTRAIN_STANDBY=bootstrap" not in environ.read().split(b"\0"):
                    continue
            with open("/proc/%d/maps" % pid) as maps:
                torch_mapped = "libtorch" in maps.read()
            socket_open = any(os.readlink("/proc/%d/fd/%s" % (pid, fd)).startswith("socket:")
                              for fd in os.listdir("/proc/%d/fd" % pid))
        except OSError:
            continue
        found[pid] = torch_mapped and socket_open
    return found


def memory_kib(pid):
    """(Rss, Pss) of pid in KiB from /proc/PID/smaps_rollup."""
    values = {}
    with open("/proc/%d/smaps_rollup" % pid) as rollup:
        for line in rollup:
            fields = line.split()
            if len(fields) >= 2 and fields[0] in ("Rss:", "Pss:"):
                values[fields[0][:-1]] = int(fields[1])
    return values.get("Rss"), values.get("Pss")


def wait_for_pool(args, mark_dir, size):
    """Waits until `size` pool processes other than the ranks are ready; their memory, in MiB."""
    def ready():
        ranks = set(ddp_worker_pids(mark_dir)())
        waiting = [pid for pid, is_ready in pool_processes(mark_dir).items() if is_ready and pid not in ranks]
        return waiting if len(waiting) >= size else None

    waiting = wait_for(ready, args.run_timeout, "%d ready pool processes" % size)
    memory = [memory_kib(pid) for pid in waiting]
    return {"pool_rss_mib": statistics.median(m[0] for m in memory) / 1024,
            "pool_pss_mib": statistics.median(m[1] for m in memory) / 1024}


def run_ddp_dtrain(args, work, fault, script_flags=(), in_place=False, standby=0, pool=0):
    home = os.path.join(work, "home")
    os.makedirs(home)
    spec = os.path.join(work, "ddp.yaml")
    mark = os.path.join(work, "mark")
    # The pool's first fill (4 imports of torch, after the first generation's first beats) takes
    # longer than --kill-at steps: the script gets steps to spare, and the job is stopped once
    # the resumed step is measured.
    steps = 1000000 if pool else None
    # No `worker.instrument` line: the default (on) puts the bootstrap in front of the script.
    write_spec(spec, "bench-ddp", [args.torch_python] + ddp_args(args, work, steps) + list(script_flags),
               args.hang_timeout, elastic=elastic_line(in_place, standby),
               worker_extra="  pool: {per_host: %d}\n" % pool if pool else "")
    job = Job([args.dtrain, "submit", spec], work, dtrain_env(home), os.path.join(work, "dtrain.out"))
    injected = {}
    worker_pids = ddp_worker_pids(mark)
    if pool:
        exec_pids = worker_pids
        worker_pids = lambda: sorted(set(exec_pids()) | set(pool_processes(mark)))  # noqa: E731
    try:
        run_dir = only_run_dir(home)
        result = fault_and_time_ddp(args, work, job, fault, injected, 1 if in_place else 4,
                                    (lambda: wait_for_pool(args, mark, pool)) if pool else None)
        if not pool:
            job.wait(args.run_timeout)
    finally:
        code, left = finish(job, signal.SIGINT, injected.get("victim"), worker_pids, DDP_MARKER)
    result["exit"] = code
    result["left_over"] = left
    result.update(dtrain_detection(run_dir, result["fault_t"]))
    result.setdefault("phases", event_timeline(run_dir))
    return result


def read_state(run_dir):
    try:
        with open(os.path.join(run_dir, "state.json")) as text:
            return json.load(text)
    except (OSError, ValueError):
        return None


def last_logged_step(run_dir):
    """The newest "step N ..." line of ranks/0.log (0 if none)."""
    try:
        with open(os.path.join(run_dir, "ranks", "0.log"), "rb") as log:
            log.seek(0, os.SEEK_END)
            log.seek(max(0, log.tell() - 4096))
            lines = log.read().decode(errors="replace").splitlines()
    except OSError:
        return 0
    for line in reversed(lines):
        fields = line.split()
        if len(fields) >= 2 and fields[0] == "step" and fields[1].isdigit():
            return int(fields[1])
    return 0


def last_step_of_generation(run_dir, generation):
    """The newest "step N" line rank 0 printed in `generation` (ranks/0.log has a marker line
    "=== dtrain generation G ..." before each generation's output)."""
    last, current = None, None
    try:
        with open(os.path.join(run_dir, "ranks", "0.log"), errors="replace") as log:
            for line in log:
                fields = line.split()
                if line.startswith("=== dtrain generation ") and len(fields) > 3 and fields[3].isdigit():
                    current = int(fields[3])
                elif current == generation and len(fields) >= 2 and fields[0] == "step" and fields[1].isdigit():
                    last = int(fields[1])
    except OSError:
        return None
    return last


def trainer_worker_pids(run_dir):
    """The pids of every generation's workers, from the worker.started events."""
    return lambda: sorted({e.get("pid") for e in read_events(run_dir) if e["ev"] == "worker.started" and e.get("pid")})


def run_trainer(args, work, fault, in_place=False, standby=0, health=True):
    home = os.path.join(work, "home")
    os.makedirs(home)
    spec = os.path.join(work, "trainer.yaml")
    dtrain_train = os.path.join(os.path.dirname(os.path.abspath(args.dtrain)), "dtrain-train")
    # Paced so that step ~110 is reachable by polling and the run lasts a few seconds after
    # the restart; the restart cost does not depend on the model size.
    write_spec(spec, "bench-trainer",
               [dtrain_train, "--steps", str(args.kill_at + 200), "--hidden", "256", "--layers", "3",
                "--log-every", "1"], args.hang_timeout,
               "batch: {global: 64, micro: 8}\ncheckpoint: {interval_steps: 20, keep: 3}\n" +
               ("" if health else "health: {enabled: false}\n"),
               elastic_line(in_place, standby))
    job = Job([args.dtrain, "submit", spec], work, dtrain_env(home), os.path.join(work, "dtrain.out"))
    injected = {}
    run_dir = None
    try:
        run_dir = only_run_dir(home)

        def victim():
            # Rank 0's own step lines (every step is logged) are forwarded as they are printed;
            # state.json's steps lag by up to a heartbeat interval.
            state = read_state(run_dir)
            if not state or not isinstance(state.get("ranks"), list) or len(state["ranks"]) < 4:
                return None
            pid = state["ranks"][1].get("pid")
            return pid if pid and last_logged_step(run_dir) >= args.kill_at else None

        pid = wait_for(victim, args.run_timeout, "every rank reaching step %d" % args.kill_at)
        fault_t = time.time()
        os.kill(pid, FAULT_SIGNALS[fault])
        injected["victim"] = pid
        wait_for(lambda: first_event(read_events(run_dir), "recovery.completed"), args.run_timeout,
                 "recovery.completed (not recovered)")
        job.wait(args.run_timeout)
    finally:
        pids = trainer_worker_pids(run_dir) if run_dir else (lambda: [])
        code, left = finish(job, signal.SIGINT, injected.get("victim"), pids, "dtrain-train")
    result = {"exit": code, "fault_t": fault_t, "left_over": left}
    result.update(dtrain_detection(run_dir, fault_t))
    result["fault_to_step_s"] = result.get("fault_to_completed_s")
    # steps_lost from rank 0's own lines: the event's last_step is the newest heartbeat, which
    # lags the real step by up to one heartbeat interval.
    last_before = last_step_of_generation(run_dir, 0)
    if last_before is not None and result.get("resume_step_event") is not None:
        result["steps_lost"] = last_before - max(0, result["resume_step_event"])
    restarted = [parse_ts(e["ts"]) for e in read_events(run_dir) if e["ev"] == "worker.started" and e.get("gen", 0) >= 1]
    if len(restarted) >= 4:
        result["fault_to_respawn_s"] = max(restarted[:4]) - fault_t
    result.setdefault("steps_lost", result.get("steps_lost_event"))
    return result


CASES = {
    "trainer": ("dtrain + dtrain-train", run_trainer),
    "trainer-in-place": ("dtrain + dtrain-train, elastic.in_place",
                         lambda args, work, fault: run_trainer(args, work, fault, in_place=True)),
    "trainer-in-place-no-health": ("dtrain + dtrain-train, elastic.in_place, health: {enabled: false}",
                                   lambda args, work, fault: run_trainer(args, work, fault, in_place=True,
                                                                         health=False)),
    "trainer-standby": ("dtrain + dtrain-train, in place + 1 standby",
                        lambda args, work, fault: run_trainer(args, work, fault, in_place=True, standby=1)),
    "ddp-dtrain": ("dtrain + ddp_train.py", run_ddp_dtrain),
    "ddp-torchrun": ("torchrun + ddp_train.py", run_ddp_torchrun),
    "ddp-dtrain-store": ("dtrain + ddp_train.py --dtrain-store",
                         lambda args, work, fault: run_ddp_dtrain(args, work, fault, ["--dtrain-store"])),
    "ddp-dtrain-in-place": ("dtrain + ddp_train.py --in-place",
                            lambda args, work, fault: run_ddp_dtrain(args, work, fault, ["--in-place"], in_place=True)),
    "ddp-dtrain-standby": ("dtrain + ddp_train.py --in-place, 1 standby",
                           lambda args, work, fault: run_ddp_dtrain(args, work, fault, ["--in-place"], in_place=True,
                                                                    standby=1)),
    "ddp-dtrain-pool": ("dtrain + ddp_train.py, worker.pool 4",
                        lambda args, work, fault: run_ddp_dtrain(args, work, fault, pool=4)),
}


def fmt(value, pattern="%.0f"):
    return "-" if value is None else pattern % value


def load():
    with open("/proc/loadavg") as text:
        return text.read().split()[0]


def row_note(case, fault, result):
    """What a row needs said beside its numbers: leftovers, and for a hang under dtrain, whether
    dtrain's hang detection (the beats) is what found it, and which rank it blamed."""
    notes = []
    if result.get("left_over"):
        notes.append("LEFT OVER: %s" % result["left_over"])
    if result.get("pool_rss_mib") is not None:
        notes.append("pool process: RSS %.0f MiB, PSS %.0f MiB" % (result["pool_rss_mib"], result["pool_pss_mib"]))
    if fault == "stop" and case != "ddp-torchrun":
        hang = result.get("hang")
        if not hang:
            notes.append("no worker.hang (detected: %s)" % result.get("detected_kind"))
            # Said hang_timeout after a generation starts for ranks that have not beaten yet
            # (importing torch can take longer); only worth showing when no hang was found.
            if result.get("hang_detection_off"):
                notes.append("hang_detection.off for ranks %s" % result["hang_detection_off"])
        else:
            notes.append("worker.hang rank %s step %s" % (hang.get("rank"), hang.get("step")))
            if hang.get("rank") != 1:
                notes.append("BLAMED THE WRONG RANK")
    return ("  " + "; ".join(notes)) if notes else ""


ROW = "%-36s %-7s %3s %5s %10s %10s %9s %9s %6s %9s %9s %7s %6s %6s %7s %6s %4s %4s"


def main():
    parser = argparse.ArgumentParser(description="kill -9 or SIGSTOP one worker; time the fault -> first resumed step")
    parser.add_argument("--dtrain", required=True, help="path of the built dtrain (dtrain-train next to it)")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--cases", default="trainer,ddp-dtrain,ddp-torchrun")
    parser.add_argument("--faults", default="kill,stop", help="kill (SIGKILL) and/or stop (SIGSTOP) of rank 1")
    parser.add_argument("--hang-timeout", type=int, default=5,
                        help="dtrain's heartbeat.hang_timeout in the specs the harness writes (seconds, >= 2)")
    parser.add_argument("--pg-timeout", type=float, default=20,
                        help="ddp_train.py --pg-timeout under both launchers (seconds; 0: torch's default, 30 min)")
    parser.add_argument("--kill-at", type=int, default=110)
    parser.add_argument("--run-timeout", type=float, default=240, help="seconds per wait inside one repetition")
    parser.add_argument("--torch-python", default="/usr/bin/python3")
    parser.add_argument("--keep", action="store_true", help="keep the work directories (logs, run dirs)")
    args = parser.parse_args()
    args.dtrain = os.path.abspath(args.dtrain)
    if args.hang_timeout < 2:
        parser.error("--hang-timeout: at least 2 s (heartbeat interval 500ms < timeout < hang_timeout)")
    # A time limit (timeout(1)) ends us with SIGTERM: unwind so that every finish() runs and
    # no launcher or worker of ours is left behind in its own session.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    cases = [c for c in args.cases.split(",") if c]
    for case in cases:
        if case not in CASES:
            parser.error("--cases: unknown case '%s' (known: %s)" % (case, ", ".join(CASES)))
    faults = [f for f in args.faults.split(",") if f]
    for fault in faults:
        if fault not in FAULT_SIGNALS:
            parser.error("--faults: unknown fault '%s' (known: %s)" % (fault, ", ".join(FAULT_SIGNALS)))
    has_torch = subprocess.run([args.torch_python, "-c", "import torch"], capture_output=True).returncode == 0
    if not has_torch and any(c.startswith("ddp") for c in cases):
        print("# skipping the DDP cases: '%s -c \"import torch\"' fails (apt-get install python3-torch)" % args.torch_python)
        cases = [c for c in cases if not c.startswith("ddp")]
    if "ddp-torchrun" in cases and not shutil.which("torchrun"):
        print("# skipping ddp-torchrun: no torchrun on PATH")
        cases.remove("ddp-torchrun")

    print("# recovery: %s of rank 1 of 4 (Gloo, CPU) at step >= %d; checkpoint every 20 steps; "
          "%d repetitions; machine: %d cpus; load %s" % (" / ".join(FAULT_NAMES[f] for f in faults), args.kill_at,
                                                        args.reps, os.cpu_count(), " ".join(open("/proc/loadavg").read().split()[:3])))
    print("# dtrain: heartbeat interval 500ms, hang_timeout %ds, instrumented (the bootstrap's beats); ddp_train.py "
          "under both launchers: %s" % (args.hang_timeout, "--pg-timeout %gs" % args.pg_timeout if args.pg_timeout > 0
                                        else "torch's default process-group timeout (30 min)"))
    print("# f->: from the fault; step: first resumed step; exec: the last new worker running; hang/det: dtrain's "
          "worker.hang / failure.detected; peer/victim: the first old peer / the victim gone; "
          "stop..total: dtrain's recovery phases (ms)")
    print(ROW % ("case", "fault", "rep", "load", "f->step_s", "f->exec_s", "f->hang", "f->det", "det_ms", "peer_s",
                 "victim_s", "stop", "replan", "spawn", "1st", "total", "lost", "exit"))
    summary = {}
    failures = 0
    # Repetitions outer, cases and faults inner: a change in the machine's load hits all alike.
    # Every other repetition runs them in reverse order, so that load that rises or falls within
    # a repetition (other jobs on a shared machine) does not always favour the same case.
    runs = [(case, fault) for case in cases for fault in faults]
    for rep in range(1, args.reps + 1):
        for case, fault in (runs if rep % 2 else list(reversed(runs))):
            label, run = CASES[case]
            work = tempfile.mkdtemp(prefix="dtrain-bench-recovery-")
            load_before = load()
            try:
                result = run(args, work, fault)
            except (RuntimeError, TimeoutError, OSError) as failure:
                print("%-36s %-7s %3d %5s  failed: %s (logs in %s)" % (label, FAULT_NAMES[fault], rep, load_before,
                                                                      failure, work))
                sys.stdout.flush()
                failures += 1
                continue
            phases = result.get("phases", {})
            print(ROW % (label, FAULT_NAMES[fault], rep, load_before, fmt(result.get("fault_to_step_s"), "%.2f"),
                         fmt(result.get("fault_to_respawn_s"), "%.2f"), fmt(result.get("fault_to_hang_ms")),
                         fmt(result.get("fault_to_detected_ms")), fmt(result.get("detect_latency_ms")),
                         fmt(result.get("peer_gone_s"), "%.2f"), fmt(result.get("victim_gone_s"), "%.2f"),
                         fmt(phases.get("stop_ms")), fmt(phases.get("replan_ms")), fmt(phases.get("spawn_ms")),
                         fmt(phases.get("first_step_ms")), fmt(phases.get("total_ms")),
                         fmt(result.get("steps_lost"), "%d"), result.get("exit")) + row_note(case, fault, result))
            sys.stdout.flush()
            summary.setdefault((label, FAULT_NAMES[fault]), []).append(result)
            if not args.keep:
                shutil.rmtree(work, ignore_errors=True)
    print()
    print("# medians; load now %s" % " ".join(open("/proc/loadavg").read().split()[:3]))
    print("%-36s %-7s %4s %10s %10s %9s %9s %7s %7s %9s %7s %7s %5s" % (
        "case", "fault", "runs", "f->step_s", "f->exec_s", "f->hang", "f->det", "det_ms", "peer_s", "victim_s",
        "stop", "spawn", "lost"))
    for (label, fault_name), results in summary.items():
        def median(get, pattern="%.0f"):
            values = [v for v in (get(r) for r in results) if v is not None]
            return fmt(statistics.median(values) if values else None, pattern)
        print("%-36s %-7s %4d %10s %10s %9s %9s %7s %7s %9s %7s %7s %5s" % (
            label, fault_name, len(results), median(lambda r: r.get("fault_to_step_s"), "%.2f"),
            median(lambda r: r.get("fault_to_respawn_s"), "%.2f"), median(lambda r: r.get("fault_to_hang_ms")),
            median(lambda r: r.get("fault_to_detected_ms")), median(lambda r: r.get("detect_latency_ms")),
            median(lambda r: r.get("peer_gone_s"), "%.2f"), median(lambda r: r.get("victim_gone_s"), "%.2f"),
            median(lambda r: r.get("phases", {}).get("stop_ms")), median(lambda r: r.get("phases", {}).get("spawn_ms")),
            median(lambda r: r.get("steps_lost"))))
    gated = {key: [r["phases"]["health_ms"] for r in results if "health_ms" in r.get("phases", {})]
             for key, results in summary.items()}
    if any(gated.values()):
        print()
        print("# the health gate's wait before the replacement (recovery phase health_ms, medians, ms) and the "
              "recovery's total_ms")
        for (label, fault_name), values in gated.items():
            totals = [r["phases"]["total_ms"] for r in summary[(label, fault_name)] if "total_ms" in r.get("phases", {})]
            print("%-36s %-7s health %s total %s" % (label, fault_name,
                                                      fmt(statistics.median(values) if values else None),
                                                      fmt(statistics.median(totals) if totals else None)))
    ddp = {key: results for key, results in summary.items() if any(r.get("script") for r in results)}
    if ddp:
        print()
        print("# the DDP script's own restart phases (rank 0, medians, s): interpreter start -> torch imported"
              " -> init_process_group done -> first step")
        print("%-36s %-7s %10s %13s %10s" % ("case", "fault", "import_s", "rendezvous_s", "to_step_s"))
        for (label, fault_name), results in ddp.items():
            def script_median(key):
                values = [r["script"][key] for r in results if key in r.get("script", {})]
                return fmt(statistics.median(values) if values else None, "%.2f")
            print("%-36s %-7s %10s %13s %10s" % (label, fault_name, script_median("import_s"),
                                                 script_median("rendezvous_s"), script_median("to_step_s")))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
