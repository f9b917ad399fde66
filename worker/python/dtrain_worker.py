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
            torch.distributed.barrier()
            if rank == 0:
                w.checkpoint_committed(step, nbytes, ms)   # dtrain records it and resumes from it

The same request comes before a preemption (SIGTERM to dtrain: a spot notice, a pod deletion;
`dtrain stop --checkpoint`): dtrain stops the run as soon as that step is committed, or after
preempt_grace.

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

DtrainStore (what it supports, and why) lives in dtrain_worker_store.py; the whole package
stays importable without torch, and DtrainStore is created on first use.

In-place recovery (job spec `elastic.in_place: true`): InPlace, in dtrain_worker_in_place.py.

The agent's unsolicited lines (ckpt.request, gen.changed) are read whenever the worker waits
for a reply and, without blocking, in beat(), checkpoint_requested() and poll().
"""

import contextlib
import json
import math
import os
import socket
import struct
import sys
import threading
import time

__all__ = ["Worker", "InPlace", "DtrainError"]  # DtrainStore too, on demand (it needs torch)


# A beat's metrics (worker/contract/beat_metrics.h), and those sent as integers.
_BEAT_METRICS = ("loss", "step_ms", "comm_ms", "data_ms", "samples", "peak_memory_bytes")
_INTEGRAL_METRICS = ("samples", "peak_memory_bytes")


def _peak_accelerator_memory():
    """torch.cuda.max_memory_allocated() of the current device once the script has imported torch
    and initialised CUDA (never initialised from here: a CPU script stays CPU); else None."""
    cuda = getattr(sys.modules.get("torch"), "cuda", None)
    try:
        return int(cuda.max_memory_allocated()) if cuda is not None and cuda.is_initialized() else None
    except Exception:  # a torch without CUDA support, or a device gone: no figure, no failure
        return None


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
        os.environ.pop("DTRAIN_STANDBY_IMPORTS", None)
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
        standby_mode = os.environ.get("DTRAIN_STANDBY")
        # "bootstrap": a pool process of an unmodified script (worker.pool); only the bootstrap
        # waits for its rank, before the script runs. "1": the script's own from_env() waits.
        standby = standby_mode == ("bootstrap" if _instrument else "1")
        if standby_mode == "1" and _instrument:
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
        """Records progress; metrics: loss, step_ms, comm_ms, data_ms, samples, peak_memory_bytes.
        peak_memory_bytes, when not given, is torch.cuda.max_memory_allocated() where the script
        uses CUDA."""
        message = {"type": "beat", "step": int(step)}
        for key in _BEAT_METRICS:
            value = metrics.get(key)
            if value is None:
                continue
            # A diverged loss is NaN or inf, which JSON cannot carry (json.dumps would write
            # NaN, an invalid line the agent drops as a protocol error): leave it out instead.
            value = int(value) if key in _INTEGRAL_METRICS else float(value)
            if math.isfinite(value):
                message[key] = value
        self._last_step = int(step)
        self.poll()  # notice gen.changed and ckpt.request between requests too
        now = time.monotonic()
        if final or self._last_beat is None or now - self._last_beat >= self._interval:
            self._last_beat = now
            self._unsent = None
            if "peak_memory_bytes" not in message:
                peak = _peak_accelerator_memory()
                if peak is not None:
                    message["peak_memory_bytes"] = peak
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

    def checkpoint_committed(self, step, nbytes=0, ms=0.0):
        """Tells dtrain that the checkpoint of `step` is complete on every rank (call it on one
        rank, after the save and a barrier): dtrain records it (checkpoint.committed, with its
        size and duration), resumes from it, and a preemption (SIGTERM to dtrain, `dtrain stop
        --checkpoint`) stops as soon as the step it asked for is committed instead of waiting
        out preempt_grace."""
        if self._closed:
            return
        self._send({"type": "ckpt.committed", "step": int(step), "bytes": int(nbytes), "ms": float(ms)})

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


# --- the sibling modules, loaded on first use ------------------------------------------------
# dtrain_worker_in_place.py (InPlace) and dtrain_worker_store.py (DtrainStore) sit next to this
# file (the agent writes all three); they import this module, never the other way at load time.

def _store_class():
    from dtrain_worker_store import store_class
    return store_class()


def __getattr__(name):
    """`from dtrain_worker import InPlace` or `DtrainStore` loads its module then (DtrainStore
    needs torch)."""
    if name == "InPlace":
        from dtrain_worker_in_place import InPlace
        return InPlace
    if name == "DtrainStore":
        return _store_class()
    raise AttributeError("module 'dtrain_worker' has no attribute %r" % name)
