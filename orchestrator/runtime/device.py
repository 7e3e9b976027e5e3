"""One op on a worker: its payload, the device runtime it runs in, and what it records.

* :class:`OpTask` and :func:`run_op`: one op, run with the device's backend
  through the op catalog's kernel; its result is charged to the device's
  memory and recorded (op, device, start, duration, bytes) in the worker's
  own memory, drained once per run by :func:`drain_records`.
* :func:`move`, :func:`token`, :func:`to_host`: a value received on another
  device (one copy per consuming device), a control edge (no data), and a
  device array copied to the host for the client.
* :func:`copy_failed`: what a sweep's gathering op reads of a copy's last op
  on another device: the op's CopyFailed, or None (no array moves).
"""

from __future__ import annotations

import concurrent.futures
import os
import threading
import time
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Callable, Mapping

import numpy as np

from .backends import Backend, DeviceConfig, make_backend
from ..atomic import FileSet
from ..errors import OpFailedError, OpTimeoutError, OrchestratorError
from ..ops import KernelError, lookup, tf_name
from ..ops.values import CopyFailed, failure_in, first_failed, nbytes_of, unless_failed
from .exchange import Mailbox
from .retrying import not_retried, retried
from .tasks import OpTask
from .links import Links
from .usercode import WORKING_DIRECTORY, describe, import_function, user_origin

LOG_TOPIC = "orchestrator-log"
# Dask events a worker sends the client: its device and process when it joins (a restarted worker too), and the
# start of each op of a sweep's copy (which copies a lost worker was running: execute.losses)
DEVICE_TOPIC = "orchestrator-device"
COPY_TOPIC = "orchestrator-copy-started"
DRAIN_TOPIC = "orchestrator-drain"  # a launcher's drain on notice, and the runs' answers (execute.draining)
RUNTIME_ATTRIBUTE = "orchestrator_runtime"
DEVICE_METRIC = "orchestrator"  # the Dask worker metric (in each heartbeat) the run's live page reads
MAX_SAMPLES = 64  # sampled step timelines kept per loop and device in one run
_NDARRAY = np.ndarray


# --------------------------------------------------------------------------- the device runtime


@dataclass
class Runtime:
    """A device's backend and this run's records, kept on the worker that stands for it."""

    config: DeviceConfig
    backend: Backend
    user_paths: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)
    # (run, op, kind) -> aggregate over loop steps: bounded by the number of ops, not of steps
    records: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)
    created: float = field(default_factory=time.time)  # a restarted worker lost the records it held
    mailbox: Mailbox = field(default_factory=Mailbox)  # values other devices sent to this one (loop windows)
    staged: dict[str, dict[str, str]] = field(default_factory=dict)  # run -> {staging file: target}: saves to commit
    committed: dict[str, FileSet] = field(default_factory=dict)  # run -> its saves in place, the old files kept
    # (run, loop) -> this device's timelines of the loop's sampled steps (the step picture; a few per loop)
    samples: dict[tuple[str, str], list[dict[str, Any]]] = field(default_factory=dict)
    functions: dict[tuple[str, str], Callable[..., Any]] = field(default_factory=dict)  # user functions, imported
    # (run, loop) -> when its windows ran here: a span per stretch of windows one after another (a sweep's rule
    # pauses a copy's loop at its decision steps: a span each side)
    spans: dict[tuple[str, str], list[list[float]]] = field(default_factory=dict)
    # (run, loop) -> each window that ran here: [start, stop, first step, last step] (the report's timeline)
    windows: dict[tuple[str, str], list[list[float]]] = field(default_factory=dict)
    links: Links = field(init=False)  # streams to the other devices' workers (loop windows)
    # what the run's live page reads at each heartbeat (calls.device_metrics): the op each task thread runs
    # now, and the seconds of op time so far (all threads; the page turns its growth into busy over time)
    running: dict[int, str] = field(default_factory=dict)
    busy: float = 0.0
    moved: dict[str, int] = field(default_factory=dict)  # run -> bytes Dask moved into this worker for it
    moved_seen: Any = None  # the newest entry of Dask's transfer log counted into ``moved``
    busy_seen: tuple[float, float] | None = None  # (when, op seconds) at the last heartbeat
    busy_shares: list[list[float]] = field(default_factory=list)  # the last heartbeats' [when, busy share]

    def __post_init__(self) -> None:
        self.links = Links(self.config.name, self.mailbox)

    @classmethod
    def for_device(cls, config: DeviceConfig) -> Runtime:
        return cls(config, make_backend(config))

    def record(self, run: str, op: str, kind: str, ran_on: str, start: float, duration: float,
               nbytes: int, error: str = "") -> None:
        key, end = (run, op, kind), start + duration
        with self.lock:
            entry = self.records.get(key)
            if entry is None:
                self.records[key] = {"run": run, "op": op, "kind": kind, "ran_on": ran_on, "start": start,
                                     "duration": duration, "bytes": nbytes, "count": 1, "error": error, "end": end}
                return
            entry["count"] += 1
            entry["duration"] += duration
            entry["bytes"] = nbytes
            if end > entry["end"]:  # its last run's end: a copy's real stop
                entry["end"] = end
            if error:
                entry["error"] = error

    def ran_window(self, run: str, loop: str, start: float, stop: float, opens: bool,
                   steps: tuple[int, int] = (0, 0)) -> None:
        """A window of ``loop`` (its ``steps``, first and last) ran here: it extends the loop's last span, or
        ``opens`` a new one."""
        with self.lock:
            self.windows.setdefault((run, loop), []).append([start, stop, *steps])
            spans = self.spans.setdefault((run, loop), [])
            if spans and not opens:
                spans[-1][1] = max(spans[-1][1], stop)
            else:
                spans.append([start, stop])

    def sample_step(self, run: str, loop: str, device: str, timeline: dict[str, Any]) -> None:
        with self.lock:
            kept = self.samples.setdefault((run, loop), [])
            if len(kept) < MAX_SAMPLES:
                kept.append({"device": device, **timeline})

    def stage(self, run: str, path: str) -> str:
        """The staging file a save of ``path`` writes during ``run`` (renamed into place by :func:`commit_saves`)."""
        staging = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.{run}.staged")
        with self.lock:
            self.staged.setdefault(run, {})[staging] = path
        return staging

    def user_function(self, fn_path: str, base_dir: str, op: str) -> Callable[..., Any]:
        """Import ``package.module:function`` from the spec's directory (or the Python path)."""
        found = self.functions.get((fn_path, base_dir))
        if found is None:  # (once: import_module would return the same module again)
            found = self.functions[(fn_path, base_dir)] = import_function(fn_path, base_dir, op, self.config.name,
                                                                          self.user_paths, self.lock)
        return found


_get_worker: Callable[[], Any] | None = None
# run -> {op of a sweep's copy: why it fails}: the copies a lost worker was running, which fail when Dask runs their
# tasks again instead of running twice (execute.losses decides; execute.plugin.LostCopies tells every worker, and
# every worker that joins later). Per process, not per Runtime: it may arrive before the device's runtime does.
_LOST: dict[str, dict[str, str]] = {}


def mark_lost(run: str, ops: Mapping[str, str] | None) -> None:
    """The ops of ``run``'s copies that fail when they run again (None: the run is over, forget them)."""
    if ops is None:
        _LOST.pop(run, None)
    else:
        _LOST[run] = dict(ops)


def bind(get_worker: Callable[[], Any] | None) -> Callable[[], Any] | None:
    """Tell this module how to find the worker running a task (``distributed.get_worker``); the lookup it replaces.

    An in-process run (``--sync``) binds its own devices for the run and puts the previous lookup back after.
    """
    global _get_worker
    previous, _get_worker = _get_worker, get_worker
    return previous


def _runtime(worker: Any = None) -> tuple[Any, Runtime]:
    if worker is None:
        if _get_worker is None:
            raise OrchestratorError("the orchestrator device runtime is not installed on this worker "
                                    "(it is registered by 'orchestrate run' before any task)")
        worker = _get_worker()
    runtime = getattr(worker, RUNTIME_ATTRIBUTE, None)
    if runtime is None:  # a worker the spec does not describe: a plain host device
        runtime = Runtime.for_device(DeviceConfig(str(worker.name), "CPU", "host"))
        setattr(worker, RUNTIME_ATTRIBUTE, runtime)
    return worker, runtime


class _Context:
    """The :class:`~orchestrator.ops.base.KernelContext` of one op on this worker: made at its first step, kept
    on its task (``_HOT``) for the others; a thread finding it in use (an op abandoned past its timeout) makes one."""

    __slots__ = ("runtime", "xp", "name", "device", "step", "base_dir", "input_keys", "outputs", "run", "stream",
                 "on_device", "memo", "fn", "lease", "claim")

    def __init__(self, runtime: Runtime, task: OpTask, step: int, fn: Callable[..., Any]):
        self.runtime, self.xp = runtime, runtime.backend.xp
        self.name, self.device, self.step = task.name, runtime.config.name, step
        self.base_dir, self.input_keys, self.outputs = task.base_dir, task.input_keys, task.outputs
        self.run, self.stream, self.fn, self.memo = task.run, task.stream, fn, None
        # execute adopted the inputs: to_device would give each back as it is (one of ours; a tuple aside)
        self.on_device = bool(getattr(runtime.backend, "keeps_adopted", False))
        self.lease: AbstractContextManager[None] | None = None
        self.claim = threading.Lock()

    def to_host(self, value: Any) -> Any:
        return self.runtime.backend.to_host(value)

    def to_device(self, value: Any) -> Any:
        return self.runtime.backend.to_device(value, self.name)

    def user_function(self, fn: str) -> Callable[..., Any]:
        return self.runtime.user_function(fn, self.base_dir, self.name)

    def working_directory(self) -> AbstractContextManager[None]:
        lease = self.lease  # (made once, lent afresh at each entry: it keeps no state of its own)
        if lease is None:
            lease = self.lease = WORKING_DIRECTORY.lent(self.base_dir) if self.base_dir else nullcontext()
        return lease

    def stage(self, path: str) -> str:
        return self.runtime.stage(self.run, path)


_HOT = "_context"  # where an OpTask keeps its op's _Context (not a field: never pickled, compared or packed)


def run_op(task: OpTask, *args: Any) -> Any:
    """Run one op on this worker's device. Extra arguments past ``n_inputs`` are control tokens."""
    worker, runtime = _runtime()
    raw = args[: task.n_inputs]
    if task.input_index:
        raw = tuple(x if i is None else x[i] for x, i in zip(raw, task.input_index))
    if task.copies_of:  # a gathering op's markers follow its inputs
        raw += args[task.n_inputs: len(task.copies_of)]
    return execute(task, runtime, worker, raw)


def execute(task: OpTask, runtime: Runtime, worker: Any, raw: tuple[Any, ...], step: int | None = None,
            log: bool = True) -> Any:
    """Run one op with its inputs on this device: charge, time out, record, log; errors name the op.

    ``step`` is the loop step when a window runs the same op for many steps (default: the task's);
    ``log``: False for the window's later steps (placement is logged once per op and window, as TF logs it
    once per graph, not once per step).
    """
    at = task.step if step is None else step
    start = time.time()
    if task.copies_of:
        raw = unless_failed(raw, task.n_inputs, task.copies_of)
    failed = first_failed(raw) if CopyFailed in map(type, raw) else None  # (C speed: no frame for most ops)
    if failed is None and task.copies == "copy":
        failed = _copy_starts(task, runtime, worker)
    if failed is not None and task.copies != "gather":
        return _after_failed(task, runtime, failed, start)
    # the op this thread runs now, for the live page: a dict write and a pop per op, no lock (each thread
    # writes its own entry; the heartbeat reads a copy)
    running, thread, began = runtime.running, threading.get_ident(), time.perf_counter()
    running[thread] = task.name
    try:
        value = _run(task, runtime, raw, at)
    except Exception as exc:
        return _failed(task, runtime, exc, start)
    finally:
        running.pop(thread, None)
        runtime.busy += time.perf_counter() - began  # (no lock: two threads ending at once may lose one op's time)
    stop = time.time()
    runtime.record(task.run, task.name, "op", runtime.config.name, start, stop - start,
                   value.nbytes if type(value) is _NDARRAY else nbytes_of(value))
    if task.log and log:
        worker.log_event(LOG_TOPIC, f"Executing op {tf_name(task.kind)} ({task.name}) in device {worker.name}")
    return value


def _run(task: OpTask, runtime: Runtime, raw: tuple[Any, ...], step: int) -> Any:
    """The op's kernel, with its timeout and retries, on inputs adopted by the device (charged there once)."""
    backend = runtime.backend
    attempt = kernel if task.timeout is None and not task.retry_on else _attempts
    if backend.name == "host":  # host memory is Dask's to account: nothing to adopt or charge
        return attempt(task, runtime, raw, step)
    adopt, name = backend.adopt, task.name
    inputs = tuple([x if isinstance(x, CopyFailed) else adopt(x, name) for x in raw])
    return backend.execute(name, partial(attempt, task, runtime, inputs, step))


def _failed(task: OpTask, runtime: Runtime, exc: Exception, start: float) -> Any:
    """An op that raised: a sweep copy's CopyFailed in its place, or its error recorded and raised, naming it."""
    if task.copies == "copy":  # the copy fails, the sweep goes on
        said = str(exc) if isinstance(exc, (OrchestratorError, KernelError)) else describe(exc, task.base_dir)
        return _after_failed(task, runtime, CopyFailed(task.name, runtime.config.name, said), start)
    runtime.record(task.run, task.name, "failed", runtime.config.name, start, 0.0, 0,
                   error=f"{type(exc).__name__}: {exc}")
    if isinstance(exc, OrchestratorError):
        raise exc
    if isinstance(exc, KernelError):  # the kernel's own account: the op, its device, the message
        raise OpFailedError(task.name, runtime.config.name, str(exc)) from None
    raise OpFailedError(task.name, runtime.config.name, describe(exc, task.base_dir) + not_retried(task, exc),
                        user_origin(exc.__traceback__, task.base_dir)) from None


def _copy_starts(task: OpTask, runtime: Runtime, worker: Any) -> CopyFailed | None:
    """An op of a sweep's copy starts: said to the client (a worker lost now was running this copy); or, when
    the copy was running on a worker that was lost, the failure it is instead of running again."""
    why = _LOST.get(task.run, {}).get(task.name)
    if why is not None:
        return CopyFailed(task.name, runtime.config.name, why)
    worker.log_event(COPY_TOPIC, [task.run, task.name])
    return None


def _after_failed(task: OpTask, runtime: Runtime, failed: CopyFailed, start: float) -> Any:
    """A copy's op that failed, or reads what failed: recorded where it ran, a CopyFailed in its place.

    An op outside the sweep's copies that reads one fails, naming the copy's op and its error.
    """
    if task.copies != "copy":
        raise OpFailedError(task.name, runtime.config.name, f"it reads the value of '{failed.op}', whose sweep copy "
                            f"failed ({failed.error}); read the copies through the sweep's select, gather or combine")
    now = time.time()
    runtime.record(task.run, task.name, "op", runtime.config.name, start, now - start, 0)
    runtime.record(task.run, task.name, "copy-failed", runtime.config.name, start, now - start, 0,
                   error=failed.error if failed.op == task.name else f"not run: '{failed.op}' failed")
    return failed if task.outputs == 1 else tuple(failed for _ in range(task.outputs))


def _attempts(task: OpTask, runtime: Runtime, inputs: tuple[Any, ...], step: int) -> Any:
    if not task.retry_on:
        return _bounded(task, runtime, inputs, step)
    return retried(task, lambda: _bounded(task, runtime, inputs, step), lambda began, exc: runtime.record(
        task.run, task.name, "failed", runtime.config.name, began, time.time() - began, 0,
        error=f"{type(exc).__name__}: {exc} (retried: run.retry_on)"))


def _bounded(task: OpTask, runtime: Runtime, inputs: tuple[Any, ...], step: int) -> Any:
    if task.timeout is None:
        return kernel(task, runtime, inputs, step)
    # A thread cannot be killed: past its timeout the op's thread is abandoned (its late result is dropped)
    # and the run fails now. A daemon thread: the worker process can exit (the run end) without waiting
    # for it, which a thread pool's non-daemon thread would make it do until the op returned by itself.
    done: concurrent.futures.Future[Any] = concurrent.futures.Future()

    use = getattr(runtime.backend, "use", None)  # a backend with a current device per thread (CuPy): ours here

    def target() -> None:
        try:
            if use is not None:
                use()
            done.set_result(kernel(task, runtime, inputs, step))
        except BaseException as exc:
            done.set_exception(exc)

    threading.Thread(target=target, name=f"op-{task.name}", daemon=True).start()
    try:
        return done.result(timeout=task.timeout)
    except concurrent.futures.TimeoutError:
        raise OpTimeoutError(task.name, runtime.config.name, task.timeout) from None


def kernel(task: OpTask, runtime: Runtime, inputs: tuple[Any, ...], step: int) -> Any:
    """The op's kernel from the catalog, run with this device's array module."""
    ctx = task.__dict__.get(_HOT)
    if ctx is None or ctx.runtime is not runtime:
        definition = lookup(task.kind)
        if definition is None:
            raise OrchestratorError(f"op '{task.name}': unknown op type '{task.kind}'")
        ctx = task.__dict__[_HOT] = _Context(runtime, task, step, definition.kernel)
    if ctx.claim.acquire(False):  # (C speed, never waits)
        try:
            ctx.step = step
            result = ctx.fn(ctx, task.params, *inputs)
        finally:
            ctx.claim.release()
    else:  # in use by another thread: a context of this call's own
        result = ctx.fn(_Context(runtime, task, step, ctx.fn), task.params, *inputs)
    return tuple(result) if isinstance(result, (list, tuple)) else ctx.xp.asarray(result)


def move(name: str, device: str, run: str, value: Any) -> Any:
    """Receive a value from another device: one explicit copy per consuming device."""
    worker, runtime = _runtime()
    start = time.time()
    if isinstance(value, CopyFailed):  # a failed copy's: nothing to copy
        return value
    moved = runtime.backend.to_device(value, name)
    runtime.record(run, name, "move", str(worker.name), start, time.time() - start, nbytes_of(moved))
    return moved


def token(*_: Any) -> None:
    """A control edge: done when its producer is, moving no data."""
    return None


def copy_failed(value: Any, element: int = -1) -> CopyFailed | None:
    """A sweep copy's last op, seen from its own device: its CopyFailed, or None (what a gathering op elsewhere
    reads of it: no array moves). ``element``: the op's value is that element of a partition's tuple."""
    return failure_in(value if element < 0 else value[element])


def to_host(value: Any) -> Any:
    _, runtime = _runtime()
    return value if isinstance(value, CopyFailed) else runtime.backend.to_host(value)
