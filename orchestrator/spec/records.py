"""The records of a checked spec: what ``spec`` hands to every later stage.

A :class:`Document` (the file's data with a way back to line and column) becomes a :class:`Spec`:
the cluster and its devices, placement rules, plain ops (constructs expanded), loops, outputs,
run options and the effective parameters. Frozen; later stages read them and add nothing.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any

from ..devices import DeviceSpec, GpuId
from ..errors import Diagnostic, Severity, YamlPath
from ..ops.values import ValueInfo
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

    def job(self, name: str | None) -> Job | None:
        return next((j for j in self.jobs if j.name == name), None)

    def device(self, name: str) -> Device | None:
        return self._by_name.get(name)

    @property
    def _by_name(self) -> dict[str, Device]:
        cache = self.__dict__.get("_device_index")
        if cache is None:
            cache = {d.name: d for d in self.devices}
            object.__setattr__(self, "_device_index", cache)
        return cache

    def matching(self, pattern: DeviceSpec) -> tuple[Device, ...]:
        return tuple(d for d in self.devices if pattern.matches(d.spec))


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
class OpRef:
    """A reference to an op's value: ``name`` or ``name:i`` for output i."""

    op: str
    output: int | None = None

    @classmethod
    def parse(cls, text: str) -> OpRef:
        """``name`` or ``name:i`` (output i of a multi-output op)."""
        name, sep, index = text.rpartition(":")
        if sep and index.isdigit() and name:
            return cls(name, int(index))
        return cls(text)

    def __str__(self) -> str:
        return self.op if self.output is None else f"{self.op}:{self.output}"


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


@dataclass(frozen=True)
class Output:
    ref: OpRef
    target: str  # a path, or "-" for stdout
    path: YamlPath


@dataclass(frozen=True)
class StateVar:
    name: str
    init: OpRef
    placeholder: str  # the body's state op
    update: OpRef


@dataclass(frozen=True)
class Checkpoint:
    every: int
    keep: int = 2
    path: str | None = None  # a directory relative to the output directory; None: the cache directory's
    best_only: bool = False  # write only when the monitored metric improved (Keras's save_best_only)
    monitor: str | None = None  # the metric best_only watches: as written, else the early stop's metric
    mode: str = "min"  # lower is better ("max": higher); as written, else the early stop's
    every_epochs: int | None = None  # every: {epochs: N}: ``every`` is 0 until validation knows an epoch's steps


@dataclass(frozen=True)
class Evaluation:
    """A body run every ``every`` steps (and after the last) on the states as they are then."""

    every: int
    body: tuple[str, ...]  # its ops (``LOOP/eval/<op>``), planned like the others, run by the loop's driver
    metrics: tuple[tuple[str, OpRef], ...]
    every_epochs: int | None = None  # every: {epochs: N}: ``every`` is 0 until validation knows an epoch's steps


@dataclass(frozen=True)
class Stopping:
    """When a loop stops before its last step: Keras's EarlyStopping, or a condition; judged at evaluations."""

    metric: str
    mode: str = "min"  # early stop: lower is better ("max": higher)
    patience: int | None = None  # None: a condition (below/above), not early stopping
    min_delta: float = 0.0
    baseline: float | None = None
    start_from: int = 0  # evaluations ignored at the start
    restore_best: bool = False
    below: float | None = None
    above: float | None = None


@dataclass(frozen=True)
class Batches:
    """Minibatches: each ``data`` name in the body is this step's rows of an outer value."""

    data: tuple[tuple[str, OpRef], ...]  # (body op made for it, the outer value)
    size: int
    epochs: int | None
    shuffle: bool | str = True  # True: a new order each epoch; "once": one order for every epoch; False: in order
    seed: int = 0
    drop_last: bool = False
    across_epochs: bool = False  # the epochs one stream, batches cut from it whole (tf.data repeat, then batch)


@dataclass(frozen=True)
class Loop:
    """An ``iterate`` construct: its body ops run ``steps`` times with carried state."""

    name: str
    steps: int
    window: int
    state: tuple[StateVar, ...]
    body: tuple[str, ...]
    metrics: tuple[tuple[str, OpRef], ...]
    path: YamlPath
    checkpoint: Checkpoint | None = None
    evaluation: Evaluation | None = None
    stopping: tuple[Stopping, ...] = ()
    batches: Batches | None = None
    rungs: tuple[int, ...] = ()  # a sweep rule's decision steps (halving, median): its windows end there too

    @property
    def evaluated(self) -> tuple[str, ...]:
        """The ops of its evaluation body (run by its driver between windows, never as steps)."""
        return self.evaluation.body if self.evaluation is not None else ()

    def window_starts(self) -> tuple[int, ...]:
        """The first step of each window: every ``window`` steps, and a window ends at every checkpoint and
        evaluation step (the driver reads the states there)."""
        cuts = set(range(0, self.steps, self.window)) | {r for r in self.rungs if 0 < r < self.steps}
        for every in (self.checkpoint.every if self.checkpoint else 0, self.evaluation.every if self.evaluation else 0):
            if every:
                cuts |= set(range(every, self.steps, every))
        return tuple(sorted(cuts))

    @property
    def exports(self) -> tuple[str, ...]:
        """``NAME.state`` and ``NAME.metric``: values the driver resolves after the loop, never tasks."""
        evaluated = self.evaluation.metrics if self.evaluation is not None else ()
        return (*(f"{self.name}.{var.name}" for var in self.state), *(f"{self.name}.{m}" for m, _ in self.metrics),
                *(f"{self.name}.{m}" for m, _ in evaluated))


@dataclass(frozen=True)
class RunOptions:
    output_dir: str | None = None
    allow_absolute_paths: bool = False
    retries: int = 0
    timeout: float | None = None
    no_workers_timeout: float = 5.0


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

    def value(self, ref: OpRef) -> ValueInfo:
        infos = self.values.get(ref.op, ())
        index = ref.output or 0
        return infos[index] if index < len(infos) else ValueInfo(None, None)
