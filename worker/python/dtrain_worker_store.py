"""dtrain_worker_store: DtrainStore, a torch.distributed.Store over the worker protocol (see
dtrain_worker's docstring for how to use it: init_process_group(use_dtrain_store=True) or
Worker.store()). Standard library only until store_class() is called; that imports torch.

What DtrainStore supports, and why (torch 1.13's Python Store trampoline forwards set, get, add,
compare_set and wait; delete_key, num_keys and check never reach Python):
  set, get, wait     exact (values are hex-encoded bytes under the key prefix "torch/").
  add                exact and atomic (kv.add); counters live apart from set() keys: read one
                     with add(key, 0), as torch's store-based barrier does, not with get().
  compare_set        raises DtrainError: it needs an atomic compare-and-set on the wire.
The whole module stays importable without torch; DtrainStore is created on first use.
"""

from dtrain_worker import DtrainError

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


def store_class():
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
