"""dtrain's bootstrap for unmodified Python workers (standard library only).

The dtrain agent writes this file (with dtrain_worker.py) into its runtime directory and puts
that directory first on each worker's PYTHONPATH, unless the spec says `worker.instrument: off`.
Python imports `sitecustomize` at startup, so this runs before the user's script, the way
ddtrace-run and coverage.py's subprocess support start. It:

  1. runs the user's own sitecustomize afterwards, if one exists further on sys.path (or the
     distribution's, e.g. Debian's /etc/python3.x/sitecustomize.py);
  2. only when the script imports torch (an import hook on `torch.optim`; torch itself is never
     imported from here), counts optimizer steps and sends beats with the step count and the
     step time (the time between two steps) over the worker protocol, rate-limited by
     dtrain_worker's beat(). torch >= 2.0 has the global
     torch.optim.optimizer.register_optimizer_step_post_hook; torch 1.13 has no step hook, so
     there each optimizer class's step() is wrapped on its first instantiation;
  3. splits the step time: each beat after the first also carries, summed since the previous
     step, data_ms (the time inside DataLoader iterators' __next__, outermost calls of the thread
     that steps: the rank waiting for input) and comm_ms (the time blocked in communication):
       - torch.distributed's Python collectives called synchronously (all_reduce, all_gather,
         broadcast, barrier, send, recv, the *_object ones, ...; outermost calls), wrapped in
         distributed_c10d as it is executed, so torch.distributed's names and the script's
         `from torch.distributed import all_reduce` are the wrappers;
       - DistributedDataParallel's gradient all-reduce, which runs in C++ during backward: the
         wait from the end of the backward graph's computation until backward() returns, where
         DDP's finalize_backward waits for its buckets (the comment above _GraphWatch).
     data_ms appears once the process has used a DataLoader, comm_ms once it has called a
     collective or built a DDP model: a script without them gets no figure rather than a 0.
     Limits: what is measured is the host's wait. On CUDA, collectives are asynchronous to the
     host: comm_ms counts the host's waits only, and NCCL kernels' GPU time that the host did
     not wait for shows as computation. An async_op=True call is not timed (it returns at once;
     its work.wait() is C++, unseen). DDP with a custom comm hook is measured the same way (the
     hook's futures are what finalize_backward waits for); no_sync() steps add about 0; DDP's
     broadcast of buffers at each forward (C++) is not timed. Input waits of a background
     prefetch thread are not counted (they overlap the training), nor is a wait the script
     does itself on a queue of its own. Nothing changes the numerics: the wrappers pass
     arguments and results through, and the hook on backward's roots returns None;
  4. marks checkpoint saves: torch.save (and torch.distributed.checkpoint's save and
     save_state_dict, where the torch version has them) are wrapped so that, once the script
     has made a step, the rank says phase "checkpoint" as a save starts and "train" as it
     returns; dtrain then allows heartbeat.checkpoint_timeout for it instead of hang_timeout;
  5. writes torchrun-compatible error records: for a script that dies of an uncaught exception
     without torch's @record, a sys.excepthook writes the same JSON that
     torch.distributed.elastic.multiprocessing.errors.record writes to $TORCHELASTIC_ERROR_FILE
     (which the agent sets per rank): {"message": {"message": "<Type>: <text>", "extraInfo":
     {"py_callstack": "<traceback>", "timestamp": "<unix seconds>"}}}.

It must never break a script: any error inside the bootstrap is written once to stderr
("dtrain bootstrap: ...; instrumentation disabled") and turns it off. Only the first Python
process of a worker is instrumented: child processes that inherit PYTHONPATH (DataLoader
workers, subprocesses, forks) stay passive, so they neither beat for the rank nor overwrite its
error record. A script that talks to dtrain itself (dtrain_worker.Worker.from_env()) owns the
rank's beats: the bootstrap then stops sending its own.

A pool process (DTRAIN_STANDBY=bootstrap, spec worker.pool) waits here, after the imports the
spec names, until the agent assigns it a rank; the script then runs as that rank (_wait_for_rank).
"""

import os
import sys
from time import perf_counter as _perf_counter

_OWNER_VARIABLE = "DTRAIN_INSTRUMENTED_PID"
_HERE = os.path.dirname(os.path.abspath(__file__))
_state = {"disabled": False, "connection": None, "owner_pid": None, "owner": False, "save_depth": 0}


def _disable(what, error):
    """Logs the bootstrap's own failure once and turns instrumentation off for this process."""
    if _state["disabled"]:
        return
    _state["disabled"] = True
    try:
        sys.stderr.write("dtrain bootstrap: %s: %s: %s; instrumentation disabled (the script runs "
                         "as usual; `worker.instrument: off` in the spec turns the bootstrap off)\n"
                         % (what, type(error).__name__, error))
        sys.stderr.flush()
    except Exception:
        pass


def _is_owner():
    """True in the worker process the agent started (pid unchanged across exec), not in its
    children: a child that starts Python anew inherits the variable with another pid in it, and a
    forked one has "owner" turned off by the fork handler (_start). A flag, not a getpid() per
    call: the DataLoader hook asks once per batch, and getpid is a system call."""
    return _state["owner"] and not _state["disabled"]


def _forked_child():
    _state["owner"] = False


# --- progress: optimizer steps as beats --------------------------------------------------------

class _StepCounter:
    """Counts optimizer steps (the largest count of any one optimizer, so a script with a
    generator and a discriminator optimizer does not count double) and beats."""

    def __init__(self):
        import time
        self._monotonic = time.monotonic
        self._counts = {}
        self._step = 0
        self._last_step_time = None

    def on_step(self, optimizer):
        if not _is_owner():
            return
        try:
            key = id(optimizer)
            count = self._counts.get(key, 0) + 1
            self._counts[key] = count
            if count <= self._step:
                return
            self._step = count
            now = self._monotonic()
            metrics = _take_time_split(first=self._last_step_time is None)
            if self._last_step_time is not None:
                metrics["step_ms"] = (now - self._last_step_time) * 1000.0
            self._last_step_time = now
            worker = _connection()
            if worker is not None:
                worker.beat(self._step, **metrics)
        except Exception as error:
            _disable("sending a beat", error)


def _connection():
    """The bootstrap's worker-protocol connection, made at the first step (not at startup: a
    script that closes its fds or forks early must find nothing of ours open). None when the
    script speaks the protocol itself or dtrain's socket is not set."""
    import dtrain_worker
    if getattr(dtrain_worker, "_script_worker_created", False):
        worker = _state["connection"]
        if worker is not None:
            _state["connection"] = None
            worker.close("script speaks the worker protocol")
        return None
    if _state["connection"] is None:
        if not os.environ.get("DTRAIN_AGENT_SOCKET"):
            return None
        _state["connection"] = dtrain_worker.Worker.from_env(_instrument=True)
        import atexit
        atexit.register(_close_connection)
    return _state["connection"]


def _close_connection():
    worker = _state["connection"]
    _state["connection"] = None
    if worker is not None and _is_owner():
        try:
            worker.close()
        except Exception:
            pass  # the agent is gone: nothing to flush to


def _hook_optimizers(optimizer_module):
    """Installs the step hook; optimizer_module is torch.optim.optimizer."""
    counter = _StepCounter()
    register = getattr(optimizer_module, "register_optimizer_step_post_hook", None)
    if register is not None:  # torch >= 2.0: one global hook for every optimizer
        register(lambda optimizer, args, kwargs: counter.on_step(optimizer))
        return
    # torch 1.13: no hook; wrap each Optimizer subclass's step() when it is first instantiated
    # (subclasses override step, so wrapping Optimizer.step alone would see nothing).
    base = optimizer_module.Optimizer
    original_init = base.__init__

    def wrap_step(cls):
        step = cls.__dict__.get("step")
        if step is None or getattr(step, "_dtrain_wrapped", False):
            return

        def wrapped_step(self, *args, **kwargs):
            result = step(self, *args, **kwargs)
            counter.on_step(self)
            return result

        wrapped_step._dtrain_wrapped = True
        for attribute in ("__name__", "__qualname__", "__doc__", "__wrapped__"):
            if hasattr(step, attribute):
                try:
                    setattr(wrapped_step, attribute, getattr(step, attribute))
                except Exception:
                    pass
        if getattr(step, "hooked", False):
            wrapped_step.hooked = True  # torch's profiler marker: do not wrap twice
        setattr(cls, "step", wrapped_step)

    def init(self, *args, **kwargs):
        if not _state["disabled"]:
            try:
                # The most derived class that defines step() is the one called.
                for cls in type(self).__mro__:
                    if "step" in cls.__dict__ and cls is not base:
                        wrap_step(cls)
                        break
            except Exception as error:
                _disable("wrapping %s.step" % type(self).__name__, error)
        original_init(self, *args, **kwargs)

    base.__init__ = init


# --- where a step's time goes: waiting for input, blocked in collectives -----------------------

# Seconds summed since the previous optimizer step, and whether the process ever waited for input
# or communicated (a script that never did gets no data_ms or comm_ms rather than a 0 that would
# read as "measured, and none"). The depths keep nested calls from counting twice: a DataLoader
# whose dataset iterates another one, all_gather_object calling all_gather.
_split = {"data": 0.0, "comm": 0.0, "data_seen": False, "comm_seen": False,
          "data_depth": 0, "comm_depth": 0, "train_thread": None}


def _take_time_split(first):
    """The beat's data_ms and comm_ms for the step just made (none for the first step, which has
    no previous one), and the accumulators reset for the next. Runs on the thread that steps,
    which from now on is the one whose input waits count."""
    import _thread
    data, comm = _split["data"], _split["comm"]
    _split["data"] = _split["comm"] = 0.0
    _split["train_thread"] = _thread.get_ident()
    metrics = {}
    if not first:
        if _split["data_seen"]:
            metrics["data_ms"] = data * 1000.0
        if _split["comm_seen"]:
            metrics["comm_ms"] = comm * 1000.0
    return metrics


def _copy_metadata(wrapper, function):
    """functools.wraps' attributes, set one by one: a builtin or a C function may lack some."""
    for attribute in ("__module__", "__name__", "__qualname__", "__doc__"):
        try:
            setattr(wrapper, attribute, getattr(function, attribute))
        except Exception:
            pass
    try:
        wrapper.__dict__.update(getattr(function, "__dict__", {}))
    except Exception:
        pass
    wrapper.__wrapped__ = function
    wrapper._dtrain_wrapped = True
    return wrapper


def _hook_dataloader(module):
    """Times the rank's waits for input: the outermost DataLoader iterator __next__ calls of the
    thread that makes the optimizer steps (a background prefetch thread's waits overlap the
    training and are not the rank's). module is torch.utils.data.dataloader, whose iterators
    (_SingleProcessDataLoaderIter, _MultiProcessingDataLoaderIter) inherit __next__ from
    _BaseDataLoaderIter."""
    import _thread
    base = module._BaseDataLoaderIter
    next_batch = base.__dict__["__next__"]
    if getattr(next_batch, "_dtrain_wrapped", False):
        return
    thread = _thread.get_ident

    def begin():
        try:
            if _split["data_depth"] or thread() != _split["train_thread"] or not _is_owner():
                return None
            _split["data_depth"] = 1
            return _perf_counter()
        except Exception as error:
            _disable("timing a DataLoader batch", error)
            return None

    def end(start):
        try:
            _split["data"] += _perf_counter() - start
            _split["data_seen"] = True
            _split["data_depth"] = 0
        except Exception as error:
            _disable("timing a DataLoader batch", error)

    def __next__(self):
        start = begin()
        if start is None:
            return next_batch(self)
        try:
            return next_batch(self)
        finally:
            end(start)

    base.__next__ = _copy_metadata(__next__, next_batch)


# torch.distributed's Python collectives; isend, irecv and batch_isend_irecv are asynchronous by
# nature and left alone. Blocking send and recv count: a pipeline stage waiting in recv waits for
# its peer as much as in an all_reduce.
_COLLECTIVES = (
    "all_reduce", "all_reduce_coalesced", "all_gather", "all_gather_into_tensor", "_all_gather_base",
    "all_gather_coalesced", "all_gather_object", "reduce_scatter", "reduce_scatter_tensor",
    "_reduce_scatter_base", "broadcast", "broadcast_object_list", "reduce", "barrier",
    "monitored_barrier", "all_to_all", "all_to_all_single", "gather", "gather_object", "scatter",
    "scatter_object_list", "send", "recv",
)


def _comm_begin(asynchronous):
    """The start time of a collective to count, or None: not the owner, nested in a collective
    already timed, or asynchronous (async_op=True returns a Work at once, and the wait that
    matters is the caller's work.wait() in C++, which the bootstrap does not see)."""
    try:
        if not _is_owner():
            return None
        _split["comm_seen"] = True
        if asynchronous or _split["comm_depth"]:
            return None
        _split["comm_depth"] = 1
        return _perf_counter()
    except Exception as error:
        _disable("timing a collective", error)
        return None


def _comm_end(start):
    try:
        _split["comm"] += _perf_counter() - start
        _split["comm_depth"] = 0
    except Exception as error:
        _disable("timing a collective", error)


def _wrap_collective(function):
    if getattr(function, "_dtrain_wrapped", False):
        return function
    import inspect
    try:
        parameters = list(inspect.signature(function).parameters)
    except (TypeError, ValueError):
        parameters = []
    position = parameters.index("async_op") if "async_op" in parameters else None

    def collective(*args, **kwargs):
        if "async_op" in kwargs:
            asynchronous = kwargs["async_op"]
        else:
            asynchronous = position is not None and len(args) > position and args[position]
        start = _comm_begin(asynchronous)
        if start is None:
            return function(*args, **kwargs)
        try:
            return function(*args, **kwargs)
        finally:
            _comm_end(start)

    return _copy_metadata(collective, function)


def _hook_collectives(module):
    """module is torch.distributed.distributed_c10d, just executed: torch.distributed's
    `from .distributed_c10d import *` and the script's `from torch.distributed import all_reduce`
    come later and take the wrappers. Where torch.distributed already holds an original (the
    bootstrap started late), it gets the wrapper too."""
    package = sys.modules.get("torch.distributed")
    for name in _COLLECTIVES:
        function = getattr(module, name, None)
        if not callable(function):
            continue
        wrapper = _wrap_collective(function)
        setattr(module, name, wrapper)
        if package is not None and getattr(package, name, None) is function:
            setattr(package, name, wrapper)


# DistributedDataParallel all-reduces the gradients in C++ during backward, overlapped with the
# computation of the gradients still to come; what the rank waits for is the rest: from the end
# of the graph's computation until backward() returns, DDP's finalize_backward waiting for the
# bucket all-reduces (an autograd engine final callback, which DDP's reducer queues once its last
# bucket is ready). Final callbacks run in the order queued, after the graph's last node. So each
# backward call gets a watch: a tensor hook on its roots (the loss) fires first thing in the
# graph, before any of DDP's gradients exists, and queues a final callback of its own, which
# therefore runs before DDP's and stamps "graph done"; the call's return stamps the end. The hook
# returns None (the gradient passes unchanged) and is removed as backward returns.
#
# Why the roots rather than DDP's outputs or one parameter: a reentrant activation checkpoint
# (torch.utils.checkpoint, use_reentrant=True; DDP with static_graph) recomputes its segment in
# a backward of its own, inside the outer one, and DDP's last bucket may become ready there: its
# finalize_backward then waits at the end of that inner graph. The inner backward comes through
# torch.autograd.backward too, with its own roots, so its wait is measured the same way; the
# windows of nested calls do not overlap. Only torch.autograd.backward is wrapped: Tensor.backward
# calls it by that name (torch 1.13 and 2.x), and leaving Tensor's method alone keeps
# __torch_function__ overrides that compare it by identity working.

class _GraphWatch:
    """One backward call's graph: when it computed its last gradient (done), if it got that far."""

    def __init__(self, engine):
        self._engine = engine
        self._queued = False
        self.done = None
        self.handles = []

    def on_root_gradient(self, _gradient):
        try:
            if not self._queued:
                self._queued = True
                self._engine.queue_callback(self._on_graph_done)
        except Exception as error:
            _disable("timing DDP's gradient all-reduce", error)
        return None  # the gradient is left as it is

    def _on_graph_done(self):
        try:
            self.done = _perf_counter()
        except Exception as error:
            _disable("timing DDP's gradient all-reduce", error)


def _watch_graph(engine, args, kwargs):
    """A _GraphWatch with its hook on the roots of backward(tensors, ...), or None."""
    try:
        if not _is_owner():
            return None
        roots = args[0] if args else kwargs.get("tensors")
        if hasattr(roots, "register_hook"):
            roots = (roots,)
        elif not isinstance(roots, (list, tuple)):
            return None
        watch = _GraphWatch(engine)
        for root in roots:
            if getattr(root, "requires_grad", False) and getattr(root, "grad_fn", None) is not None:
                watch.handles.append(root.register_hook(watch.on_root_gradient))
        return watch if watch.handles else None
    except Exception as error:
        _disable("timing DDP's gradient all-reduce", error)
        return None


def _graph_returned(watch):
    try:
        for handle in watch.handles:
            handle.remove()
        if watch.done is not None:
            _split["comm"] += _perf_counter() - watch.done
    except Exception as error:
        _disable("timing DDP's gradient all-reduce", error)


def _wrap_backward(autograd):
    """torch.autograd.backward, timed from the end of its graph to its return (see above)."""
    backward = autograd.backward
    if getattr(backward, "_dtrain_wrapped", False):
        return
    engine = autograd.Variable._execution_engine

    def timed_backward(*args, **kwargs):
        watch = _watch_graph(engine, args, kwargs)
        if watch is None:
            return backward(*args, **kwargs)
        try:
            return backward(*args, **kwargs)
        finally:
            _graph_returned(watch)

    autograd.backward = _copy_metadata(timed_backward, backward)


def _hook_ddp(module):
    """module is torch.nn.parallel.distributed: building a DistributedDataParallel model marks the
    process as communicating and starts timing backward calls (never before: a script without
    DDP keeps its own torch.autograd.backward)."""
    ddp = module.DistributedDataParallel
    initialise = ddp.__dict__["__init__"]
    if getattr(initialise, "_dtrain_wrapped", False):
        return

    def __init__(self, *args, **kwargs):
        initialise(self, *args, **kwargs)
        if _is_owner():
            try:
                _split["comm_seen"] = True
                _wrap_backward(sys.modules["torch.autograd"])
            except Exception as error:
                _disable("timing DDP's gradient all-reduce", error)

    ddp.__init__ = _copy_metadata(__init__, initialise)


# --- phases: checkpoint saves ---------------------------------------------------------------------

def _say_phase(saving):
    """Sends the phase on the bootstrap's connection, which exists once a step was beaten."""
    import dtrain_worker
    worker = _state["connection"]
    if worker is None or getattr(dtrain_worker, "_script_worker_created", False):
        return  # no step yet (nothing is watched), or the script speaks for itself
    worker.set_checkpoint_phase(saving)


def _wrap_save(function):
    """function, wrapped to say phase "checkpoint" while it runs (outermost call only: a
    torch.distributed.checkpoint save may call torch.save)."""
    if getattr(function, "_dtrain_wrapped", False):
        return function

    def save(*args, **kwargs):
        outermost = _is_owner() and _state["save_depth"] == 0
        _state["save_depth"] += 1
        try:
            if outermost:
                try:
                    _say_phase(True)
                except Exception as error:
                    _disable("marking a checkpoint save", error)
                    outermost = False
            return function(*args, **kwargs)
        finally:
            _state["save_depth"] -= 1
            if outermost and not _state["disabled"]:
                try:
                    _say_phase(False)
                except Exception as error:
                    _disable("marking the end of a checkpoint save", error)

    return _copy_metadata(save, function)


def _hook_module_saves(module, names):
    for name in names:
        function = getattr(module, name, None)
        if callable(function):
            setattr(module, name, _wrap_save(function))


def _hook_torch_save(_optimizer_module):
    """torch.save, wrapped where scripts find it: torch.save and torch.serialization.save.
    `import torch` has bound both by the time it imports torch.optim."""
    for name in ("torch", "torch.serialization"):
        module = sys.modules.get(name)
        if module is not None:
            _hook_module_saves(module, ("save",))


def _hook_distributed_checkpoint(module):
    _hook_module_saves(module, ("save", "save_state_dict"))


# Modules to hook once torch imports them: name → what to do with the executed module.
_HOOKS = {
    "torch.optim.optimizer": (_hook_optimizers, _hook_torch_save),
    "torch.distributed.checkpoint": (_hook_distributed_checkpoint,),
    "torch.utils.data.dataloader": (_hook_dataloader,),
    "torch.distributed.distributed_c10d": (_hook_collectives,),
    "torch.nn.parallel.distributed": (_hook_ddp,),
}


class _TorchOptimWatcher:
    """A meta-path finder that waits for the modules of _HOOKS to be imported (torch imports
    torch.optim.optimizer while `import torch` runs) and hooks each once executed. It imports
    nothing itself."""

    def find_spec(self, fullname, path, target=None):
        if fullname not in _HOOKS or _state["disabled"]:
            return None
        try:
            import importlib.machinery
            spec = importlib.machinery.PathFinder.find_spec(fullname, path)
            if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
                return None
            loader = spec.loader
            original_exec = loader.exec_module

            def exec_module(module):
                original_exec(module)
                if _is_owner():
                    for hook in _HOOKS[fullname]:
                        try:
                            hook(module)
                        except Exception as error:
                            _disable("hooking %s (%s)" % (fullname, hook.__name__), error)

            loader.exec_module = exec_module
            return spec
        except Exception as error:
            _disable("watching for %s" % fullname, error)
            return None


# --- root causes: torchrun's error file -----------------------------------------------------------

def _write_error_record(kind, value, traceback_object):
    path = os.environ.get("TORCHELASTIC_ERROR_FILE", "")
    if not path or os.path.exists(path):  # torch's @record wrote it already: keep theirs
        return
    import json
    import time
    import traceback
    record = {"message": {
        "message": "%s: %s" % (kind.__name__, value),
        "extraInfo": {
            "py_callstack": "".join(traceback.format_exception(kind, value, traceback_object)),
            "timestamp": str(int(time.time())),
        },
    }}
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as out:
        json.dump(record, out)


def _install_excepthook():
    previous = sys.excepthook

    def excepthook(kind, value, traceback_object):
        if _is_owner() and not issubclass(kind, KeyboardInterrupt):
            try:
                _write_error_record(kind, value, traceback_object)
            except Exception as error:
                _disable("writing $TORCHELASTIC_ERROR_FILE", error)
        previous(kind, value, traceback_object)

    sys.excepthook = excepthook


# --- the pool of an unmodified script: wait for a rank before the script runs --------------------

def _wait_for_rank():
    """A pool process (DTRAIN_STANDBY=bootstrap, spec worker.pool): imports the modules of
    DTRAIN_STANDBY_IMPORTS (torch by default; importing torch initialises no CUDA, so the rank's
    CUDA_VISIBLE_DEVICES still applies), then says hello {standby} and waits for the agent's
    assign; dtrain_worker sets the rank's environment over os.environ, pops DTRAIN_STANDBY and
    says hello {rank, gen, pid} on this connection, which becomes the bootstrap's own. Only then
    does Python run the script, with the rank's environment and the argv it was started with.

    A pool process must never run the script without a rank: whatever goes wrong here ends it
    (the agent replaces a pool process that dies before its assign; that is no failure)."""
    # No owner check: the variable is popped at the assign, before the script can start a child,
    # so whoever has it is a pool process, and even a bootstrap that failed to start must not let
    # it run the script without a rank.
    try:
        import importlib
        for name in os.environ.get("DTRAIN_STANDBY_IMPORTS", "").split(","):
            if not name:
                continue
            try:
                importlib.import_module(name)
            except Exception as error:  # the script's own import says it again, as the rank's
                sys.stderr.write("dtrain bootstrap: pool: cannot import %s: %s: %s\n"
                                 % (name, type(error).__name__, error))
        import dtrain_worker
        _state["connection"] = dtrain_worker.Worker.from_env(_instrument=True)
        import atexit
        atexit.register(_close_connection)
    except BaseException as error:
        try:
            sys.stderr.write("dtrain bootstrap: pool process %d ends without a rank: %s: %s\n"
                             % (os.getpid(), type(error).__name__, error))
            sys.stderr.flush()
        finally:
            os._exit(1)


# --- the user's own sitecustomize -----------------------------------------------------------------

def _run_next_sitecustomize():
    """Finds and runs the sitecustomize that this one shadows, as Python would have."""
    import importlib.machinery
    import importlib.util
    here = os.path.realpath(_HERE)
    rest = [entry for entry in sys.path if os.path.realpath(entry or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    ours = sys.modules.get("sitecustomize")
    sys.modules["sitecustomize"] = module
    try:
        spec.loader.exec_module(module)
    except Exception as error:
        # What site.py does with a failing sitecustomize: report, go on.
        sys.modules["sitecustomize"] = ours
        sys.stderr.write("Error in sitecustomize (%s); set PYTHONVERBOSE for traceback:\n%s: %s\n"
                         % (spec.origin, type(error).__name__, error))


def _start():
    owner = os.environ.get(_OWNER_VARIABLE)
    if owner is None:
        os.environ[_OWNER_VARIABLE] = str(os.getpid())
        _state["owner_pid"] = os.getpid()
    elif owner == str(os.getpid()):
        _state["owner_pid"] = os.getpid()  # re-exec of the same process (os.execv)
    if _state["owner_pid"] is None:
        return
    os.register_at_fork(after_in_child=_forked_child)
    _state["owner"] = True
    import _thread
    _split["train_thread"] = _thread.get_ident()  # until a step says which thread trains
    _install_excepthook()
    sys.meta_path.insert(0, _TorchOptimWatcher())
    for name, hooks in _HOOKS.items():
        if name in sys.modules:  # imported by something even earlier
            for hook in hooks:
                hook(sys.modules[name])


try:
    _start()
except Exception as _error:
    _disable("starting", _error)

try:
    _run_next_sitecustomize()
except Exception as _error:
    _disable("looking for the next sitecustomize", _error)

if os.environ.get("DTRAIN_STANDBY") == "bootstrap":
    _wait_for_rank()
