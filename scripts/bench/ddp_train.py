#!/usr/bin/python3
"""A plain PyTorch DDP training script (Gloo, CPU) used to compare recovery under dtrain and
torchrun. It knows nothing about either launcher: it reads the torchrun-compatible environment
(RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), checkpoints every --ckpt-every steps
and resumes from the newest checkpoint on start.

For the benchmark harness (recovery.py) it also writes, with wall-clock timestamps:
  <--mark-dir>/pid-<rank>     this process's pid (rewritten on every (re)start)
  <--mark-dir>/steps.log      every rank: "exec RANK t=<unix time> restart=<R> pid=<pid>"
                              (t: when the interpreter reached this file, before importing torch);
                              rank 0: "imported 0 t=..." (torch imported), "joined 0 t=..."
                              (init_process_group returned), "resume S t=..." after loading a
                              checkpoint and "step N t=... restart=R pid=P loss=L" after every step
Both launchers are timed from the same files on the same clock.

Checkpoint directory: --ckpt-dir, else $DTRAIN_CKPT_DIR (set by dtrain), else ./ddp-ckpt.

--dtrain-store (opt-in): when DTRAIN_AGENT_SOCKET is set (running under `dtrain submit`), the
process group rendezvouses through dtrain's KV store (worker/python/dtrain_worker.py,
Worker.init_process_group(use_dtrain_store=True): no TCPStore, no MASTER_PORT) and says
comm.ready, and beats its steps itself (a script that connects to dtrain owns its rank's beats,
so the bootstrap sends none); otherwise (torchrun, or no flag) it is the usual
init_method="env://".

--in-place (opt-in, under dtrain with `elastic.in_place: true`): the training loop runs under
dtrain_worker.InPlace: when a rank dies, the others keep their processes, rejoin the next
generation's process group and hand the replacement the newest completed step by broadcast (no
checkpoint is loaded by the replacement, no step is redone). The step log's restart= is then the
rank's current generation (a survivor's changes without a restart), and rank 0 logs
"resume S t=..." at its first step after a rejoin. Implies the dtrain store and self-beating.

--pg-timeout SECONDS: the process group's timeout (init_process_group(timeout=...)), after which
a collective that waits for a missing (e.g. SIGSTOPped) rank raises; without it, torch's
default (30 min).
"""
import time

EXEC_T = time.time()  # before anything slow: when the launcher's part ended and ours began

import argparse  # noqa: E402
import datetime  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402

import torch  # noqa: E402 (most of a restart is this import: it is timed from EXEC_T)
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--ckpt-every", type=int, default=20)
    parser.add_argument("--ckpt-dir", default="")
    parser.add_argument("--mark-dir", default="", help="where pid files and steps.log go")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--batch", type=int, default=32, help="per-rank batch")
    parser.add_argument("--step-sleep", type=float, default=0.0,
                        help="seconds to sleep per step (to pace a very fast model)")
    parser.add_argument("--dtrain-store", action="store_true",
                        help="under dtrain, rendezvous through dtrain's store instead of env://")
    parser.add_argument("--in-place", action="store_true",
                        help="under dtrain (elastic.in_place): recover in place through dtrain_worker.InPlace")
    parser.add_argument("--pg-timeout", type=float, default=0,
                        help="process-group timeout in seconds (0: torch's default, 30 min)")
    return parser.parse_args()


def restart_id():
    """Which (re)start this is: torchrun's restart count, or dtrain's generation."""
    return os.environ.get("TORCHELASTIC_RESTART_COUNT") or os.environ.get("DTRAIN_GENERATION") or "0"


def latest_checkpoint(ckpt_dir):
    best = None
    try:
        names = os.listdir(ckpt_dir)
    except FileNotFoundError:
        return None
    for name in names:
        if name.startswith("step-") and name.endswith(".pt"):
            try:
                step = int(name[len("step-"):-len(".pt")])
            except ValueError:
                continue
            if best is None or step > best:
                best = step
    return best


def save_checkpoint(ckpt_dir, step, model, optimizer):
    os.makedirs(ckpt_dir, exist_ok=True)
    final = os.path.join(ckpt_dir, "step-%d.pt" % step)
    temp = final + ".tmp"
    with open(temp, "wb") as out:
        torch.save({"step": step, "model": model.state_dict(), "optimizer": optimizer.state_dict()}, out)
        out.flush()
        os.fsync(out.fileno())
    os.rename(temp, final)  # a reader never sees a half-written step


def import_dtrain_worker():
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, os.path.join(here, "..", "..", "worker", "python"))
    import dtrain_worker
    return dtrain_worker


def dtrain_worker_or_none(args):
    """A connected dtrain_worker.Worker when --dtrain-store or --in-place applies (under dtrain),
    else None."""
    if not (args.dtrain_store or args.in_place) or not os.environ.get("DTRAIN_AGENT_SOCKET"):
        return None
    return import_dtrain_worker().Worker.from_env()


def make_model(args):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, args.hidden), nn.ReLU(), nn.Linear(args.hidden, args.hidden), nn.ReLU(),
                          nn.Linear(args.hidden, 10))
    return model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


def main():
    args = parse_args()
    torch.set_num_threads(1)
    # In place, the model is built and the agent connected before the rank is read: a warm
    # standby (elastic.standby_per_host) gets here with torch imported and the model built, and
    # waits in Worker.from_env() until it is given a rank (os.environ is that rank's after it).
    built = make_model(args) if args.in_place and os.environ.get("DTRAIN_AGENT_SOCKET") else None
    worker = dtrain_worker_or_none(args)
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    ckpt_dir = args.ckpt_dir or os.environ.get("DTRAIN_CKPT_DIR") or "ddp-ckpt"
    mark_dir = args.mark_dir
    steps_log = None
    if mark_dir:
        os.makedirs(mark_dir, exist_ok=True)
        with open(os.path.join(mark_dir, "pid-%d" % rank), "w") as out:
            out.write("%d\n" % os.getpid())
        steps_log = open(os.path.join(mark_dir, "steps.log"), "a", buffering=1)  # O_APPEND: whole lines
        steps_log.write("exec %d t=%.6f restart=%s pid=%d\n" % (rank, EXEC_T, restart_id(), os.getpid()))
        if rank != 0:
            steps_log.close()
            steps_log = None

    mark = "%d t=%.6f restart=%s pid=%d\n"
    if steps_log:
        steps_log.write("imported " + mark % (rank, time.time(), restart_id(), os.getpid()))
    group_options = {"timeout": datetime.timedelta(seconds=args.pg_timeout)} if args.pg_timeout > 0 else {}
    trainer = None
    if args.in_place and worker is not None:
        # The model exists before the process group: an in-place replacement receives its
        # state while it joins (InPlace.init_process_group).
        model, optimizer = built if built else make_model(args)
        trainer = import_dtrain_worker().InPlace(worker, model, optimizer)
        trainer.init_process_group(backend="gloo", **group_options)
    elif worker is not None:
        worker.init_process_group(barrier=False, use_dtrain_store=True, backend="gloo", **group_options)
    else:
        dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world, **group_options)

    def restart():
        """The step log's restart=: a survivor of an in-place recovery changes generation in place."""
        return str(worker.generation) if trainer is not None else restart_id()

    if steps_log:
        steps_log.write("joined " + mark % (rank, time.time(), restart(), os.getpid()))
    if trainer is None:
        model, optimizer = make_model(args)

    start_step = 0
    latest = latest_checkpoint(ckpt_dir)
    if latest is not None and not (trainer is not None and trainer.join_live):  # a replacement gets the live state
        state = torch.load(os.path.join(ckpt_dir, "step-%d.pt" % latest))
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start_step = state["step"]
        if steps_log:
            steps_log.write("resume %d t=%.6f restart=%s pid=%d\n" % (start_step, time.time(), restart(), os.getpid()))
    elif trainer is not None and trainer.join_live and steps_log:
        steps_log.write("resume %d t=%.6f restart=%s pid=%d\n" % (trainer.resume_step, time.time(), restart(), os.getpid()))
    ddp = trainer.wrap(model) if trainer is not None else DistributedDataParallel(model)
    loss_fn = nn.CrossEntropyLoss()
    teacher = torch.Generator().manual_seed(1234)
    teacher_weights = torch.randn(64, 10, generator=teacher)
    logged_generation = [worker.generation if worker is not None else None]

    def train_step(step):
        if trainer is not None and worker.generation != logged_generation[0]:
            logged_generation[0] = worker.generation
            if steps_log:  # rank 0 rejoined (or joined) in place: it continues after resume_step
                steps_log.write("resume %d t=%.6f restart=%s pid=%d\n" %
                                (trainer.resume_step, time.time(), restart(), os.getpid()))
        data = torch.Generator().manual_seed(step * world + rank)
        inputs = torch.randn(args.batch, 64, generator=data)
        labels = (inputs @ teacher_weights).argmax(dim=1)
        optimizer.zero_grad()
        loss = loss_fn(ddp(inputs), labels)
        loss.backward()
        optimizer.step()
        if args.step_sleep > 0:
            time.sleep(args.step_sleep)
        if steps_log:
            steps_log.write("step %d t=%.6f restart=%s pid=%d loss=%.4f\n" %
                            (step, time.time(), restart(), os.getpid(), loss.item()))
        if worker is not None:
            worker.beat(step, loss=loss.item())  # rate-limited by the worker client
        if step % args.ckpt_every == 0:
            if rank == 0:
                save_checkpoint(ckpt_dir, step, model, optimizer)
            dist.barrier()  # nobody runs ahead of a checkpoint that is not on disk yet
        return loss

    if trainer is not None:
        loss = trainer.run(train_step, start_step + 1, args.steps)
    else:
        for step in range(start_step + 1, args.steps + 1):
            loss = train_step(step)
    if rank == 0:
        print("ddp_train: finished step %d loss %.4f" % (args.steps, loss.item()), flush=True)
    dist.destroy_process_group()
    if worker is not None:
        worker.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
