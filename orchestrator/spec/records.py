"""The records of a checked spec: what ``spec`` hands to every later stage.

A :class:`Document` (the file's data with a way back to line and column) becomes a :class:`Spec`:
the cluster and its devices, placement rules, plain ops (constructs expanded), loops, outputs,
run options and the effective parameters. Frozen; later stages read them and add nothing.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, replace
from fnmatch import fnmatchcase
from typing import Any

from ..devices import DeviceSpec, GpuId
from ..errors import Diagnostic, Severity, YamlPath
from ..ops.values import ValueInfo
from .loops import (Batches as Batches, Checkpoint as Checkpoint, Evaluation as Evaluation, Loop as Loop,
                    StateVar as StateVar, Stopping as Stopping)
from .refs import OpRef as OpRef
from .scopes import TOP, Scope as Scope
from .searches import Halving as Halving, Median as Median, Search as Search, SweepCopy as SweepCopy, Table as Table


Position = tuple[int, int]


@dataclass(frozen=True)
class Document:
    """A loaded YAML file: plain data plus a lazy way back to line and column.

    ``locate_fn(path, key)`` returns the 1-based (line, column) of the node at
    ``path`` (of its key when ``key`` is true and the last part is a mapping
    key); a path that does not exist resolves to its nearest existing ancestor.
    It is only called when a diagnostic needs a position.
    """

    file: str
    data: Mapping[str, Any]
    locate_fn: Callable[[YamlPath, bool], Position] = field(compare=False, repr=False)
    directory: str = "."

    def locate(self, path: YamlPath, key: bool = False) -> Position:
        return self.locate_fn(tuple(path), key)

    def diagnostic(
        self,
        code: str,
        path: YamlPath,
        message: str,
        hint: str = "",
        severity: Severity = "error",
        key: bool = False,
    ) -> Diagnostic:
        line, column = self.locate(path, key)
        return Diagnostic(code, self.file, line, column, tuple(path), message, hint, severity)


@dataclass(frozen=True)
class GpuMemory:
    """Memory settings of each logical GPU of a job (TF per-process GPU options)."""

    limit: int | None = None
    fraction: float | None = None
    growth: bool = False
    total: int = 16 * 2**30

    def per_logical_gpu(self, virtual_gpus: int) -> int:
        """The enforced cap of one logical GPU: explicit limit, else its share of the fraction/total."""
        if self.limit is not None:
            return self.limit
        share = self.fraction if self.fraction is not None else 1.0
        return int(self.total * share) // virtual_gpus

    @property
    def reserve_at_start(self) -> bool:
        """TF's default: a fixed limit without growth is allocated up front."""
        return not self.growth and (self.limit is not None or self.fraction is not None)


@dataclass(frozen=True)
class Job:
    name: str
    tasks: int
    addresses: tuple[str, ...]
    cpu_threads: int
    memory_limit: int | None
    physical_gpus: tuple[GpuId, ...]  # CUDA ordinals, or GPU/MIG UUIDs
    virtual_gpus: int
    gpu_memory: GpuMemory
    path: YamlPath
    gpu_threads: int = 1  # a GPU worker's threads: a sweep's copies may share it, nothing else does
    processes: str = "device"  # "device": a worker process per device; "host": one per task, a thread per device

    @property
    def logical_gpus(self) -> int:
        return len(self.physical_gpus) * self.virtual_gpus


@dataclass(frozen=True)
class Device:
    """One device of the cluster; on Dask, one worker process named ``name``."""

    spec: DeviceSpec
    threads: int
    memory_limit: int | None
    physical_gpu: GpuId | None = None
    reserve_at_start: bool = False
    limit_declared: bool = False  # the user set this limit (a GPU always has one: its total)

    @property
    def name(self) -> str:
        return self.spec.to_string()

    @property
    def is_gpu(self) -> bool:
        return self.spec.device_type == "GPU"


@dataclass(frozen=True)
class Tls:
    ca_file: str
    cert: str
    key: str


@dataclass(frozen=True)
class Cluster:
    jobs: tuple[Job, ...]
    devices: tuple[Device, ...]
    default_job: str
    scheduler: str = "local"
    gpu_backend: str = "auto"
    dashboard: str | None = ":0"
    tls: Tls | None = None
    # Devices taken out of ``devices`` for a re-plan (``plan --without``): the jobs still count them, so
    # a name stays what it was; patterns, defaults and the placer skip them.
    lost: tuple[Device, ...] = ()
    before_loss: tuple[Device, ...] = ()  # every device, lost or not, in order (empty when none is lost)

    def job(self, name: str | None) -> Job | None:
        return next((j for j in self.jobs if j.name == name), None)

    def device(self, name: str) -> Device | None:
        return self._by_name.get(name)

    def worker_name(self, device: Device) -> str:
        """The Dask worker standing for ``device``: its own (``processes: device``); with ``processes: host``, on
        the embedded cluster (``scheduler: local``) the one worker ``/host:local`` of every such task (they all
        run on this machine), on a cluster of one's own its task's (``/job:J/replica:0/task:N``, one process per
        task as ``orchestrate worker`` starts it)."""
        job = self.job(device.spec.job)
        if job is None or job.processes != "host":
            return device.name
        return "/host:local" if self.scheduler == "local" else device.spec.task_spec().to_string()

    def standing_for(self, device: str) -> str:
        """The name of the Dask worker standing for the device named ``device`` (:meth:`worker_name`); a name
        this cluster does not know stands for itself."""
        found = self._by_name.get(device)
        return self.worker_name(found) if found is not None else device

    def workers(self) -> dict[str, tuple[Device, ...]]:
        """Each Dask worker's name and the devices it stands for, in device order."""
        out: dict[str, tuple[Device, ...]] = {}
        for d in self.devices:
            name = self.worker_name(d)
            out[name] = (*out.get(name, ()), d)
        return out

    @property
    def _by_name(self) -> dict[str, Device]:
        cache = self.__dict__.get("_device_index")
        if cache is None:
            cache = {d.name: d for d in self.devices}
            object.__setattr__(self, "_device_index", cache)
        return cache

    def matching(self, pattern: DeviceSpec) -> tuple[Device, ...]:
        return tuple(d for d in self.devices if pattern.matches(d.spec))

    def without(self, names: Collection[str]) -> Cluster:
        """The cluster less the devices named (canonical names): they move to ``lost``."""
        gone = set(names)
        return replace(self, devices=tuple(d for d in self.devices if d.name not in gone),
                       lost=(*self.lost, *(d for d in self.devices if d.name in gone)),
                       before_loss=self.before_loss or self.devices)

    def matching_before_loss(self, pattern: DeviceSpec) -> tuple[Device, ...]:
        """``matching`` over every device, the lost ones included (a sweep's copies keep their turns)."""
        return tuple(d for d in self.before_loss or self.devices if pattern.matches(d.spec))

    def is_lost(self, pattern: DeviceSpec) -> bool:
        """Whether ``pattern`` names only lost devices: it matches one, and no device still there."""
        return any(pattern.matches(d.spec) for d in self.lost) and not self.matching(pattern)


@dataclass(frozen=True)
class Rule:
    index: int
    ops: tuple[str, ...]
    name_glob: str | None
    tags: tuple[str, ...]
    device: DeviceSpec | None
    round_robin: DeviceSpec | None
    by: str
    path: YamlPath

    def describe(self) -> str:
        return f"rule {self.index + 1}"

    def matches(self, op: Op) -> bool:
        """Every given criterion holds: op type, name glob (fnmatch), all tags."""
        if self.ops and op.kind not in self.ops:
            return False
        if self.name_glob is not None and not fnmatchcase(op.name, self.name_glob):
            return False
        return all(tag in op.tags for tag in self.tags)


@dataclass(frozen=True)
class PlacementConfig:
    default: DeviceSpec | None = None
    soft: bool = False
    log: bool = False
    rules: tuple[Rule, ...] = ()
    default_path: YamlPath = ("placement", "default")


@dataclass(frozen=True)
class DeviceRequest:
    """One link of an op's device chain: a device string and who wrote it."""

    spec: DeviceSpec
    source: str  # "op", "scope", "replicate 'towers'", ...
    path: YamlPath


@dataclass(frozen=True)
class Op:
    """A plain op after constructs are expanded."""

    name: str
    kind: str
    inputs: tuple[OpRef, ...]
    params: Mapping[str, Any]
    path: YamlPath
    input_keys: tuple[str, ...] | None = None  # parameter names when inputs were a mapping
    device_chain: tuple[DeviceRequest, ...] = ()
    after: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    retries: int = 0
    timeout: float | None = None
    colocate_with: OpRef | None = None  # made by constructs: run where this value lives
    group: str | None = None  # the construct that made it
    outputs: int = 1
    cache: bool | None = None  # the op's own ``cache:`` (None: its construct's, else the spec's)
    scope: Scope = TOP  # its loop and role there, its sweep copy: set by the construct that made it


@dataclass(frozen=True)
class Output:
    ref: OpRef
    target: str  # a path, or "-" for stdout
    path: YamlPath


ON_DEVICE_LOST = ("fail", "wait", "replan")  # ``run.on_device_lost``; the first is the default


@dataclass(frozen=True)
class RunOptions:
    output_dir: str | None = None
    allow_absolute_paths: bool = False
    retries: int = 0
    timeout: float | None = None
    no_workers_timeout: float = 5.0
    # What a run does about a lost device worker. ``fail`` by default: a run that went on with fewer
    # devices would change its timing and each device's memory under the user, so that is asked for.
    on_device_lost: str = "fail"
    # ``replan``: how long a lost device's worker may take to come back before the run re-plans without it
    replan_after: float = 20.0
    tensorboard: str | None = None  # run.tensorboard, run.mlflow: folders under the output directory (docs/tracking.md)
    mlflow: str | None = None
    # ``run.retry_on``: the exception types (names, or module.names) worth retrying; any other fails its op at
    # once. Empty: every exception is retried, up to the op's ``retries`` (Dask's own retries).
    retry_on: tuple[str, ...] = ()
    recover_on_exit_codes: tuple[int, ...] = ()  # a lost device worker's process exits worth recovering from (all: ())


@dataclass(frozen=True)
class Param:
    """A parameter's effective value: from its default or from ``--set``."""

    name: str
    type: str  # number, integer, string, boolean, list
    value: Any
    source: str  # "default", or the override as written: "--set lr=0.01"
    description: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "type": self.type, "value": self.value, "source": self.source,
                "description": self.description}


@dataclass(frozen=True)
class Spec:
    """A validated spec: typed cluster and placement, constructs expanded into plain ops."""

    document: Document = field(repr=False, compare=False)
    name: str
    cluster: Cluster
    placement: PlacementConfig
    ops: tuple[Op, ...]
    values: Mapping[str, tuple[ValueInfo, ...]]
    outputs: tuple[Output, ...] = ()
    loops: tuple[Loop, ...] = ()
    run: RunOptions = RunOptions()
    cache: bool = False  # the spec's ``cache:``
    cache_scopes: Mapping[str, bool] = field(default_factory=dict)  # construct name -> its ``cache:``
    params: tuple[Param, ...] = ()  # effective values of the ``params:`` block
    sweeps: tuple[Search, ...] = ()  # every sweep's copies (spec.searches)

    @property
    def file(self) -> str:
        return self.document.file

    def caches(self, name: str) -> bool:
        """Is the cache on for this op (or loop)? Its own ``cache:``, else its innermost construct's, else the spec's."""
        op = self.op_index.get(name)
        if op is not None and op.cache is not None:
            return op.cache
        holders = [c for c in self.cache_scopes if name.startswith((c + "/", c + ".")) or name == c]
        return self.cache_scopes[max(holders, key=len)] if holders else self.cache

    def op(self, name: str) -> Op:
        return self.op_index[name]

    @functools.cached_property
    def op_index(self) -> dict[str, Op]:
        """Every op by name (built once: planners look ops up 100k times)."""
        return {o.name: o for o in self.ops}

    @functools.cached_property
    def loop_index(self) -> dict[str, Loop]:
        return {loop.name: loop for loop in self.loops}

    def loop(self, name: str) -> Loop:
        return self.loop_index[name]

    def descendants(self, loop: Loop) -> list[Loop]:
        """The loops ``loop``'s steps run, at any depth (from ``Loop.children``)."""
        out, todo = [], list(loop.children)
        while todo:
            inner = self.loop_index[todo.pop()]
            out.append(inner)
            todo.extend(inner.children)
        return out

    def loop_exports(self, loop: Loop) -> tuple[str, ...]:
        """``loop``'s exports (``LOOP.NAME``) that are ops of the spec (placed, resolved after the loop)."""
        return tuple(name for name in loop.exports if name in self.op_index)

    def outermost_loop(self, name: str) -> Loop | None:
        """The outermost loop whose steps, evaluation or exports hold op ``name`` (None outside loops)."""
        op = self.op_index.get(name)
        loop = self.loop_index.get(op.scope.loop) if op is not None and op.scope.loop is not None else None
        while loop is not None and loop.parent is not None:
            loop = self.loop_index[loop.parent]
        return loop

    def inside(self, loop: Loop) -> set[str]:
        """Every op a step of ``loop`` runs, its inner loops' included, at any depth (not its own exports)."""
        loops = {loop.name, *(inner.name for inner in self.descendants(loop))}
        return {o.name for o in self.ops if o.scope.loop in loops
                and not (o.scope.loop == loop.name and o.scope.role == "export")}

    @functools.cached_property
    def search_index(self) -> dict[str, Search]:
        return {search.name: search for search in self.sweeps}

    def search(self, name: str) -> Search:
        return self.search_index[name]

    def value(self, ref: OpRef) -> ValueInfo:
        infos = self.values.get(ref.op, ())
        index = ref.output or 0
        return infos[index] if index < len(infos) else ValueInfo(None, None)
