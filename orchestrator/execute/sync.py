"""In-process runs (``run --sync``): every op in this process, in plan order, with no cluster.

Policy. Dask's synchronous scheduler (``dask.local.get_sync``) is the model:
one thread, the caller's, runs every task of a graph, each after its
dependencies, and a task's exception is raised where it happened — so
``breakpoint()`` in a ``call`` function stops in the user's frame, with the
run's real values, and a quick check pays no cluster start. The graphs are
the very ones the cluster runs (``compile``), driven by the same loop driver
(:class:`~orchestrator.execute.loops.StagedRun`; a plan without loops is
one stage of it, one graph) through the same submitter protocol; only the
submitter differs: :meth:`SyncRunner.submit` runs a graph at once (the tasks
its wanted keys need, as the scheduler culls a graph) and returns its values
as finished "futures" (:class:`Done`). The graph is walked here rather than
handed to ``get_sync``, for three things ``get_sync`` does not do:

* **Plan order.** ``get_sync`` orders tasks by ``dask.order`` (least memory
  held), which need not be the order ``orchestrate plan`` shows and the
  memory planner assumes. Here tasks run in the order the compiler added
  them — the plan's order, step after step — each after its dependencies.
* **Devices.** A task runs in the :class:`~orchestrator.runtime.Runtime` of
  the device it is pinned to (its identity resource; on ``GPU:*``, a GPU of
  its task holding one of its inputs, else the next in turn, as Dask prefers
  data locality). the ``runtime`` package finds it through the worker lookup
  (:func:`~orchestrator.runtime.bind`), bound here for the run to an
  :class:`InProcessDevice` standing for the device's worker: the same
  backend, memory accounting, records and placement log as on a worker.
  GPUs are always simulated: every device shares this process, and CuPy
  would put them all on one GPU. A value read on another device arrives as
  a copy, as a Dask transfer delivers one, charged to the reader's device
  and logged as a transfer; it is dropped when that device's last reader of
  it is done.
* **Release.** A value is dropped when nothing reads it any more, as Dask
  releases a key: inside a graph after its last reader (unless the driver
  asked for it), across graphs when the driver drops its last future (values
  of earlier graphs are found through a weak map of live futures). So a
  simulated GPU gets memory back where it does on the cluster, and an op
  over its device's cap fails the same way, naming the op and the device.

Loops. A gang window is one task per device for many steps, its devices
exchanging values in the middle of their tasks: one thread cannot run those
tasks one after the other (the first would wait for a value the second has
not made yet). So a loop that would run in gang windows runs here as the
cluster runs a loop that may not: a task per device partition per step
(``compile_window``), the steps in order, the same values (the compiler
keeps both forms equal). That needs no in-process courier; ``nested``,
``partition`` and ``op`` loops run as they would on the cluster.

State. For one run: each device's :class:`InProcessDevice` (its runtime is
made for the run and dropped after it), a weak map from key to the live
:class:`Done` holding its value and device, and the turn of ``GPU:*`` tasks.
When the run ends, the previous worker lookup of ``runtime`` is put back, and
so is ``sys.path``; the spec's own modules imported by the run are forgotten,
so the next run imports them afresh, as a new cluster's workers would.
"""

from __future__ import annotations

import collections
import contextlib
import importlib
import os
import sys
import time
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ..devices import ANY, DeviceSpec
from ..errors import OrchestratorError, RunError
from ..compile.records import CompiledGraph
from ..plan.records import IN_PROCESS, Plan
from .records import RunResult, RunSettings
from ..spec.records import Loop
from ..runtime import (LOG_TOPIC, RUNTIME_ATTRIBUTE, Runtime, bind, device_resource, discard_saves, drain_records,
                       task_resource)
from .cluster import device_configs
from .loops import StagedRun
from .outputs import flag_writes, refuse_overwrites
from .run import Echo, Runner


class InProcessDevice:
    """Stands for one device's Dask worker: what ``runtime`` asks of a worker (name, runtime, log, transfers)."""

    def __init__(self, runtime: Runtime, echo: Echo):
        self.name = runtime.config.name
        setattr(self, RUNTIME_ATTRIBUTE, runtime)
        self.echo = echo
        # shaped as Dask's worker transfer log, which drain_records reads (bounded as Dask bounds it)
        self.transfer_incoming_log: collections.deque[dict[str, Any]] = collections.deque(maxlen=100_000)

    def log_event(self, topic: str, message: Any) -> None:
        if topic == LOG_TOPIC:  # a worker sends the placement log to the client; here the client is this process
            self.echo(str(message))


@dataclass(frozen=True)
class Done:
    """A value computed in this process, shaped as the Dask future the loop driver and the cache use."""

    key: str
    value: Any
    device: str
    status: str = "finished"

    def result(self, timeout: float | None = None) -> Any:
        return self.value

    def add_done_callback(self, callback: Callable[[Done], None]) -> None:
        callback(self)


def _copy(value: Any) -> Any:
    """What a transfer delivers: the reader's own arrays (a tuple element by element)."""
    if isinstance(value, tuple):
        return tuple(_copy(v) for v in value)
    return value.copy() if isinstance(value, np.ndarray) else value


def _nbytes(value: Any) -> int:
    if isinstance(value, tuple):
        return sum(_nbytes(v) for v in value)
    return int(getattr(value, "nbytes", 0))


def in_order(tasks: Mapping[str, Any], wanted: Sequence[str]) -> list[str]:
    """The tasks ``wanted`` needs, each after its dependencies, otherwise in the graph's order (the plan's)."""
    position = {key: i for i, key in enumerate(tasks)}
    needed: set[str] = set()
    stack = [key for key in wanted if key in tasks]
    while stack:
        key = stack.pop()
        if key not in needed:
            needed.add(key)
            stack.extend(d for d in tasks[key].dependencies if d in tasks)
    order: list[str] = []
    placed: set[str] = set()
    for root in (key for key in tasks if key in needed):
        todo: list[tuple[str, bool]] = [(root, False)]
        while todo:  # depth first without recursion: a window of many steps is a deep chain
            key, expanded = todo.pop()
            if key in placed:
                continue
            if expanded:
                placed.add(key)
                order.append(key)
                continue
            todo.append((key, True))
            deps = sorted((d for d in tasks[key].dependencies if d in tasks and d not in placed),
                          key=position.__getitem__, reverse=True)
            todo.extend((d, False) for d in deps)
    return order


@contextlib.contextmanager
def _own_imports(base_dir: str) -> Iterator[None]:
    """The spec's modules imported by this run are forgotten after it, as a cluster's workers exit with theirs.

    Else a second run in this process would run the first one's code after an edit (while the cache, which
    reads the source, would file its values under the new code's key). ``sys.path`` is put back too.
    """
    path, known = list(sys.path), set(sys.modules)
    importlib.invalidate_caches()  # a module written since this process last listed its folder is found
    try:
        yield
    finally:
        folder = os.path.join(base_dir, "")
        for name in [n for n in sys.modules if n not in known]:
            file = getattr(sys.modules[name], "__file__", None)
            if file and os.path.abspath(file).startswith(folder):
                del sys.modules[name]
        sys.path[:] = path


class _StepsInOrder(StagedRun):
    """The loop driver, with steps in order where the cluster would run gang windows (see the module's essay):
    as the plan decided for this process (``IN_PROCESS``)."""

    def window_mode(self, loop: Loop) -> str:
        granularity = IN_PROCESS if self.options.granularity == "partition" else self.options.granularity
        planned = self.plan.loop_mode(loop.name, granularity)
        self.modes[loop.name] = planned.describe()
        return planned.mode


class SyncRunner(Runner):
    """Runs a plan in this process; the submitter of :class:`StagedRun` runs each graph as it is submitted."""

    def __init__(self, plan: Plan, settings: RunSettings, echo: Echo):
        if settings.cache_dir:  # user calls lend this process the spec's folder while cache writes go on
            settings = replace(settings, cache_dir=os.path.abspath(settings.cache_dir))
        super().__init__(plan, settings, echo)
        self.devices: dict[str, InProcessDevice] = {}
        self.current: InProcessDevice | None = None
        self.live: weakref.WeakValueDictionary[str, Done] = weakref.WeakValueDictionary()
        self.pinned: dict[str, str] = {}  # identity resource -> device
        self.gpus_of: dict[str, list[str]] = {}  # task resource -> the GPUs of that task
        self.turn = 0
        self.scattered = 0

    def worker(self) -> InProcessDevice:
        assert self.current is not None, "no task of this in-process run is running"
        return self.current

    # ------------------------------------------------------------------ run

    def run(self) -> RunResult:
        refuse_overwrites(self.spec, self.output_dir, self.base_dir, flag_writes(self.settings))
        gpus = [d for d in self.spec.cluster.devices if d.is_gpu]
        asked = self.settings.gpu_backend or self.spec.cluster.gpu_backend
        self.backend_why = ("no GPUs in the spec" if not gpus else "--sync simulates every GPU in this process" +
                            (f" (the spec asks for {asked})" if asked not in ("simulated", "auto") else ""))
        self.echo(f"running '{self.spec.name}' in this process (--sync: no cluster, every op in plan order; "
                  f"{len(self.spec.cluster.devices)} devices, GPU backend: simulated"
                  f"{' — simulated GPUs' if gpus else ''}; {self.backend_why})")
        for name, config in device_configs(self.spec.cluster, "simulated").items():
            self.devices[name] = InProcessDevice(Runtime.for_device(config), self.echo)
        for planned in self.spec.cluster.devices:
            self.pinned[device_resource(planned.name)] = planned.name
            if planned.is_gpu:
                self.gpus_of.setdefault(task_resource(planned.spec), []).append(planned.name)
        previous = bind(self.worker)
        try:
            with _own_imports(self.base_dir):
                return self._run_here()
        finally:
            bind(previous)
            if self.cache is not None:  # what finished is written even when the run failed (for --resume)
                self.cache.finish(self.saves_settled)
            if not self.saves_settled:
                for stand_in in self.devices.values():
                    discard_saves(stand_in, run=self.token)

    def _run_here(self) -> RunResult:
        started = time.time()
        self.cache = self.open_cache()
        # the loop driver runs a plan without loops as one stage: one graph, as the cluster's runner compiles it
        values = self.run_staged(_StepsInOrder(self.plan, self.options(), self, cache=self.cache))
        elapsed = time.time() - started
        collecting = time.perf_counter()
        drained = {name: drain_records(device, run=self.token) for name, device in self.devices.items()}
        report = self._report(drained, started, elapsed)
        self.phases["collect records"] = time.perf_counter() - collecting
        report = replace(report, phases_seconds=dict(self.phases), mode="sync")
        return self.finish(report, values, lambda fn, **kw: [fn(device, **kw) for device in self.devices.values()],
                           None)

    # ------------------------------------------------------------------ the submitter of StagedRun

    def submit(self, compiled: CompiledGraph, keys: Sequence[str], progress: bool = False) -> dict[str, Any]:
        """Run a graph now; finished futures for ``keys`` and for its sinks. An op's error is raised here."""
        done = self.execute(compiled, self.account(compiled, keys))
        self.live.update(done)
        return dict(done)

    def gather(self, output_keys: Mapping[str, str], futures: Mapping[str, Any],
               sinks: Sequence[str] = ()) -> dict[str, Any]:
        # the client's own copies, as Dask's gather gives: a metric kept by the driver holds no device's memory
        return {name: _copy(futures[key].result()) for name, key in output_keys.items()}

    def wait_for(self, futures: Sequence[Any]) -> None:
        """Nothing to wait for: every graph ran when it was submitted, and raised then."""

    def abort(self, error: Exception) -> None:
        """Nothing waits for another device's value in this process: there is nobody to wake."""

    def abort_loop(self, loop: int, why: str) -> None:
        """Nothing waits in this process (see ``abort``)."""

    def scatter(self, value: Any, device: DeviceSpec) -> Any:
        self.scattered += 1
        name = self.choose(device, []) if device.device_index == ANY else device.to_string()
        done = Done(f"scatter-{self.token}-{self.scattered}", value, name)
        self.live[done.key] = done
        return done

    # ------------------------------------------------------------------ running a graph

    def choose(self, device: DeviceSpec, near: Sequence[str]) -> str:
        """A GPU of ``device``'s task for a ``GPU:*`` task: one holding an input, else the next in turn."""
        gpus = self.gpus_of.get(task_resource(device), [])
        if not gpus:
            raise RunError(f"no GPU of {device.task_spec().to_string()} for a task on {device.to_string()}")
        local = next((d for d in near if d in gpus), None)
        if local is not None:
            return local
        self.turn += 1
        return gpus[(self.turn - 1) % len(gpus)]

    def device_of(self, compiled: CompiledGraph, key: str, near: Sequence[str]) -> str:
        resources = compiled.resources.get(key, {})
        for resource in resources:
            if resource in self.pinned:
                return self.pinned[resource]
        task = next((r for r in resources if r in self.gpus_of), None)
        if task is None:
            raise RunError(f"internal: task {key} asks for no device of this spec ({dict(resources)})")
        return self.choose(DeviceSpec.parse(self.gpus_of[task][0]), near)

    def execute(self, compiled: CompiledGraph, wanted: Sequence[str]) -> dict[str, Done]:
        """Run the tasks ``wanted`` needs, in plan order, each in its device's runtime."""
        # a key an earlier graph made and the driver still holds is read, not made again (a move shared by loops)
        made = {key: done for key in compiled.tasks if (done := self.live.get(key)) is not None}  # held while we run
        tasks = {key: task for key, task in compiled.tasks.items() if key not in made}
        order = in_order(tasks, wanted)
        where: dict[str, str] = {}
        for key in order:
            deps = sorted(tasks[key].dependencies)
            where[key] = self.device_of(compiled, key, [self.location(d, where) for d in deps])
        readers = collections.Counter(d for key in order for d in tasks[key].dependencies)
        readers_at = collections.Counter((d, where[key]) for key in order for d in tasks[key].dependencies)
        values: dict[str, Any] = {}
        copies: dict[tuple[str, str], Any] = {}  # (key, device): a value that crossed to that device
        keep = set(wanted)
        for key in order:
            task, here = tasks[key], where[key]
            inputs = {d: self.arrive(d, here, values, where, copies) for d in task.dependencies}
            values[key] = self.call(compiled, key, task, inputs, here)
            del inputs
            for d in task.dependencies:
                readers[d] -= 1
                readers_at[(d, here)] -= 1
                if not readers_at[(d, here)]:
                    copies.pop((d, here), None)
                if not readers[d] and d not in keep:
                    values.pop(d, None)
        return {key: Done(key, values[key], where[key]) if key in values else self.found(key) for key in wanted}

    def found(self, key: str) -> Done:
        done = self.live.get(key)
        if done is None:  # the cluster would have forgotten it too: the driver held no future for it
            raise RunError(f"internal: value {key} of an earlier graph was released before a task read it")
        return done

    def location(self, key: str, where: Mapping[str, str]) -> str:
        return where[key] if key in where else self.found(key).device

    def arrive(self, key: str, here: str, values: Mapping[str, Any], where: Mapping[str, str],
               copies: dict[tuple[str, str], Any]) -> Any:
        """``key``'s value for a task on ``here``: itself on its own device, else a copy made once per device."""
        source = self.location(key, where)
        value = values[key] if key in values else self.found(key).value
        if source == here:
            return value
        if (key, here) not in copies:
            start = time.time()
            copies[(key, here)] = moved = _copy(value)
            self.devices[here].transfer_incoming_log.append(
                {"keys": {key: _nbytes(moved)}, "start": start, "stop": time.time(), "who": source})
        return copies[(key, here)]

    def call(self, compiled: CompiledGraph, key: str, task: Any, inputs: Mapping[str, Any], here: str) -> Any:
        """One task on its device, retried as Dask would (``retries``); an error names the op and the device."""
        attempts = compiled.retries.get(key, 0) + 1
        for attempt in range(attempts):
            self.current = self.devices[here]
            try:
                return task(inputs)
            except Exception as exc:
                if attempt + 1 < attempts:
                    continue
                if isinstance(exc, OrchestratorError):
                    raise
                raise self.failure(key, here, exc) from None
            finally:
                self.current = None
        raise AssertionError("unreachable: the last attempt returns or raises")

    def failure(self, key: str, device: str, exc: Exception) -> RunError:
        """A helper task's error (a move, a getitem), in the words the cluster's translation uses."""
        op = self.key_owner.get(key, "?")
        group = self.partition_ops.get(key, ())
        shown = ", ".join(group[:4]) + (", ..." if len(group) > 4 else "")
        who = f"op '{op}'" if len(group) <= 1 else f"op '{op}' (or another of its partition: {shown})"
        return RunError(f"{who} on {device} failed: {type(exc).__name__}: {exc}")


def run_in_process(plan: Plan, settings: RunSettings | None = None, echo: Echo | None = None) -> RunResult:
    """Run ``plan`` in this process (``settings.sync``): no cluster, every op in plan order."""
    chosen = settings or RunSettings(sync=True)
    return SyncRunner(plan, chosen, echo or (lambda text: print(text, flush=True))).run()
