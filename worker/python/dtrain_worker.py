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

The protocol (worker/contract/wire.h): newline-delimited JSON over a unix stream socket;
requests carry an "id" and the reply with the same id answers them. Beats are rate-limited to
DTRAIN_HEARTBEAT_INTERVAL_MS; the first beat and beats with final=True are always sent.
"""

import json
import os
import socket
import time

__all__ = ["Worker", "DtrainError"]


class DtrainError(RuntimeError):
    """A failure talking to the dtrain agent or the store (the message says which)."""


def _env_int(name, default):
    text = os.environ.get(name, "")
    if text == "":
        return default
    try:
        return int(text)
    except ValueError:
        raise DtrainError("%s=%r is not an integer; the launcher sets it, so unset it "
                          "or run under `dtrain submit`" % (name, text))


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
        self._unsent = None
        self._closed = False
        self._created = time.monotonic()
        self._comm_ready_sent = False

    @classmethod
    def from_env(cls):
        """Connects to $DTRAIN_AGENT_SOCKET and says hello {rank, gen, pid}."""
        path = os.environ.get("DTRAIN_AGENT_SOCKET", "")
        if not path:
            raise DtrainError("not running under dtrain: DTRAIN_AGENT_SOCKET is unset; "
                              "start this script with `dtrain submit job.yaml`")
        rank = _env_int("RANK", 0)
        world_size = _env_int("WORLD_SIZE", 1)
        generation = _env_int("DTRAIN_GENERATION", 0)
        interval = _env_int("DTRAIN_HEARTBEAT_INTERVAL_MS", 1000)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(path)
        except OSError as error:
            sock.close()
            raise DtrainError("cannot connect to the dtrain agent at DTRAIN_AGENT_SOCKET=%r: %s "
                              "(is the agent still running?)" % (path, error))
        worker = cls(sock, rank, world_size, generation, interval)
        worker._send({"type": "hello", "rank": rank, "gen": generation, "pid": os.getpid()})
        return worker

    # --- heartbeats -----------------------------------------------------------------------
    def beat(self, step, final=False, **metrics):
        """Records progress; metrics: loss, step_ms, comm_ms, data_ms, samples."""
        message = {"type": "beat", "step": int(step)}
        for key in ("loss", "step_ms", "comm_ms", "data_ms", "samples"):
            if metrics.get(key) is not None:
                message[key] = metrics[key]
        now = time.monotonic()
        if final or self._last_beat is None or now - self._last_beat >= self._interval:
            self._last_beat = now
            self._unsent = None
            self._send(message)
        else:
            self._unsent = message

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

    def init_process_group(self, barrier=True, **kwargs):
        """torch.distributed.init_process_group(**kwargs), then (by default) a barrier so that
        NCCL's lazily created communicator exists too, then comm_ready() with the time both
        took. MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE come from the environment dtrain sets."""
        import torch.distributed as dist
        started = time.monotonic()
        dist.init_process_group(**kwargs)
        if barrier:
            dist.barrier()
        self.comm_ready((time.monotonic() - started) * 1000.0)

    # --- key-value store --------------------------------------------------------------------
    def kv_set(self, key, value):
        self._request({"type": "kv.set", "key": key, "value": value})

    def kv_get(self, key):
        """The value, or None when the key is not set."""
        return self._request({"type": "kv.get", "key": key}).get("value")

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
        try:
            self._sock.sendall((json.dumps(message, separators=(",", ":")) + "\n").encode())
        except OSError as error:
            raise DtrainError("lost the dtrain agent: %s" % error)

    def _request(self, message, deadline=60.0):
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
            while b"\n" in self._buffer:
                line, self._buffer = self._buffer.split(b"\n", 1)
                try:
                    reply = json.loads(line)
                except ValueError:
                    continue
                if isinstance(reply, dict) and isinstance(reply.get("id"), int):
                    self._replies[reply["id"]] = reply
        reply = self._replies.pop(request_id)
        if reply.get("type") == "error":
            raise DtrainError(reply.get("error", "%s refused" % message["type"]))
        return reply
