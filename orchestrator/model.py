"""Frozen records passed between the stages.

Stages depend on these types and never on each other: ``load`` makes a
:class:`Document`, ``validate`` turns it into a :class:`Spec`, ``place`` makes a
:class:`Plan`, ``compile`` a :class:`CompiledGraph` (a loop window: a
:class:`CompiledWindow`), ``execute`` a :class:`RunResult` carrying a
:class:`RunReport`, run as :class:`RunSettings` say.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any

from .devices import DeviceSpec, GpuId
from .errors import Diagnostic, Severity, UsageError, YamlPath

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


# --------------------------------------------------------------------------- spec


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
class ValueInfo:
    """Inferred shape and dtype of one output; ``None`` where unknown."""

    shape: tuple[int, ...] | None
    dtype: str | None

    @property
    def nbytes(self) -> int | None:
        if self.shape is None or self.dtype is None:
            return None
        n = 1
        for dim in self.shape:
            n *= dim
        return n * _itemsize(self.dtype)

    def describe(self) -> str:
        shape = "?" if self.shape is None else list(self.shape)
        return f"{shape} {self.dtype or '?'}"


_ITEMSIZE = {"bool": 1, "int8": 1, "uint8": 1, "int16": 2, "uint16": 2, "float16": 2,
             "int32": 4, "uint32": 4, "float32": 4, "int64": 8, "uint64": 8, "float64": 8,
             "complex64": 8, "complex128": 16}


def _itemsize(dtype: str) -> int:
    return _ITEMSIZE[dtype]


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
class Loop:
    """An ``iterate`` construct: its body ops run ``steps`` times with carried state."""

    name: str
    steps: int
    window: int
    state: tuple[StateVar, ...]
    body: tuple[str, ...]
    metrics: tuple[tuple[str, OpRef], ...]
    path: YamlPath

    @property
    def exports(self) -> tuple[str, ...]:
        """``NAME.state`` and ``NAME.metric``: values the driver resolves after the loop, never tasks."""
        return (*(f"{self.name}.{var.name}" for var in self.state), *(f"{self.name}.{m}" for m, _ in self.metrics))


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


# --------------------------------------------------------------------------- plan


@dataclass(frozen=True)
class Transfer:
    """An input that crosses devices: moved once per consuming device."""

    ref: OpRef
    source: str
    target: str
    nbytes: int | None


@dataclass(frozen=True)
class Placement:
    """Where one op runs and why."""

    op: str
    kind: str
    device: DeviceSpec  # complete; device_index may be ANY (Dask chooses)
    sources: tuple[tuple[str, str], ...]  # (field, where it came from)
    fallback: str = ""  # soft placement: why the requested device was not used
    transfers: tuple[Transfer, ...] = ()
    out_bytes: int | None = 0

    @property
    def device_name(self) -> str:
        return self.device.to_string()

    def why(self) -> str:
        """``job, task from rule 1; device from op``: which link of the chain set each field."""
        return _why(self.sources, self.fallback)


@functools.lru_cache(maxsize=1024)
def _why(sources_in_order: tuple[tuple[str, str], ...], fallback: str) -> str:
    # cached: the ops of a big spec share a handful of source chains, and run reports list every op
    sources = dict(sources_in_order)
    shown = [(f, s) for f, s in sources_in_order if f not in ("device_type", "device_index")]
    if sources.get("device_type") == sources.get("device_index"):
        shown.append(("device", sources["device_type"]))
    else:
        shown += [("type", sources["device_type"]), ("index", sources["device_index"])]
    parts: dict[str, list[str]] = {}
    for fieldname, source in shown:
        parts.setdefault(source, []).append(fieldname)
    text = "; ".join(f"{', '.join(fields)} from {src}" for src, fields in parts.items())
    if fallback:
        text += f"; soft placement: {fallback}"
    return text


@dataclass(frozen=True)
class DeviceMemory:
    device: str
    ops: tuple[str, ...]
    peak: int
    peak_op: str | None
    limit: int | None
    unknown: tuple[str, ...]  # ops whose size is unknown (peak is then a lower bound)
    bytes_in: int
    bytes_out: int
    over_op: str | None = None  # the op whose allocation first takes the device over its limit
    largest: tuple[tuple[str, int], ...] = ()  # the largest values live at the peak: (value, bytes)

    @property
    def used_fraction(self) -> float | None:
        return None if not self.limit else self.peak / self.limit


@dataclass(frozen=True)
class Partition:
    """Ops of one device that run as one task, in this order (grouped by ``orchestrator.partition``)."""

    index: int
    device: DeviceSpec
    ops: tuple[str, ...]
    retries: int = 0

    @property
    def label(self) -> str:
        """``first op`` or ``first op+N``: how keys and pictures name it."""
        return self.ops[0] if len(self.ops) == 1 else f"{self.ops[0]}+{len(self.ops) - 1}"


@dataclass(frozen=True)
class LoopMode:
    """How a loop's steps become tasks at one granularity, and in words why."""

    mode: str  # "nested" | "gang" | "partition" | "op"
    why: str

    def describe(self) -> str:
        return f"{self.mode}: {self.why}"


@dataclass(frozen=True)
class TaskPlan:
    """How the ops become Dask tasks, decided once by planning (``orchestrator.partition.plan_tasks``).

    Memory, compile and the renderers read it; none of them partitions or judges a loop again.
    """

    partitions: tuple[Partition, ...]  # what a run's top level runs: ops outside loops, not loop exports
    loop_partitions: Mapping[str, tuple[Partition, ...]]  # loop -> one step of its own body (no inner loop's ops)
    loop_modes: Mapping[str, Mapping[str, LoopMode]]  # granularity -> loop -> how it runs

    @functools.cached_property
    def home(self) -> dict[str, Partition]:
        """The partition of every op that has one (loop states and exports have none)."""
        every = [*self.partitions, *(p for parts in self.loop_partitions.values() for p in parts)]
        return {name: part for part in every for name in part.ops}


@dataclass(frozen=True)
class Plan:
    spec: Spec
    placements: tuple[Placement, ...]
    memory: tuple[DeviceMemory, ...] = ()
    diagnostics: tuple[Diagnostic, ...] = ()
    tasks: TaskPlan | None = None  # set by plan_tasks, after placement and before the memory plan

    def placement(self, op: str) -> Placement:
        return self.placement_index[op]

    @functools.cached_property
    def placement_index(self) -> dict[str, Placement]:
        return {p.op: p for p in self.placements}

    @property
    def planned_tasks(self) -> TaskPlan:
        if self.tasks is None:  # a plan straight from place(): compiling it would have to guess
            raise ValueError("this plan's tasks are not planned: make plans with orchestrator.api.plan_file "
                             "(or orchestrator.partition.plan_tasks after place)")
        return self.tasks

    @property
    def partitions(self) -> tuple[Partition, ...]:
        return self.planned_tasks.partitions

    @property
    def loop_partitions(self) -> Mapping[str, tuple[Partition, ...]]:
        return self.planned_tasks.loop_partitions

    def loop_mode(self, loop: str, granularity: str = "partition") -> LoopMode:
        return self.planned_tasks.loop_modes[granularity][loop]


# --------------------------------------------------------------------------- compiled graphs


@dataclass(frozen=True)
class Located:
    """A value already placed: its Dask key, the device holding it, and for output i of a
    multi-output op (or a value a partition returns beside others), ``index`` i (the key then
    holds the whole tuple)."""

    key: str
    device: DeviceSpec
    index: int | None = None


@dataclass(frozen=True)
class CompiledGraph:
    """A Dask graph plus what the runner needs to read it back."""

    graph: Any  # dask.highlevelgraph.HighLevelGraph
    tasks: Mapping[str, Any]
    values: Mapping[str, Located]  # "op" / "op:i" -> where that value is
    output_keys: Mapping[str, str]  # output ref -> key to gather (host-side value)
    resources: Mapping[str, Mapping[str, float]]
    retries: Mapping[str, int]
    key_owner: Mapping[str, str]  # key -> op it belongs to (for errors naming the op)
    token: str
    moves: Mapping[tuple[str, str], str] = field(default_factory=dict)  # (source key, device) -> move key
    sink_keys: tuple[str, ...] = ()  # ops nothing else waits for: computed, waited for, not fetched
    transfers: int = 0  # values sent to another device (through a move task or as a direct dependency)
    partition_ops: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # partition key -> its ops
    done: Mapping[str, str] = field(default_factory=dict)  # op -> the key of the task that completes it


@dataclass(frozen=True)
class CompiledWindow:
    """One window of a loop's steps, compiled: its graph and where the loop stands after it."""

    graph: CompiledGraph
    carried: Mapping[str, Located]  # state variable -> its value after the window's last step
    metric_keys: tuple[tuple[str, ...], ...]  # per chunk of steps: one key per metric, in the loop's order
    sink_keys: tuple[str, ...]  # tasks nothing reads (a save in the body, a device's part of the window)
    persistent_moves: Mapping[tuple[str, str], str]  # moves of outer values, reused by later windows
    last_step: int  # the number of steps done once this window is
    metrics_stacked: bool = False  # a metric key holds the window's values stacked (else one step's value)
    devices: Mapping[str, str] = field(default_factory=dict)  # device -> its part of the window (gang windows)


# --------------------------------------------------------------------------- runs


GRANULARITIES = ("partition", "op")
"""A Dask task per device partition (loops: per device and window, when they can), or per op."""


@dataclass(frozen=True)
class RunSettings:
    """How to run (command-line flags and API arguments; the spec gives defaults)."""

    scheduler: str | None = None  # None: the spec's cluster.scheduler ("local" by default)
    keep_alive: bool = False
    output_dir: str | None = None
    report_path: str | None = None
    performance_report: str | None = None
    progress: bool | None = None  # None: only on a terminal
    gpu_backend: str | None = None
    write_outputs: bool = True
    wait_for_workers: float = 30.0
    # TLS files (override the spec's cluster.tls field by field; relative to the current directory)
    tls_ca_file: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    on_loop_progress: Callable[[str, int, int], None] | None = None  # (loop, steps done, steps) per window
    task_names: str = "auto"  # how Dask keys are named: auto, op or kind (see orchestrator.keys)
    granularity: str = "partition"  # a Dask task per device partition (loops: per window), or "op": per op
    use_cache: bool = True  # False: neither read nor write the cache (--no-cache)
    cache_dir: str | None = None  # None: .orchestrate/cache beside the spec
    resume: bool = False  # reuse every entry there is, and write every value (a run killed midway resumes)
    cache_files: str = "stat"  # a loaded file's part of a key: "stat" (size, modification time) or "hash"
    sync: bool = False  # every op in this process, in plan order, with no cluster (--sync; docs/running.md)

    def __post_init__(self) -> None:
        if not self.sync:
            return
        # each names a cluster (or what only a cluster makes): refused, not silently ignored
        conflicts = [(self.scheduler is not None, "--scheduler (scheduler=)"),
                     (self.keep_alive, "--keep-alive (keep_alive=)"),
                     (self.performance_report is not None, "--performance-report (performance_report=)"),
                     (self.gpu_backend == "cupy", "--gpu-backend cupy (gpu_backend=)")]
        for conflict, flag in conflicts:
            if conflict:
                raise UsageError(f"--sync runs every op in this process, with no cluster (and GPUs simulated): "
                                 f"{flag} cannot be used with it")


@dataclass(frozen=True)
class OpRecord:
    """One op of a run report: where it was planned, where it ran, when and what it made."""

    name: str
    op: str
    planned_device: str
    worker: str | None
    start: float | None
    duration: float | None
    output_bytes: int | None
    retries: int
    runs: int | None
    why: str
    note: str = ""  # why it has no worker record (a loop's state, resolved by the driver; reused from the cache)
    cache: str = ""  # with its cache on: reused (which entry), or why it ran again

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "op": self.op, "planned_device": self.planned_device,
                               "worker": self.worker, "start": self.start, "duration": self.duration,
                               "output_bytes": self.output_bytes, "retries": self.retries, "runs": self.runs,
                               "why": self.why}
        if self.note:
            out["note"] = self.note
        if self.cache:
            out["cache"] = self.cache
        return out


@dataclass(frozen=True)
class DeviceRecord:
    """One device of a run report: planned peak memory against the peak its backend saw."""

    device: str
    ops: int
    planned_peak_bytes: int
    limit_bytes: int | None
    peak_bytes_seen: int | None
    backend: str | None

    def as_dict(self) -> dict[str, Any]:
        return {"device": self.device, "ops": self.ops, "planned_peak_bytes": self.planned_peak_bytes,
                "limit_bytes": self.limit_bytes, "peak_bytes_seen": self.peak_bytes_seen, "backend": self.backend}


@dataclass(frozen=True)
class TransferRecord:
    """One value Dask moved between workers during a run (from the receiving worker's transfer log)."""

    value: str  # the op whose value (or control token) it was
    source: str  # the device that sent it
    target: str  # the device that received it
    nbytes: int
    start: float
    stop: float

    def as_dict(self) -> dict[str, Any]:
        return {"value": self.value, "from": self.source, "to": self.target, "bytes": self.nbytes,
                "start": self.start, "stop": self.stop}


@dataclass(frozen=True)
class RunTotals:
    ops: int
    tasks: int  # Dask tasks submitted
    moves: int  # planned transfers: values sent to another device
    bytes_moved: int  # bytes moved between workers for this run: Dask's transfer logs, plus loop windows' sends
    transfers_seen: int
    bytes_exchanged: int = 0  # of which sent worker to worker by loop windows (not through Dask's transfers)

    def as_dict(self) -> dict[str, int]:
        return {"ops": self.ops, "tasks": self.tasks, "bytes_moved": self.bytes_moved, "moves": self.moves,
                "transfers_seen": self.transfers_seen, "bytes_exchanged": self.bytes_exchanged}


RUN_REPORT_FORMAT = 1


@dataclass(frozen=True)
class RunReport:
    """The run report (``run --report``): per op and per device, totals and timings."""

    name: str
    file: str
    run: str  # the run token in every Dask key of the run
    backend: str
    task_names: tuple[str, str]  # (naming, why)
    elapsed_seconds: float
    ops: tuple[OpRecord, ...]
    devices: tuple[DeviceRecord, ...]
    totals: RunTotals
    restarted_devices: tuple[str, ...] = ()
    unverified: tuple[str, ...] = ()  # ops whose record died with a restarted worker
    phases_seconds: Mapping[str, float] = field(default_factory=dict)
    granularity: str = "partition"
    loops: Mapping[str, str] = field(default_factory=dict)  # loop -> how its windows ran, and why
    transfers: tuple[TransferRecord, ...] = ()
    params: tuple[Param, ...] = ()
    # before elapsed_seconds: starting the embedded cluster (or connecting) until every device's worker is ready
    startup_seconds: float = 0.0
    mode: str = "cluster"  # "sync": every op ran in the client's process (run --sync), no cluster

    @property
    def placement(self) -> dict[str, dict[str, int]]:
        """Ops and output bytes per device the ops ran on."""
        out: dict[str, dict[str, int]] = {}
        for record in self.ops:
            slot = out.setdefault(record.worker or record.planned_device, {"ops": 0, "bytes": 0})
            slot["ops"] += 1
            slot["bytes"] += int(record.output_bytes or 0)
        return out

    def as_dict(self) -> dict[str, Any]:
        return {"format": RUN_REPORT_FORMAT, "name": self.name, "file": self.file, "run": self.run,
                "backend": self.backend, "task_names": {"naming": self.task_names[0], "why": self.task_names[1]},
                "mode": self.mode, "elapsed_seconds": self.elapsed_seconds, "startup_seconds": self.startup_seconds,
                "ops": [r.as_dict() for r in self.ops],
                "devices": [d.as_dict() for d in self.devices], "placement": self.placement,
                "totals": self.totals.as_dict(), "restarted_devices": list(self.restarted_devices),
                "unverified": list(self.unverified), "phases_seconds": dict(self.phases_seconds),
                "granularity": self.granularity, "loops": dict(self.loops),
                "transfers": [t.as_dict() for t in self.transfers],
                "params": [p.as_dict() for p in self.params]}


@dataclass(frozen=True)
class RunResult:
    """What a run gives back: the output values, the run report, and the files written."""

    name: str
    values: Mapping[str, Any]
    records: RunReport
    plan: Plan = field(repr=False)
    backend: str = "simulated"
    dashboard_link: str | None = None
    written: tuple[str, ...] = ()

    @property
    def report(self) -> dict[str, Any]:
        """The run report as the JSON ``run --report`` writes."""
        return self.records.as_dict()
