"""The worker side: what runs inside a Dask worker that stands for a device.

A :class:`DeviceRuntimePlugin` (a Dask ``WorkerPlugin``, registered by the
client before each run and re-applied by Dask to restarted workers) gives
each worker the backend of the device its name denotes. Every task of the
compiled graph calls :func:`run_op` (or :func:`move` / :func:`token`), which
runs the op's kernel with the device's array module, charges the result to
the device's memory, and records an event (op, device, start, duration,
bytes) in the worker's own memory; the client drains those records once at
the end of a run (one call per worker instead of one message per op) to verify
placement and write the run report.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import importlib
import os
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field, fields
from typing import Any, Mapping

import numpy as np
from distributed import WorkerPlugin

from ..errors import OpFailedError, OpTimeoutError, OrchestratorError, RunError
from ..ops import lookup
from .backends import Backend, DeviceConfig, make_backend

LOG_TOPIC = "orchestrator-log"
RUNTIME_ATTRIBUTE = "orchestrator_runtime"


@dataclass(frozen=True)
class OpTask:
    """Everything a worker needs to run one op (pickled into the graph, once per task)."""

    name: str
    kind: str
    params: Mapping[str, Any]
    n_inputs: int
    run: str = ""  # the run token: events of other runs on a kept-alive cluster are ignored
    step: int = 0
    input_keys: tuple[str, ...] | None = None
    timeout: float | None = None
    log: bool = False
    base_dir: str = ""  # where relative paths and user modules are found (only load and call need it)
    outputs: int = 1
    input_index: tuple[int | None, ...] = ()  # per input: which output of a tuple it reads, in place

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        # The client, the scheduler and the worker each pickle or unpickle this once per task: positional
        # values without field names, the usually-default tail dropped, and no __init__ on the way back
        # (a tiny op's payload: 115 bytes instead of 324, and a few microseconds less at every hop).
        head = (self.name, self.kind, self.params, self.n_inputs, self.run, self.step)
        tail = (self.input_keys, self.timeout, self.log, self.base_dir, self.outputs, self.input_index)
        return _restore_op_task, (head if tail == _OP_TASK_DEFAULT_TAIL else head + tail,)


_OP_TASK_FIELDS = tuple(f.name for f in fields(OpTask))
_OP_TASK_DEFAULTS = tuple(f.default for f in fields(OpTask))
_OP_TASK_DEFAULT_TAIL = _OP_TASK_DEFAULTS[6:]


def _restore_op_task(values: tuple[Any, ...]) -> OpTask:
    task = object.__new__(OpTask)
    task.__dict__.update(zip(_OP_TASK_FIELDS, values + _OP_TASK_DEFAULTS[len(values):]))
    return task


@dataclass
class Runtime:
    config: DeviceConfig
    backend: Backend
    user_paths: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)
    # (run, op, kind) -> aggregate over loop steps: bounded by the number of ops, not of steps
    records: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)
    created: float = field(default_factory=time.time)  # a restarted worker lost the records it held

    def record(self, run: str, op: str, kind: str, ran_on: str, start: float, duration: float,
               nbytes: int, error: str = "") -> None:
        with self.lock:
            entry = self.records.get((run, op, kind))
            if entry is None:
                self.records[(run, op, kind)] = {"run": run, "op": op, "kind": kind, "ran_on": ran_on,
                                                 "start": start, "duration": duration, "bytes": nbytes,
                                                 "count": 1, "error": error}
            else:
                entry["count"] += 1
                entry["duration"] += duration
                entry["bytes"] = nbytes
                entry["error"] = error or entry["error"]


class DeviceRuntimePlugin(WorkerPlugin):
    """Gives each worker the backend of its device (by worker name)."""

    name = "orchestrator-device-runtime"
    idempotent = False

    def __init__(self, configs: Mapping[str, DeviceConfig]):
        self.configs = dict(configs)

    def plugin_name(self) -> str:
        """``orchestrator-runtime-<digest of the device configurations>``: equal clusters share one name."""
        digest = hashlib.sha256(repr(sorted(self.configs.items())).encode()).hexdigest()[:12]
        return f"orchestrator-runtime-{digest}"

    def setup(self, worker: Any) -> None:
        config = self.configs.get(str(worker.name))
        if config is None:
            return  # not a device of this cluster (another spec's, on a shared scheduler): leave it be
        existing = getattr(worker, RUNTIME_ATTRIBUTE, None)
        if existing is not None and existing.config == config:
            return  # keep the allocator's accounting across runs on a kept-alive cluster
        setattr(worker, RUNTIME_ATTRIBUTE, Runtime(config, make_backend(config)))

    def teardown(self, worker: Any) -> None:
        pass


def _runtime(worker: Any = None) -> tuple[Any, Runtime]:
    if worker is None:
        from distributed import get_worker

        worker = get_worker()
    runtime = getattr(worker, RUNTIME_ATTRIBUTE, None)
    if runtime is None:  # a worker the spec does not describe: a plain host device
        runtime = Runtime(DeviceConfig(str(worker.name), "CPU", "host"), make_backend(
            DeviceConfig(str(worker.name), "CPU", "host")))
        setattr(worker, RUNTIME_ATTRIBUTE, runtime)
    return worker, runtime


def _nbytes(value: Any) -> int:
    if isinstance(value, tuple):
        return sum(_nbytes(v) for v in value)
    return int(getattr(value, "nbytes", 0))


def _user_origin(tb: Any) -> str:
    """The innermost frame outside this package: the user's line."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    frames = [f for f in traceback.extract_tb(tb) if not os.path.abspath(f.filename).startswith(package)]
    if not frames:
        return ""
    f = frames[-1]
    return f"{f.filename}:{f.lineno} in {f.name}: {(f.line or '').strip()}"


def run_op(task: OpTask, *args: Any) -> Any:
    """Run one op on this worker's device. Extra arguments past ``n_inputs`` are control tokens."""
    worker, runtime = _runtime()
    backend = runtime.backend
    start = time.time()
    try:
        raw = args[: task.n_inputs]
        if task.input_index:
            raw = tuple(x if i is None else x[i] for x, i in zip(raw, task.input_index))
        if backend.name == "host":  # host memory is Dask's to account: nothing to adopt or charge
            value = _with_timeout(task, runtime, raw)
        else:
            inputs = tuple(backend.adopt(x, task.name) for x in raw)
            value = backend.execute(task.name, lambda: _with_timeout(task, runtime, inputs))
    except Exception as exc:
        runtime.record(task.run, task.name, "failed", runtime.config.name, start, 0.0, 0,
                       error=f"{type(exc).__name__}: {exc}")
        if isinstance(exc, OrchestratorError):
            raise
        raise OpFailedError(task.name, runtime.config.name, f"{type(exc).__name__}: {exc}",
                            _user_origin(exc.__traceback__)) from None
    stop = time.time()
    runtime.record(task.run, task.name, "op", runtime.config.name, start, stop - start, _nbytes(value))
    if task.log:
        definition = lookup(task.kind)
        worker.log_event(LOG_TOPIC, f"Executing op {definition.tf_name if definition else task.kind} "
                                    f"in device {worker.name}")
    return value


def _with_timeout(task: OpTask, runtime: Runtime, inputs: tuple[Any, ...]) -> Any:
    if task.timeout is None:
        return kernel(task, runtime, inputs)
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"op-{task.name}")
    future = pool.submit(kernel, task, runtime, inputs)
    try:
        return future.result(timeout=task.timeout)
    except concurrent.futures.TimeoutError:
        # A thread cannot be killed; the late result is dropped and the run fails now.
        raise OpTimeoutError(task.name, runtime.config.name, task.timeout) from None
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


def kernel(task: OpTask, runtime: Runtime, inputs: tuple[Any, ...]) -> Any:
    xp = runtime.backend.xp
    kind, params = task.kind, task.params
    if kind == "call":
        return _call(task, runtime, inputs)
    if kind == "load":
        array = load_array(os.path.join(task.base_dir, params["path"]), params)
        if "shape" in params and tuple(array.shape) != tuple(params["shape"]):
            raise RunError(f"op '{task.name}': {params['path']} holds an array of shape {list(array.shape)}, "
                           f"but the spec declares shape {list(params['shape'])}")
        return xp.asarray(array)
    if kind == "save":
        save_array(os.path.join(task.base_dir, params["path"]), runtime.backend.to_host(inputs[0]), params)
        return inputs[0]
    definition = lookup(kind)
    if definition is None:
        raise RunError(f"op '{task.name}': unknown op type '{kind}'")
    merged = {**params, "op": kind} if kind in ("sum", "mean") else params
    if kind.startswith("random."):
        # the copy indices in a construct's names (towers/1/x) pick the copy's own stream
        stream = tuple(int(part) for part in task.name.split("/") if part.isdigit())
        return definition.compute(xp, merged, step=task.step, stream=stream)
    result = definition.compute(xp, merged, *inputs)
    return tuple(result) if isinstance(result, (list, tuple)) else xp.asarray(result)


def _call(task: OpTask, runtime: Runtime, inputs: tuple[Any, ...]) -> Any:
    fn_path = str(task.params["fn"])
    module_name, _, fn_name = fn_path.partition(":")
    with runtime.lock:
        if task.base_dir not in runtime.user_paths:
            sys.path.insert(0, task.base_dir)
            runtime.user_paths.add(task.base_dir)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise OpFailedError(task.name, runtime.config.name,
                            f"cannot import module '{module_name}' for fn '{fn_path}': {exc}",
                            f"looked in {task.base_dir} and the Python path") from None
    fn = getattr(module, fn_name, None)
    if fn is None:
        raise OpFailedError(task.name, runtime.config.name,
                            f"module '{module_name}' has no function '{fn_name}'", module.__file__ or "")
    xp = runtime.backend.xp
    device_inputs = [runtime.backend.to_device(x, task.name) if x is not None else x for x in inputs]
    kwargs = dict(task.params.get("params") or {})
    if task.input_keys is not None:
        kwargs.update(zip(task.input_keys, device_inputs))
        result = fn(xp=xp, **kwargs)
    else:
        result = fn(*device_inputs, xp=xp, **kwargs)
    if task.outputs > 1:
        if not isinstance(result, (tuple, list)) or len(result) != task.outputs:
            raise OpFailedError(task.name, runtime.config.name,
                                f"fn '{fn_path}' must return {task.outputs} arrays, got {type(result).__name__}")
        return tuple(xp.asarray(r) for r in result)
    return xp.asarray(result)


def load_array(path: str, params: Mapping[str, Any]) -> np.ndarray:
    fmt = params.get("format") or ("csv" if path.endswith(".csv") else "npy")
    dtype = params.get("dtype")
    if fmt == "npy":
        arr = np.load(path, allow_pickle=False)
        return arr.astype(dtype) if dtype else arr
    return np.loadtxt(path, delimiter=params.get("delimiter", ","), skiprows=int(params.get("header", 0)),
                      dtype=dtype or "float64", ndmin=1)


def save_array(path: str, value: Any, params: Mapping[str, Any]) -> None:
    from ..atomic import atomic_open

    fmt = params.get("format") or ("csv" if path.endswith(".csv") else "npy")
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with atomic_open(path, "wb") as handle:
        if fmt == "csv":
            np.savetxt(handle, np.atleast_1d(np.asarray(value)), delimiter=",")
        else:
            np.save(handle, np.asarray(value), allow_pickle=False)


def move(name: str, device: str, run: str, value: Any) -> Any:
    """Receive a value from another device: one explicit copy per consuming device."""
    worker, runtime = _runtime()
    start = time.time()
    moved = runtime.backend.to_device(value, name)
    runtime.record(run, name, "move", str(worker.name), start, time.time() - start, _nbytes(moved))
    return moved


def token(*_: Any) -> None:
    """A control edge: done when its producer is, moving no data."""
    return None


def to_host(value: Any) -> Any:
    _, runtime = _runtime()
    return runtime.backend.to_host(value)


def drain_records(dask_worker: Any, run: str) -> dict[str, Any]:
    """Run on every worker (``Client.run``) after a run: its records of that run, and its memory."""
    worker, runtime = _runtime(dask_worker)
    with runtime.lock:
        mine = [r for key, r in runtime.records.items() if key[0] == run]
        for key in [k for k in runtime.records if k[0] == run]:
            del runtime.records[key]
    # what Dask itself says it moved into this worker for this run (its transfer log)
    received = [(key, int(nbytes)) for entry in getattr(worker, "transfer_incoming_log", ())
                for key, nbytes in entry.get("keys", {}).items() if run in str(key)]
    return {"ran_on": str(worker.name), "records": mine, "memory": runtime.backend.stats(),
            "created": runtime.created, "received": received}
