#!/usr/bin/env python3
"""What the bootstrap's step-split timing costs an unmodified PyTorch script (issue 28 item 6).

  bootstrap_overhead.py [--torch-python /usr/bin/python3] [--reps 5] [--ops 5000]

The bootstrap (worker/python/bootstrap/sitecustomize.py) wraps the DataLoader iterator's
__next__, torch.distributed's collectives and, once a DDP model exists, torch.autograd.backward,
to measure data_ms and comm_ms. This runs the same three loops in fresh interpreters with and
without the bootstrap first on PYTHONPATH (no agent socket: every hook runs, no beat is sent),
alternating which goes first, and prints microseconds per operation:

  dataloader  next() over a DataLoader of a tiny TensorDataset (batch 1, num_workers 0)
  all_reduce  dist.all_reduce of one float on a 1-rank Gloo group (file:// rendezvous)
  ddp step    forward, backward and SGD step of DistributedDataParallel(Linear(8, 1)), 1 rank

Each interpreter times each loop --reps times and keeps its fastest; the table shows the median
over --reps interpreters of each kind and the difference. Standard library only; needs torch in
--torch-python (exits 77 without it). Everything runs under a temporary directory, removed at
the end; each interpreter is bounded to 300 s.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BOOTSTRAP = os.path.join(ROOT, "worker", "python", "bootstrap")
CLIENT = os.path.join(ROOT, "worker", "python")

LOOPS = r"""
import json, os, sys, time
import torch, torch.distributed as dist
from torch.utils.data import DataLoader, TensorDataset
ops, reps, store = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
dist.init_process_group("gloo", init_method="file://" + store, rank=0, world_size=1)

def fastest(loop):
    best = None
    for _ in range(reps):
        start = time.perf_counter()
        loop()
        elapsed = (time.perf_counter() - start) / ops * 1e6
        best = elapsed if best is None else min(best, elapsed)
    return best

data = TensorDataset(torch.ones(ops, 4))
def batches():
    for _ in DataLoader(data, batch_size=1):
        pass
value = torch.ones(1)
def reduces():
    for _ in range(ops):
        dist.all_reduce(value)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
x = torch.ones(2, 8)
def steps():
    for _ in range(ops // 10):
        optimizer.zero_grad()
        model(x).sum().backward()
        optimizer.step()
result = {"dataloader": fastest(batches), "all_reduce": fastest(reduces), "ddp step": fastest(steps) * 10}
import torch.utils.data.dataloader as loader_module
result["instrumented"] = getattr(loader_module._BaseDataLoaderIter.__next__, "_dtrain_wrapped", False)
dist.destroy_process_group()
print(json.dumps(result))
"""


def run_once(python, instrumented, ops, reps, scratch, index):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DTRAIN_", "PET_"))}
    env["PYTHONPATH"] = os.pathsep.join([BOOTSTRAP, CLIENT]) if instrumented else ""
    env["OMP_NUM_THREADS"] = "1"
    store = os.path.join(scratch, "store-%d" % index)
    script = os.path.join(scratch, "loops.py")
    out = subprocess.run([python, script, str(ops), str(reps), store], env=env, capture_output=True, text=True,
                         timeout=300, cwd=scratch)
    if out.returncode != 0:
        sys.exit("bootstrap_overhead: the loop failed (%s):\n%s" % ("instrumented" if instrumented else "plain", out.stderr))
    import json
    result = json.loads(out.stdout.strip().splitlines()[-1])
    if result.pop("instrumented") != instrumented:
        sys.exit("bootstrap_overhead: the bootstrap was %s where it should not be" % ("active" if not instrumented else "inactive"))
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--torch-python", default="/usr/bin/python3")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--ops", type=int, default=5000)
    args = parser.parse_args()
    if subprocess.run([args.torch_python, "-c", "import torch"], capture_output=True).returncode != 0:
        print("bootstrap_overhead: no torch in %s: skipped" % args.torch_python)
        return 77
    scratch = tempfile.mkdtemp(prefix="dtrain-bootstrap-bench-")
    try:
        with open(os.path.join(scratch, "loops.py"), "w") as out:
            out.write(LOOPS)
        runs = {False: [], True: []}
        load_before = os.getloadavg()[0]
        for index in range(args.reps):
            order = (False, True) if index % 2 == 0 else (True, False)
            for instrumented in order:
                runs[instrumented].append(run_once(args.torch_python, instrumented, args.ops, args.reps, scratch,
                                                   2 * index + instrumented))
        load_after = os.getloadavg()[0]
        print("bootstrap overhead, us per operation: median of %d interpreters each (fastest of %d loops of %d ops)"
              % (args.reps, args.reps, args.ops))
        print("%-12s %10s %14s %10s" % ("operation", "plain", "instrumented", "cost"))
        for name in ("dataloader", "all_reduce", "ddp step"):
            plain = statistics.median(r[name] for r in runs[False])
            instrumented = statistics.median(r[name] for r in runs[True])
            print("%-12s %10.2f %14.2f %+10.2f" % (name, plain, instrumented, instrumented - plain))
        print("load average %.2f before, %.2f after" % (load_before, load_after))
        return 0
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
