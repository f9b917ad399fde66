"""dtrain_worker_in_place: InPlace, in-place recovery for PyTorch DDP scripts.

In-place recovery (job spec `elastic.in_place: true`; see InPlace): when one rank dies, the
others keep their processes, re-create the process group under the next generation and hand
the replacement the newest completed step by broadcast, so no step is redone:

    trainer = InPlace(w, model, optimizer)          # the state a replacement receives
    trainer.init_process_group(backend="gloo")      # through dtrain's store, per generation
    ddp = trainer.wrap(model)                       # DistributedDataParallel, re-made on rejoin
    last = trainer.run(train_step, first, last)     # train_step(step): one step, beat included
"""

import gc
import os
import time
import types
import weakref

from dtrain_worker import DtrainError, _env_int
from dtrain_worker_store import store_class

# What a collective raises when a peer is gone (Gloo: the dead rank's sockets close; NCCL: the
# communicator errors or is aborted) or when a peer's wait ran out: these make a survivor wait
# for gen.changed. Any other error is the script's own and propagates at once.
_PEER_FAILURE_HINTS = ("gloo", "nccl", "connection", "peer", "timed out", "timeout", "broken pipe",
                       "socket", "closed", "dtrain agent", "store")


def _looks_like_peer_failure(error):
    if isinstance(error, DtrainError):
        return True
    if not isinstance(error, (RuntimeError, ConnectionError)):
        return False
    text = str(error).lower()
    return any(hint in text for hint in _PEER_FAILURE_HINTS)


def _bucket_layout(ddp, model):
    """The parameter indices (model.parameters() order) in each of ddp's gradient buckets, or
    None where this torch does not say."""
    try:
        index = {id(parameter): i for i, parameter in enumerate(model.parameters())}
        return [[index[id(parameter)] for parameter in bucket.parameters()]
                for bucket in ddp.reducer._get_zeros_like_grad_buckets()]
    except (AttributeError, KeyError, RuntimeError):
        return None


class _CurrentDDP:
    """What InPlace.wrap() returns with DTRAIN_IN_PLACE=1: stands for the DDP wrapper of the
    current generation (a recovery makes a new one), so a train step that calls `ddp(inputs)`
    or reads `ddp.module` always reaches the live one. Not an nn.Module itself."""

    def __init__(self, trainer):
        object.__setattr__(self, "_trainer", trainer)

    def __call__(self, *args, **kwargs):
        return self._trainer.ddp(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._trainer.ddp, name)

    def __setattr__(self, name, value):
        setattr(self._trainer.ddp, name, value)


class InPlace:
    """In-place recovery for a data-parallel PyTorch script (job spec `elastic.in_place: true`):
    when a rank dies, the others keep their processes and their state, re-create the process
    group under the next generation, and the replacement takes the newest completed step's
    state by broadcast from a survivor; no step is redone.

        w = dtrain_worker.Worker.from_env()
        trainer = dtrain_worker.InPlace(w, model, optimizer)     # the state a replacement gets
        trainer.init_process_group(backend="gloo")               # through dtrain's store
        ddp = trainer.wrap(model)                                # DistributedDataParallel(model)
        if not trainer.join_live:
            start = load_checkpoint(...)                         # a replacement skips the disk
        def train_step(step):
            optimizer.zero_grad()
            loss = loss_fn(ddp(inputs(step)), labels(step))
            loss.backward()
            optimizer.step()
            w.beat(step, loss=loss.item())
            return loss.item()
        last_loss = trainer.run(train_step, start + 1, total_steps)

    With DTRAIN_IN_PLACE=1 (set by dtrain for such jobs), run() catches the error a collective
    raises when a peer died (or notices the agent's gen.changed between steps), abandons that
    step, waits up to DTRAIN_IN_PLACE_TIMEOUT_MS for gen.changed, destroys the process group and
    makes a new one on the new generation's store keys, agrees with the others on the step to
    continue from, broadcasts model + optimizer (+ `extra` objects) from the lowest rank that
    holds that step, wraps the model in a new DistributedDataParallel and goes on at the next
    step. Without DTRAIN_IN_PLACE it changes nothing: errors propagate (dtrain restarts every
    rank from the newest checkpoint) and wrap() returns the DistributedDataParallel itself.

    Rolling back: a survivor never applies a step whose gradient allreduce failed (with DDP the
    allreduce runs inside backward(), so that step's optimizer.step() is never reached). A step
    counts as completed on a rank once its optimizer.step() returned (InPlace wraps it), even
    if something after it failed. The ranks continue from the NEWEST step any of them
    completed: a rank that is behind (its allreduce failed where another's had finished) takes
    that step's state in the broadcast like the replacement, so no rank rolls back and no
    completed step is redone. Every rank must be a replica of the same state (pure data
    parallelism); train_step must not keep its own state across steps outside model,
    optimizer and `extra`.
    """

    def __init__(self, worker, model, optimizer, extra=None):
        self.worker = worker
        self.model = model
        self.optimizer = optimizer
        self.extra = dict(extra or {})  # name -> object with state_dict() / load_state_dict()
        self.enabled = os.environ.get("DTRAIN_IN_PLACE", "") == "1"
        self.join_live = self.enabled and os.environ.get("DTRAIN_JOIN_LIVE", "") == "1"
        self.timeout_s = _env_int("DTRAIN_IN_PLACE_TIMEOUT_MS", 60000) / 1000.0
        self.completed_step = None  # newest step whose optimizer.step() returned on this rank
        self.resume_step = None     # the step the last (re)join agreed on
        self.ddp = None
        self._ddp_options = None
        self._bucket_layout = None  # [[parameter index, ...] per bucket] of the last DDP
        self._group_options = None
        self._step_in_flight = None
        if self.enabled:
            self._mark_optimizer_steps()

    def _mark_optimizer_steps(self):
        """optimizer.step() records the step it completed. A bound method on the instance, so
        that a learning-rate scheduler made afterwards can wrap it as usual."""
        original = self.optimizer.step
        trainer = self

        def step_and_mark(optimizer, *args, **kwargs):
            result = original(*args, **kwargs)
            if trainer._step_in_flight is not None:
                trainer.completed_step = trainer._step_in_flight
            return result

        self.optimizer.step = types.MethodType(step_and_mark, self.optimizer)

    # --- process group ------------------------------------------------------------------------
    def init_process_group(self, **kwargs):
        """torch.distributed.init_process_group(**kwargs) through dtrain's store (keys of this
        generation), then comm.ready. A replacement (DTRAIN_JOIN_LIVE=1) then takes the state
        from a survivor: call it after the model and optimizer exist, and before wrap()."""
        for conflicting in ("init_method", "store", "rank", "world_size"):
            if kwargs.get(conflicting) is not None:
                raise DtrainError("InPlace.init_process_group: dtrain provides %s; drop %s=%r"
                                  % (conflicting, conflicting, kwargs[conflicting]))
        self._group_options = dict(kwargs)
        started = time.monotonic()
        self._connect(bounded=self.join_live)
        if self.join_live:
            agreed, source = self._take_state()
            self.resume_step = agreed
            print("dtrain_worker: rank %d: joined generation %d at step %d (state from rank %d, %.0f ms)"
                  % (self.worker.rank, self.worker.generation, agreed, source,
                     (time.monotonic() - started) * 1000.0), flush=True)

    def _connect(self, bounded):
        """A process group of this generation; `bounded`: a rejoin, whose rendezvous waits at
        most DTRAIN_IN_PLACE_TIMEOUT_MS (the first one waits as torch's store does: every rank
        is still importing torch)."""
        import datetime
        import torch.distributed as dist
        started = time.monotonic()
        options = dict(self._group_options)
        # Per generation: a survivor and the replacement meet on keys no earlier group used.
        store = store_class()(self.worker, prefix="torch/g%d/" % self.worker.generation)
        if bounded:
            store.set_timeout(datetime.timedelta(seconds=self.timeout_s))
        elif options.get("timeout") is not None:
            store.set_timeout(options["timeout"])
        dist.init_process_group(store=store, rank=self.worker.rank, world_size=self.worker.world_size, **options)
        self.worker.comm_ready((time.monotonic() - started) * 1000.0)

    def wrap(self, module=None, **ddp_options):
        """DistributedDataParallel(module or the model, **ddp_options). With DTRAIN_IN_PLACE=1
        an object that stands for the current generation's wrapper (a recovery wraps again)."""
        from torch.nn.parallel import DistributedDataParallel
        if module is not None and module is not self.model:
            raise DtrainError("InPlace.wrap: wrap the model given to InPlace (its state is what a "
                              "replacement receives)")
        self._ddp_options = dict(ddp_options)
        self.ddp = self._new_ddp() if self.join_live else DistributedDataParallel(self.model, **self._ddp_options)
        return _CurrentDDP(self) if self.enabled else self.ddp

    # --- the training loop --------------------------------------------------------------------
    def run(self, train_step, first_step, last_step):
        """Calls train_step(step) for step = first_step .. last_step (inclusive) and returns the
        last call's result. A replacement starts after the step it received instead. With
        DTRAIN_IN_PLACE=1 a peer's failure inside a step (or a gen.changed before one) leads to
        rejoin() and the loop goes on at the agreed step + 1."""
        step = self.resume_step + 1 if self.resume_step is not None else int(first_step)
        result = None
        while step <= last_step:
            if self.enabled and self.worker.generation_changed() is not None:
                step = self.rejoin() + 1
                continue
            self._step_in_flight = step
            try:
                result = train_step(step)
            except Exception as error:
                if not (self.enabled and _looks_like_peer_failure(error)):
                    raise
                failure = error
            else:
                failure = None
                self.completed_step = step
            finally:
                self._step_in_flight = None
            if failure is not None:
                generation = self._await_generation(failure)
                # The failure's traceback holds the abandoned step's frames (and through them,
                # perhaps, the old DistributedDataParallel): let go of it before rejoining.
                failure = None
                step = self.rejoin(generation) + 1
                continue
            step += 1
        return result

    def _await_generation(self, failure=None):
        """gen.changed's generation, waited for up to DTRAIN_IN_PLACE_TIMEOUT_MS; without it,
        raises `failure` (or DtrainError): dtrain then restarts every rank."""
        generation = self.worker.wait_for_generation_change(self.timeout_s)
        if generation is not None:
            return generation
        if failure is not None:
            raise failure
        raise DtrainError("in-place recovery: no gen.changed from the dtrain agent within %.0f s"
                          % self.timeout_s)

    def rejoin(self, generation=None):
        """After a peer's failure: (waits for gen.changed unless `generation` is given,) drops
        the process group and makes one under the new generation, agrees on the step, takes or
        gives the state, wraps the model again. Returns the agreed step (the newest completed
        one); the training goes on at the step after it."""
        import torch.distributed as dist
        started = time.monotonic()
        if generation is None:
            generation = self._await_generation()
        had_ddp = self.ddp is not None
        self._drop_ddp()
        if dist.is_initialized():
            dist.destroy_process_group()
        # The abandoned step's gradients are partial: no later step may see them.
        self.optimizer.zero_grad(set_to_none=True)
        self.worker.adopt_generation(generation)
        self._connect(bounded=True)
        agreed, source = self._take_state()
        self.resume_step = agreed
        if had_ddp:
            self.ddp = self._new_ddp()
        print("dtrain_worker: rank %d: rejoined generation %d at step %d (state from rank %d, %.0f ms)"
              % (self.worker.rank, generation, agreed, source, (time.monotonic() - started) * 1000.0),
              flush=True)
        return agreed

    def _drop_ddp(self):
        """Frees the old DistributedDataParallel before a new one wraps the same model: its
        reducer's autograd hooks on the parameters go only when it is destroyed. Keeps its
        gradient bucket layout for the next one (_new_ddp)."""
        if self.ddp is None:
            return
        self._bucket_layout = _bucket_layout(self.ddp, self.model)
        old = weakref.ref(self.ddp)
        self.ddp = None
        if old() is not None:
            gc.collect()  # a reference cycle (a traceback's frames) kept it alive

    def _new_ddp(self):
        """DistributedDataParallel(model) whose first step uses the bucket layout the old one
        had reached (broadcast with the state, so the replacement uses it too). A new DDP
        otherwise starts with all parameters in one bucket in definition order and re-buckets
        in gradient-ready order after its first step: the allreduce then sums each element in
        another order, and the run would drift from an uninterrupted one in the last bits."""
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel
        layout = self._bucket_layout
        original = getattr(dist, "_compute_bucket_assignment_by_size", None)
        if not layout or original is None:
            return DistributedDataParallel(self.model, **(self._ddp_options or {}))

        def assign_as_before(parameters, size_limits, *args, **kwargs):
            if len(parameters) != sum(len(bucket) for bucket in layout):
                return original(parameters, size_limits, *args, **kwargs)
            # DDP reverses the list of buckets it gets (its first bucket is the last one ready).
            return [list(bucket) for bucket in reversed(layout)], [size_limits[-1]] * len(layout)

        dist._compute_bucket_assignment_by_size = assign_as_before
        try:
            return DistributedDataParallel(self.model, **(self._ddp_options or {}))
        finally:
            dist._compute_bucket_assignment_by_size = original

    def _take_state(self):
        """Every rank says its newest completed step (-1: none, a replacement) through the
        store; the newest one wins, and the lowest rank that holds it broadcasts model,
        optimizer and extra state to the rest. Returns (agreed step, source rank)."""
        import torch.distributed as dist
        worker = self.worker
        own = -1 if self.completed_step is None else int(self.completed_step)
        prefix = "inplace/g%d/step/" % worker.generation
        worker.kv_set(prefix + str(worker.rank), str(own))
        steps = [int(v) for v in worker.kv_wait([prefix + str(r) for r in range(worker.world_size)],
                                                timeout=self.timeout_s)]
        agreed = max(steps)
        if agreed < 0:
            raise DtrainError("in-place recovery: no rank holds a completed step to continue from "
                              "(steps by rank: %s)" % steps)
        source = steps.index(agreed)
        payload = [self._state() if worker.rank == source else None]
        dist.broadcast_object_list(payload, src=source)
        if own != agreed:
            self._load_state(payload[0])
        self._bucket_layout = payload[0].get("ddp_buckets")
        self.completed_step = agreed
        return agreed, source

    def _state(self):
        state = {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()}
        state["extra"] = {name: obj.state_dict() for name, obj in self.extra.items()}
        state["ddp_buckets"] = self._bucket_layout
        return state

    def _load_state(self, state):
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        for name, obj in self.extra.items():
            obj.load_state_dict(state["extra"][name])
