"""Static memory plan: the peak of live bytes on every device, against its limit.

Policy. The plan counts what the runtime holds, as it holds it: each rule
below is the runtime's (the module that says more is named), and where what
is held depends on something only the run decides, the plan counts the most
it can be, and says so here.

Ops run one at a time in the order of the tasks that run them: the plan's
device partitions (``plan.partitions``, decided by ``orchestrator.plan.partition``;
a loop's state and exports, which the driver places, alone) one after
another, each op inside in turn — the schedule the runner's default
granularity follows — or, for ``granularity="op"``, the plan's topological
order (:mod:`.timeline`). A loop is one step of that schedule; what it holds
for many steps at once is counted over its step (:mod:`.loops`).

* Outside loops (:mod:`.outer`): a value a task uses only inside itself is
  dropped after its last reader there. A value other tasks read is Dask's:
  its device, and every device that fetched it, holds it until the last
  task reading it anywhere has ended. Devices run side by side, so the plan
  counts it through every task of the device that does not wait for all
  those readers, and through the task after its own last reader there (the
  release is a message from the scheduler); a value moved to a device read
  by several tasks there is moved as soon as it exists, during any task of
  that device it does not wait for. Outputs, a sink's value at
  ``--granularity op``, a value a later stage or a loop reads, and a loop's
  final states and metric series live to the end (the driver keeps their
  futures), with every copy other devices fetched (Dask's active memory
  manager may drop copies sooner: a plan cannot know when).
* A ``call`` op on a GPU holds its inputs as they are: neither backend
  copies a value already on the device (:mod:`.outer`).
* Loops (:mod:`.loops`), per ``plan.loop_mode``: values moved in before the
  first step are kept to the end, once per value and device however many
  loops read them there; in ``gang`` windows each device's task
  holds, within a step, a value until its last reader, a value sent until
  its next wait (and once more for the step after: over Dask's comms a send
  is written when the event loop gets to it; on a cluster the spec declares
  TLS for, every value sent in the window), a value received until the step
  ends, and across steps each state three times (this step's, the step
  before's and the last window's) and the window's metric values; with a
  task per partition or op per step, Dask may run a step's tasks in any
  order, so every value a task returns counts once per step of two windows
  and one more (an upper bound: what Dask runs first is not the plan's to
  know), but for values chained to a state (three steps); a ``nested`` loop
  counts its own values for two steps.

The peak of a device is the largest sum of live bytes at a step that runs on
it; the op running then is "the op at the peak" (the first such op on a
tie). Limits: a GPU's enforced cap (``gpu_memory``: ``limit``, else
``fraction`` x ``total`` shared by its virtual GPUs), a CPU's
``memory_limit``. A device over its limit is an error naming the op whose
allocation first takes it over (its outputs, or a value arriving for it),
and listing the largest values live at the peak. Ops of unknown size (a
``call`` without ``output``, a ``load`` without ``shape``) count as zero, so
such a device's peak is a lower bound: a warning where the user declared
the limit, a note otherwise.

Ops left on ``GPU:*`` (Dask picks the GPU at run time) are counted together,
as if on one GPU, against the smallest limit among the GPUs they may use: an
upper bound of what those ops hold on any one GPU.

Where the plan may still fall short: it follows one order of each device's
tasks, the plan's, where Dask may run two independent tasks of a device the
other way round (a CPU with several threads, even at once: host memory is
Dask's, and no run measures it); and it cannot know of TLS given only on the
command line (see :mod:`.loops`). tests/test_memory_seen.py runs every
example and every benchmark's spec and holds each device's peak seen to the
plan.
"""

from __future__ import annotations

from dataclasses import replace
from itertools import chain
from typing import Mapping, Sequence

from ...errors import Diagnostic, format_bytes
from ..records import DeviceMemory, Plan
from ...spec.records import Cluster
from .loops import in_loops
from .packing import halving_problems, pack
from .outer import outside_loops, transfers
from .timeline import Held, schedule, scopes, timeline

__all__ = ["plan_memory", "schedule"]


_FINDINGS = frozenset({"memory", "memory-unknown", "halving", "median"})  # the codes of what plan_memory finds


def plan_memory(plan: Plan, granularity: str = "partition") -> Plan:
    """Return ``plan`` with per-device memory figures and diagnostics for devices over their limit."""
    line = timeline(plan, granularity)
    scope = scopes(plan)
    unknown: dict[str, list[str]] = {device: [] for device in line.device_of.values()}
    held: dict[str, list[Held]] = {}
    for device, what in chain(outside_loops(plan, granularity, line, scope, unknown),
                              in_loops(plan, granularity, line, scope, unknown)):
        held.setdefault(device, []).append(what)
    bytes_in, bytes_out = transfers(plan, line)
    ops_on: dict[str, list[int]] = {}  # device -> the positions of its ops
    for position, device in enumerate(line.device_at):
        ops_on.setdefault(device, []).append(position)
    memories = []
    # planned again at another granularity (run --granularity op): its own findings are made anew, not twice
    diagnostics = [d for d in plan.diagnostics if d.code not in _FINDINGS]
    for device, positions in ops_on.items():
        limit = _limit(plan, device)
        names = tuple(line.order[p] for p in positions)
        peak, peak_op, over_op, largest = _peak(held.get(device, []), positions, line.order, limit)
        vague = tuple(sorted(unknown[device], key=line.step_of.__getitem__))
        memories.append(DeviceMemory(device, names, peak, peak_op, limit, vague, bytes_in.get(device, 0),
                                     bytes_out.get(device, 0), over_op, largest))
    packing = pack(plan, held, unknown, {m.device: m.peak for m in memories}, {m.device: m.limit for m in memories},
                   line.step_of)
    packed_peaks = {d.device: d.peak for p in packing for d in p.devices if d.at_once > 1}
    # copies side by side: the device's peak is the packed bound (its op at the peak stays the sequential one)
    memories = [replace(m, peak=max(m.peak, packed_peaks.get(m.device, 0))) for m in memories]
    for memory in memories:
        diagnostics.extend(_judge(plan, memory))
    diagnostics.extend(halving_problems(plan))
    memories.sort(key=lambda m: _device_order(plan.spec.cluster, m.device))
    return replace(plan, memory=tuple(memories), diagnostics=tuple(diagnostics), packing=packing)


def _peak(held: Sequence[Held], positions: Sequence[int], order: Sequence[str],
          limit: int | None) -> tuple[int, str | None, str | None, tuple[tuple[str, int], ...]]:
    """(peak, the op running at it, the op whose step first goes over ``limit``, the largest values at the peak)."""
    delta: dict[int, int] = {}
    for h in held:
        delta[h.start] = delta.get(h.start, 0) + h.size
        delta[h.stop + 1] = delta.get(h.stop + 1, 0) - h.size
    running = set(positions)
    live, peak, peak_op, peak_step, over_op = 0, 0, None, -1, None
    for step in sorted(running.union(delta)):
        live += delta.get(step, 0)
        if step not in running:
            continue
        if peak_op is None or live > peak:  # ties: the first op to reach it
            peak, peak_op, peak_step = live, order[step], step
        if over_op is None and limit is not None and live > limit:
            over_op = order[step]
    at_peak = sorted(((h.what, h.size) for h in held if h.start <= peak_step <= h.stop and h.size),
                     key=lambda item: (-item[1], item[0]))
    return peak, peak_op, over_op, tuple(at_peak[:3])


def _limit(plan: Plan, device: str) -> int | None:
    cluster = plan.spec.cluster
    known = cluster.device(device)
    if known is not None:
        return known.memory_limit
    pattern = next(p.device for p in plan.placements if p.device_name == device)
    limits = [d.memory_limit for d in cluster.matching(pattern) if d.memory_limit is not None]
    return min(limits) if limits else None


def _judge(plan: Plan, memory: DeviceMemory) -> list[Diagnostic]:
    if memory.limit is None or memory.peak_op is None and not memory.unknown:
        return []
    doc = plan.spec.document
    if memory.peak > memory.limit:
        culprit = memory.over_op or memory.peak_op
        assert culprit is not None
        op = plan.spec.op(culprit)
        bound = "at least " if memory.unknown else ""
        largest = ", ".join(f"{what} {format_bytes(size)}" for what, size in memory.largest)
        return [doc.diagnostic(
            "memory", op.path,
            f"op '{op.name}' takes {memory.device} over its limit of {format_bytes(memory.limit)}: "
            f"{bound}{format_bytes(memory.peak)} at the peak ({largest})",
            "raise the device's gpu_memory or memory_limit, split the work across devices, "
            "or place large ops elsewhere")]
    if memory.unknown and _declared(plan, memory.device):
        op = plan.spec.op(memory.unknown[0])
        return [doc.diagnostic(
            "memory-unknown", op.path,
            f"{len(memory.unknown)} op(s) of unknown size on {memory.device} (first: '{op.name}'); "
            f"peak is at least {format_bytes(memory.peak)} of a {format_bytes(memory.limit)} limit",
            "declare sizes so the planner can check the limit: output: {shape, dtype} on call ops, shape: on load ops",
            severity="warning")]
    return []


def _declared(plan: Plan, device: str) -> bool:
    """Did the user set this device's limit? For ``GPU:*``, any GPU it may run on."""
    cluster = plan.spec.cluster
    known = cluster.device(device)
    if known is not None:
        return known.limit_declared
    pattern = next(p.device for p in plan.placements if p.device_name == device)
    return any(d.limit_declared for d in cluster.matching(pattern))


def _device_order(cluster: Cluster, device: str) -> tuple[int, str]:
    names = [d.name for d in cluster.devices]
    return (names.index(device), device) if device in names else (len(names), device)
