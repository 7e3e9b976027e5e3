"""The records of a plan: where every op runs and why, what moves, and memory per device.

The plan also carries the tasks it is cut into (partitions, each loop's mode at both granularities,
``GRANULARITIES`` being the ways a plan can be cut into Dask tasks). The planning stage decides all
of it once; compile, the memory report and the renderers read it and never recompute it.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..devices import DeviceSpec
from ..errors import Diagnostic
from ..spec.records import OpRef, Spec


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
    """Ops of one device that run as one task, in this order (grouped by ``orchestrator.plan.partition``)."""

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
    """How the ops become Dask tasks, decided once by planning (``orchestrator.plan.partition.plan_tasks``).

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
class CopySlot:
    """Where and when one copy of a sweep runs: its device, and its wave there (wave w starts as w-1 ends)."""

    index: int
    id: str
    device: str
    wave: int
    size: int | None = 0  # the most it holds there while it runs (None: a size is unknown)
    slots: float = 1.0  # the device's thread slots its tasks take (a multiple of 1/1024: Dask sums them exactly)


@dataclass(frozen=True)
class DevicePacking:
    """How many copies of one sweep a device runs at once, and the memory that allows it."""

    device: str
    copies: int
    at_once: int  # the most copies beside each other (the smallest, when they differ in size)
    per_copy: int | None  # the most one copy holds there (None: a size is unknown)
    peak_alone: int  # the device's planned peak running the copies one at a time
    peak: int  # its planned peak packed (at_once copies beside each other)
    limit: int | None
    threads: int
    why: str
    waves: int = 1
    shared: int = 0  # the most it holds that no copy owns while they run (the data they all read, once)
    kept: int = 0  # what its copies hold after their last op, all of them
    shared_values: tuple[tuple[str, int], ...] = ()  # values outside the sweep its copies read there: (value, bytes)


@dataclass(frozen=True)
class SweepPacking:
    name: str
    copies: tuple[CopySlot, ...]
    devices: tuple[DevicePacking, ...]
    # the positions among each copy's top-level loops (``SweepCopy.loops``) whose loops the run steps side by
    # side, in the waves above (and decides by the sweep's rule there); a loop holding a loop runs step by step,
    # so the copies' loops at its position run one after another
    side_by_side: tuple[int, ...] = ()

    def device(self, name: str) -> DevicePacking | None:
        return next((d for d in self.devices if d.device == name), None)


@dataclass(frozen=True)
class Plan:
    spec: Spec
    placements: tuple[Placement, ...]
    memory: tuple[DeviceMemory, ...] = ()
    diagnostics: tuple[Diagnostic, ...] = ()
    tasks: TaskPlan | None = None  # set by plan_tasks, after placement and before the memory plan
    packing: tuple[SweepPacking, ...] = ()  # set by plan_memory: each sweep's copies, packed by memory

    def placement(self, op: str) -> Placement:
        return self.placement_index[op]

    @functools.cached_property
    def placement_index(self) -> dict[str, Placement]:
        return {p.op: p for p in self.placements}

    def packing_of(self, sweep: str) -> SweepPacking | None:
        """How sweep ``sweep``'s copies are packed (None before the memory plan packs them)."""
        return self.packing_index.get(sweep)

    @functools.cached_property
    def packing_index(self) -> dict[str, SweepPacking]:
        return {packing.name: packing for packing in self.packing}

    @property
    def planned_tasks(self) -> TaskPlan:
        if self.tasks is None:  # a plan straight from place(): compiling it would have to guess
            raise ValueError("this plan's tasks are not planned: make plans with orchestrator.api.plan_file "
                             "(or orchestrator.plan.partition.plan_tasks after place)")
        return self.tasks

    @property
    def partitions(self) -> tuple[Partition, ...]:
        return self.planned_tasks.partitions

    @property
    def loop_partitions(self) -> Mapping[str, tuple[Partition, ...]]:
        return self.planned_tasks.loop_partitions

    def loop_mode(self, loop: str, granularity: str = "partition") -> LoopMode:
        return self.planned_tasks.loop_modes[granularity][loop]


GRANULARITIES = ("partition", "op")
# The partition granularity run in this process (``--sync``): the plan decides those loop modes too (a gang loop's
# steps run one after another there), so the in-process driver obeys the plan like the cluster's.
IN_PROCESS = "partition, in process"
