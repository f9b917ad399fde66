"""dtrain_worker: the worker side of dtrain's worker protocol, standard library only.

Use it from a PyTorch (or any Python) training script started by `dtrain submit`:

    from dtrain_worker import Worker
    w = Worker.from_env()              # connects to $DTRAIN_AGENT_SOCKET, says hello
    w.init_process_group(backend="gloo")   # torch.distributed init + barrier, then comm.ready
    # (or call torch.distributed.init_process_group yourself, then w.comm_ready())
    for step in range(1, steps + 1):
        ...
        w.beat(step, loss=loss, step_ms=ms, samples=batch)
    w.close()                          # flushes the newest beat, says bye

Around a synchronous checkpoint save that may take longer than heartbeat.hang_timeout:

    with w.saving_checkpoint():        # phase "checkpoint": heartbeat.checkpoint_timeout applies
        torch.save(state, path)

Before a Slurm time limit (sbatch --signal=B:USR1@T, or checkpoint.before_walltime) dtrain asks
every rank for a checkpoint at one step S that no rank has passed yet (ckpt.request):

    for step in ...:
        ...
        if w.checkpoint_requested(step):   # True once, at step S, on every rank
            with w.saving_checkpoint():
                torch.save(state, path)

The protocol (worker/contract/wire.h): newline-delimited JSON over a unix stream socket;
requests carry an "id" and the reply with the same id answers them. Beats are rate-limited to
DTRAIN_HEARTBEAT_INTERVAL_MS; the first beat and beats with final=True are always sent.

Rendezvous through dtrain's store (no TCPStore, no MASTER_PORT):

    w.init_process_group(backend="gloo", use_dtrain_store=True)

passes store=DtrainStore(w), rank=RANK, world_size=WORLD_SIZE to
torch.distributed.init_process_group instead of init_method="env://". DtrainStore is a
torch.distributed.Store backed by the agent's per-generation KV store (kv.set/get/wait over the
unix socket the worker already holds), so every rank can rendezvous as soon as it has imported
torch: nobody waits for rank 0 to open a TCP listener, and torch's TCPStore client (which retries
a refused connect only once a second) is not involved. Keys are per generation (the supervisor
prefixes them), so a restarted generation rendezvouses on fresh keys. `w.store()` gives the store
for your own init_process_group(store=..., rank=..., world_size=...) call.

What DtrainStore supports, and why (torch 1.13's Python Store trampoline forwards set, get, add,
compare_set and wait; delete_key, num_keys and check never reach Python):
  set, get, wait     exact (values are hex-encoded bytes under the key prefix "torch/").
  add                exact and atomic (kv.add); counters live apart from set() keys: read one
                     with add(key, 0), as torch's store-based barrier does, not with get().
  compare_set        raises DtrainError: it needs an atomic compare-and-set on the wire.
The whole module stays importable without torch; DtrainStore is created on first use.

In-place recovery (job spec `elastic.in_place: true`; see InPlace): when one rank dies, the
others keep their processes, re-create the process group under the next generation and hand
the replacement the newest completed step by broadcast, so no step is redone:

    trainer = InPlace(w, model, optimizer)          # the state a replacement receives
    trainer.init_process_group(backend="gloo")      # through dtrain's store, per generation
    ddp = trainer.wrap(model)                       # DistributedDataParallel, re-made on rejoin
    last = trainer.run(train_step, first, last)     # train_step(step): one step, beat included

The agent's unsolicited lines (ckpt.request, gen.changed) are read whenever the worker waits
for a reply and, without blocking, in beat(), checkpoint_requested() and poll().
"""

import contextlib
import gc
import json
import math
import os
import socket
import struct
import threading
import time
import types
import weakref

__all__ = ["Worker", "InPlace", "DtrainError"]  # DtrainStore too, on demand (it needs torch)


# Set once the script itself connects (Worker.from_env()): the bootstrap then stops beating.
_script_worker_created = False


class DtrainError(RuntimeError):
    """A failure talking to the dtrain agent or the store (the message says which)."""


def _is_int(value):
    """An integer in a message from the agent: JSON's true and false are not (Python counts
    bool as int, so {"gen": true} would have been generation 1, {"id": true} request 1)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _env_int(name, default):
    text = os.environ.get(name, "")
    if text == "":
        return default
    try:
        return int(text)
    except ValueError:
        raise DtrainError("%s=%r is not an integer; the launcher sets it, so unset it "
                          "or run under `dtrain submit`" % (name, text))


def _check_listener_uid(sock, path):
    """Closes `sock` and raises unless the process listening on it runs as our uid. The agent
    runs as the user who runs its workers; a listener of another uid planted the socket, and
    whatever we sent it (hello, rendezvous values) or read from it would be theirs. So this runs
    before the first byte is sent."""
    try:
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        pid, uid, _gid = struct.unpack("3i", creds)
    except OSError as error:
        sock.close()
        raise DtrainError("DTRAIN_AGENT_SOCKET=%r: cannot learn who listens there (SO_PEERCRED: "
                          "%s); nothing was sent" % (path, error))
    if uid != os.geteuid():
        sock.close()
        raise DtrainError("DTRAIN_AGENT_SOCKET=%r: the process listening there (pid %d) runs as "
                          "uid %d, not as this worker's uid %d, so it is not our dtrain agent; "
                          "nothing was sent. Fix: check who owns the directories of that path "
                          "(another user may have planted the socket)"
                          % (path, pid, uid, os.geteuid()))


def _become_assigned_standby(sock):
    """A warm standby (DTRAIN_STANDBY=1, elastic.standby_per_host): says hello {standby}, waits
    as long as the agent keeps it (no time limit; it dies with the agent) for assign {gen, rank,
    env} and makes env this process's os.environ, so that everything read from the environment
    from then on (here, by torch.distributed) is the rank's. Returns bytes read past the assign."""
    sock.sendall((json.dumps({"type": "hello", "standby": True, "pid": os.getpid()}) + "\n").encode())
    buffer = b""
    while True:
        newline = buffer.find(b"\n")
        if newline < 0:
            chunk = sock.recv(65536)
            if not chunk:
                sock.close()
                raise DtrainError("a standby waiting for its rank: the dtrain agent closed the connection")
            buffer += chunk
            continue
        line, buffer = buffer[:newline], buffer[newline + 1:]
        try:
            message = json.loads(line)
        except ValueError:
            continue
        if not isinstance(message, dict) or message.get("type") != "assign":
            continue
        variables = message.get("env")
        if not isinstance(variables, dict):
            sock.close()
            raise DtrainError("assign from the dtrain agent without an env object: %r" % (message,))
        for name, value in variables.items():
            # From a peer: only what an environment can hold (os.environ raises on '=' or NUL).
            if (isinstance(value, str) and name and "=" not in name and "\0" not in name
                    and "\0" not in value):
                os.environ[name] = value
        os.environ.pop("DTRAIN_STANDBY", None)
        return buffer


class Worker:
    """One training process's link to dtrain: hello, heartbeats, the KV store, bye."""

    def __init__(self, sock, rank, world_size, generation, heartbeat_interval_ms):
        self._sock = sock
        self._buffer = b""
        self._next_id = 1
        self._replies = {}
        self.rank = rank
        self.world_size = world_size
        self.generation = generation
        self._interval = heartbeat_interval_ms / 1000.0
        self._last_beat = None
        self._last_step = None
        self._unsent = None
        self._closed = False
        self._created = time.monotonic()
        self._comm_ready_sent = False
        # torch may call the store from a thread other than the training loop's: one request
        # at a time owns the reply stream; every line is written whole.
        self._request_lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._store = None
        self._checkpoint_request = None  # (step, reason) of a pending ckpt.request
        self.checkpoint_reason = None
        self._new_generation = None  # G of the newest gen.changed not yet adopted

    @classmethod
    def from_env(cls, _instrument=False):
        """Connects to $DTRAIN_AGENT_SOCKET and says hello {rank, gen, pid}. (_instrument: the
        connection of dtrain's bootstrap, sitecustomize.py; any other one is the script's own,
        and from then on the script's beats are the rank's and the bootstrap sends none.)
        A warm standby (DTRAIN_STANDBY=1) blocks here until the agent assigns it a rank and takes
        that rank's environment first: whatever the script did before (import torch, build the
        model) is done by the time it is needed, and whatever it reads after is the rank's."""
        global _script_worker_created
        if not _instrument:
            _script_worker_created = True
        path = os.environ.get("DTRAIN_AGENT_SOCKET", "")
        if not path:
            raise DtrainError("not running under dtrain: DTRAIN_AGENT_SOCKET is unset; "
                              "start this script with `dtrain submit job.yaml`")
        standby = os.environ.get("DTRAIN_STANDBY") == "1"
        if standby and _instrument:
            # The bootstrap's beats need a rank; a standby's script takes one in its own from_env().
            raise DtrainError("a warm standby (DTRAIN_STANDBY=1) has no rank until the script's "
                              "own Worker.from_env() takes one; the bootstrap does not beat for it")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(path)
        except OSError as error:
            sock.close()
            raise DtrainError("cannot connect to the dtrain agent at DTRAIN_AGENT_SOCKET=%r: %s "
                              "(is the agent still running?)" % (path, error))
        _check_listener_uid(sock, path)
        unread = _become_assigned_standby(sock) if standby else b""
        rank = _env_int("RANK", 0)
        world_size = _env_int("WORLD_SIZE", 1)
        generation = _env_int("DTRAIN_GENERATION", 0)
        interval = _env_int("DTRAIN_HEARTBEAT_INTERVAL_MS", 1000)
        worker = cls(sock, rank, world_size, generation, interval)
        worker._buffer = unread
        worker._send({"type": "hello", "rank": rank, "gen": generation, "pid": os.getpid()})
        return worker

    # --- heartbeats -----------------------------------------------------------------------
    def beat(self, step, final=False, **metrics):
        """Records progress; metrics: loss, step_ms, comm_ms, data_ms, samples."""
        message = {"type": "beat", "step": int(step)}
        for key in ("loss", "step_ms", "comm_ms", "data_ms", "samples"):
            value = metrics.get(key)
            if value is None:
                continue
            # A diverged loss is NaN or inf, which JSON cannot carry (json.dumps would write
            # NaN, an invalid line the agent drops as a protocol error): leave it out instead.
            value = int(value) if key == "samples" else float(value)
            if math.isfinite(value):
                message[key] = value
        self._last_step = int(step)
        self.poll()  # notice gen.changed and ckpt.request between requests too
        now = time.monotonic()
        if final or self._last_beat is None or now - self._last_beat >= self._interval:
            self._last_beat = now
            self._unsent = None
            self._send(message)
        else:
            self._unsent = message

    def set_checkpoint_phase(self, saving):
        """Says at once that this rank enters (True) or leaves (False) a synchronous checkpoint
        save: a beat with the newest step and "phase". While it saves, dtrain allows
        heartbeat.checkpoint_timeout instead of hang_timeout, and does not take its peers, who
        wait for it in the next collective, for hung. Nothing is sent before the first beat."""
        if self._last_step is None or self._closed:
            return
        message = dict(self._unsent) if self._unsent is not None else {"type": "beat", "step": self._last_step}
        message["phase"] = "checkpoint" if saving else "train"
        self._unsent = None
        self._last_beat = time.monotonic()
        self._send(message)

    @contextlib.contextmanager
    def saving_checkpoint(self):
        """`with w.saving_checkpoint(): torch.save(...)`: set_checkpoint_phase around a save."""
        self.set_checkpoint_phase(True)
        try:
            yield self
        finally:
            self.set_checkpoint_phase(False)

    def checkpoint_requested(self, step):
        """True once when dtrain asked for a checkpoint (ckpt.request: Slurm's time limit is
        near) and `step` has reached the step it named; every rank gets the same step, so
        saving then gives a complete checkpoint. Never blocks: it reads what the agent already
        sent. The reason is in self.checkpoint_reason afterwards."""
        if self._closed:
            return False
        self.poll()
        pending = self._checkpoint_request
        if pending is None or int(step) < pending[0]:
            return False
        self._checkpoint_request = None
        self.checkpoint_reason = pending[1]
        return True

    def poll(self):
        """Reads, without blocking, what the agent sent unasked since the last request (a
        ckpt.request, a gen.changed): lines are otherwise read only while a request waits for
        its reply. beat() and checkpoint_requested() call it; one recv, cheap enough per step."""
        if self._closed or not self._request_lock.acquire(blocking=False):
            return  # a request in flight reads the socket itself
        try:
            while True:
                try:
                    chunk = self._sock.recv(65536, socket.MSG_DONTWAIT)
                except (BlockingIOError, InterruptedError):
                    return
                except OSError:
                    return  # a lost agent shows at the next send, with its reason
                if not chunk:
                    return
                self._buffer += chunk
                self._take_lines()
        finally:
            self._request_lock.release()

    def generation_changed(self):
        """The generation the agent moved this worker to (gen.changed, in-place recovery), or
        None; never blocks. The worker keeps its own generation until adopt_generation()."""
        self.poll()
        return self._new_generation

    def wait_for_generation_change(self, timeout):
        """Blocks up to `timeout` seconds for gen.changed; returns its generation or None."""
        end = time.monotonic() + timeout
        while self._new_generation is None and not self._closed:
            remaining = end - time.monotonic()
            if remaining <= 0:
                break
            with self._request_lock:
                if self._new_generation is not None:
                    break
                self._sock.settimeout(min(remaining, 0.5))
                try:
                    chunk = self._sock.recv(65536)
                except socket.timeout:
                    continue
                except OSError as error:
                    raise DtrainError("waiting for gen.changed: lost the dtrain agent: %s" % error)
                finally:
                    self._sock.settimeout(None)
                if not chunk:
                    raise DtrainError("waiting for gen.changed: the dtrain agent closed the connection")
                self._buffer += chunk
                self._take_lines()
        return self._new_generation

    def adopt_generation(self, generation):
        """This process now belongs to `generation` (after gen.changed): comm.ready is said
        again for it, and the next beat goes out at once (the supervisor ends the recovery at the
        first step every rank reports in the new generation)."""
        self.generation = int(generation)
        if self._new_generation is not None and self._new_generation <= self.generation:
            self._new_generation = None
        self._comm_ready_sent = False
        self._last_beat = None
        self._unsent = None
        self._store = None  # its keys were the old generation's

    # --- communicator up ------------------------------------------------------------------
    def comm_ready(self, ms=None):
        """Says comm.ready {ms}: this rank's communicator is initialised (the first collective
        could run). Call it once after torch.distributed.init_process_group (with NCCL, after a
        first collective such as barrier(): PyTorch may create the NCCL communicator lazily).
        ms: how long init took; default: the time since from_env(). The supervisor ends the
        recovery's "rendezvous" phase when every rank has said it. Sent once; later calls do
        nothing. It is not a beat and never delays one."""
        if self._comm_ready_sent:
            return
        if ms is None:
            ms = (time.monotonic() - self._created) * 1000.0
        self._comm_ready_sent = True
        self._send({"type": "comm.ready", "ms": int(round(ms))})

    def init_process_group(self, barrier=True, use_dtrain_store=False, **kwargs):
        """torch.distributed.init_process_group(**kwargs), then (by default) a barrier so that
        NCCL's lazily created communicator exists too, then comm_ready() with the time both
        took. By default torch reads MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE from the
        environment dtrain sets (env://). use_dtrain_store=True rendezvouses through dtrain's
        KV store instead: store=self.store(), rank and world_size are passed for you (a
        `timeout` also becomes the store's timeout)."""
        import torch.distributed as dist
        started = time.monotonic()
        if use_dtrain_store:
            for conflicting in ("init_method", "store"):
                if kwargs.get(conflicting) is not None:
                    raise DtrainError("init_process_group: use_dtrain_store=True provides the store; "
                                      "drop %s=%r or drop use_dtrain_store" % (conflicting, kwargs[conflicting]))
            store = self.store()
            if kwargs.get("timeout") is not None:
                store.set_timeout(kwargs["timeout"])
            kwargs["store"] = store
            kwargs.setdefault("rank", self.rank)
            kwargs.setdefault("world_size", self.world_size)
        dist.init_process_group(**kwargs)
        if barrier:
            dist.barrier()
        self.comm_ready((time.monotonic() - started) * 1000.0)

    # --- key-value store --------------------------------------------------------------------
    def store(self):
        """This worker's DtrainStore (a torch.distributed.Store; needs torch), made once."""
        if self._store is None:
            self._store = _store_class()(self)
        return self._store

    def kv_set(self, key, value):
        self._request({"type": "kv.set", "key": key, "value": value})

    def kv_get(self, key):
        """The value, or None when the key is not set."""
        return self._request({"type": "kv.get", "key": key}).get("value")

    def kv_add(self, key, delta):
        """Adds `delta` to the key's integer value (absent: 0), atomically; returns the sum."""
        return int(self._request({"type": "kv.add", "key": key, "delta": int(delta)}).get("value"))

    def kv_wait(self, keys, timeout=30.0):
        """Blocks until every key is set; returns their values in order."""
        timeout_ms = int(timeout * 1000)
        reply = self._request({"type": "kv.wait", "keys": list(keys), "timeout_ms": timeout_ms},
                              deadline=timeout + 10.0)
        return reply.get("values", [])

    def generation_is_current(self):
        return bool(self._request({"type": "gen.check"}).get("current", False))

    def close(self, reason="finished"):
        """Flushes the newest beat and says bye. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._unsent is not None:
                self._send(self._unsent)
            self._send({"type": "bye", "reason": reason})
        finally:
            self._sock.close()

    def __enter__(self):
        return self

    def __exit__(self, kind, value, traceback):
        self.close("finished" if kind is None else "error")

    # --- wire ----------------------------------------------------------------------------------
    def _send(self, message):
        line = (json.dumps(message, separators=(",", ":")) + "\n").encode()
        try:
            with self._send_lock:
                self._sock.sendall(line)
        except OSError as error:
            raise DtrainError("lost the dtrain agent: %s" % error)

    def _take_lines(self):
        """Sorts the complete lines received: replies by id, ckpt.request and gen.changed
        (unsolicited)."""
        while b"\n" in self._buffer:
            line, self._buffer = self._buffer.split(b"\n", 1)
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if not isinstance(message, dict):
                continue
            if message.get("type") == "ckpt.request":
                step = message.get("step")
                reason = message.get("reason")
                self._checkpoint_request = (step if _is_int(step) else 0,
                                            reason if isinstance(reason, str) else "requested by dtrain")
            elif message.get("type") == "gen.changed":
                generation = message.get("gen")
                if (_is_int(generation) and generation > self.generation and
                        (self._new_generation is None or generation > self._new_generation)):
                    self._new_generation = generation
            elif _is_int(message.get("id")):
                self._replies[message["id"]] = message

    def _request(self, message, deadline=60.0):
        with self._request_lock:
            try:
                return self._request_locked(message, deadline)
            finally:
                self._sock.settimeout(None)  # a later beat's sendall must not inherit a tiny timeout

    def _request_locked(self, message, deadline):
        request_id = self._next_id
        self._next_id += 1
        message["id"] = request_id
        self._send(message)
        end = time.monotonic() + deadline
        while request_id not in self._replies:
            remaining = end - time.monotonic()
            if remaining <= 0:
                raise DtrainError("%s: no reply from the dtrain agent within %.0fs"
                                  % (message["type"], deadline))
            self._sock.settimeout(remaining)
            try:
                chunk = self._sock.recv(65536)
            except socket.timeout:
                continue
            if not chunk:
                raise DtrainError("%s: the dtrain agent closed the connection" % message["type"])
            self._buffer += chunk
            self._take_lines()
        reply = self._replies.pop(request_id)
        if reply.get("type") == "error":
            raise DtrainError(reply.get("error", "%s refused" % message["type"]))
        return reply


# --- in-place recovery for PyTorch DDP scripts ------------------------------------------------

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
        store = _store_class()(self.worker, prefix="torch/g%d/" % self.worker.generation)
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


# --- torch.distributed.Store over the worker protocol ------------------------------------------

_STORE_CLASS = None
# The agent's store caps one kv.wait at a day; torch's "no timeout" (0) maps to that cap.
_MAX_WAIT_S = 86400.0


def _seconds(timeout):
    """A timedelta (torch's type) or a number of seconds, as float seconds."""
    return timeout.total_seconds() if hasattr(timeout, "total_seconds") else float(timeout)


def _as_bytes(value):
    if isinstance(value, str):
        return value.encode()
    return bytes(value)  # bytes, bytearray, or the list of ints torch 1.13 passes to compare_set


def _store_class():
    """Defines DtrainStore on first use, so that importing this module never needs torch."""
    global _STORE_CLASS
    if _STORE_CLASS is not None:
        return _STORE_CLASS
    try:
        import torch.distributed as dist
    except ImportError as error:
        raise DtrainError("DtrainStore needs torch.distributed, which cannot be imported here (%s); "
                          "install PyTorch or use init_method='env://'" % error)

    class DtrainStore(dist.Store):
        """A torch.distributed.Store kept in dtrain's per-generation KV store (module docstring:
        what is exact and what is not). Pass it to init_process_group(store=..., rank=...,
        world_size=...). One per Worker; safe to share between threads."""

        def __init__(self, worker, prefix="torch/"):
            super().__init__()
            self._worker = worker
            self._prefix = prefix

        def _key(self, key):
            return self._prefix + key

        def _wait_s(self, timeout):
            seconds = _seconds(self.timeout if timeout is None else timeout)
            return _MAX_WAIT_S if seconds <= 0 else min(seconds, _MAX_WAIT_S)

        def set(self, key, value):
            self._worker.kv_set(self._key(key), _as_bytes(value).hex())

        def get(self, key):
            """Blocks (up to the store's timeout) until `key` is set, like every torch store."""
            value = self._worker.kv_wait([self._key(key)], timeout=self._wait_s(None))[0]
            return bytes.fromhex(value)

        def wait(self, keys, timeout=None):
            if keys:
                self._worker.kv_wait([self._key(key) for key in keys], timeout=self._wait_s(timeout))

        def add(self, key, delta):
            """Atomic (kv.add in the supervisor's store); the counter lives under its own key
            space, so read it with add(key, 0), as torch's store-based barrier does."""
            return self._worker.kv_add(self._prefix + "+add/" + key, int(delta))

        def compare_set(self, key, expected, desired):
            raise DtrainError("DtrainStore.compare_set(%r): not supported: the worker protocol has no "
                              "atomic compare-and-set (kv.cas); use init_method='env://' for code "
                              "that needs it" % key)

    _STORE_CLASS = DtrainStore
    return DtrainStore


def __getattr__(name):
    """`from dtrain_worker import DtrainStore` defines the class then (it needs torch)."""
    if name == "DtrainStore":
        return _store_class()
    raise AttributeError("module 'dtrain_worker' has no attribute %r" % name)
