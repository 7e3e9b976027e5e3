"""Static memory plan: the peak of live bytes on every device, against its limit.

Ops run one at a time in the order of the tasks that run them: the plan's
device partitions (``plan.partitions``, decided by ``orchestrator.plan.partition``;
a loop's state and exports, which the driver places, alone) one after
another, each op inside in turn — the schedule the runner's default
granularity follows — or, for ``granularity="op"``, the plan's topological
order. Liveness follows what the runtime holds:

* A value read only inside its partition lives from the step that makes it
  to its last reader there; then the partition drops it.
* A value another task reads lives until the last of those tasks ends (the
  worker holds a task's inputs until it is done); values a partition
  returns together live as long as the longest-lived of them. Values named
  in ``outputs`` live to the end.
* On each other device that reads it, a value arriving from elsewhere
  occupies memory from the start of the first task reading it there to the
  end of the last — it moves once per consuming device.

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
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from typing import Mapping, Sequence

from ..errors import Diagnostic, format_bytes
from .records import DeviceMemory, Plan
from ..spec.records import Cluster, OpRef, Spec

Key = tuple[str, int]  # (op, output index)


def schedule(plan: Plan, granularity: str = "partition") -> tuple[tuple[str, ...], ...]:
    """The units the runner runs, in an order that respects every dependency: partitions, or single ops."""
    if granularity == "op":
        return tuple((p.op,) for p in plan.placements)
    # the plan's partitions: outside loops, then one step of each loop (a loop inside it is its own)
    units = [part.ops for part in plan.partitions]
    units += [part.ops for parts in plan.loop_partitions.values() for part in parts]
    grouped = {name for unit in units for name in unit}
    # a loop's state and its exports are no task's: the driver puts each value on its device alone
    units += [(p.op,) for p in plan.placements if p.op not in grouped]
    position = {p.op: i for i, p in enumerate(plan.placements)}
    # a unit runs where its first op falls in the plan's order: loops stay between the stages around them
    return tuple(sorted(units, key=lambda unit: position[unit[0]]))


def plan_memory(plan: Plan, granularity: str = "partition") -> Plan:
    """Return ``plan`` with per-device memory figures and diagnostics for devices over their limit."""
    spec = plan.spec
    units = schedule(plan, granularity)
    order = [name for unit in units for name in unit]
    step_of = {name: i for i, name in enumerate(order)}
    unit_of = {name: u for u, unit in enumerate(units) for name in unit}
    first_step = [step_of[unit[0]] for unit in units]
    last_step = [step_of[unit[-1]] for unit in units]
    device_of = {p.op: p.device_name for p in plan.placements}
    end = len(order)
    kept = {(o.ref.op, o.ref.output or 0) for o in spec.outputs}

    holds, away = _lifetimes(spec, order, step_of, unit_of, first_step, last_step, device_of)

    intervals: dict[str, list[tuple[int, int, int, str]]] = defaultdict(list)  # device -> (start, stop, size, what)
    unknown: dict[str, list[str]] = defaultdict(list)
    bytes_in: dict[str, int] = defaultdict(int)
    bytes_out: dict[str, int] = defaultdict(int)
    for name in order:
        op = spec.op(name)
        step, device = step_of[name], device_of[name]
        for i in range(op.outputs):
            key = (name, i)
            size = spec.value(OpRef(name, i if op.outputs > 1 else None)).nbytes
            if size is None:
                unknown[device].append(name)
                continue
            stop = end if key in kept else max(holds.get(key, step), step)
            intervals[device].append((step, stop, size, _label(name, i, op.outputs)))
    for (key, device), (first, last) in away.items():
        op = spec.op(key[0])
        size = spec.value(OpRef(key[0], key[1] if op.outputs > 1 else None)).nbytes
        if size is None:
            continue
        intervals[device].append((first, last, size, _label(key[0], key[1], op.outputs) + " (arrived)"))
        bytes_in[device] += size
        bytes_out[device_of[key[0]]] += size

    ops_on: dict[str, list[str]] = defaultdict(list)
    for name in order:
        ops_on[device_of[name]].append(name)
    memories = []
    diagnostics = list(plan.diagnostics)
    for device, names in ops_on.items():
        limit = _limit(plan, device)
        peak, peak_op, over_op, largest = _peak(intervals.get(device, []), names, step_of, limit)
        memory = DeviceMemory(device, tuple(names), peak, peak_op, limit, tuple(unknown.get(device, ())),
                              bytes_in.get(device, 0), bytes_out.get(device, 0), over_op, largest)
        memories.append(memory)
        diagnostics.extend(_judge(plan, memory))
    memories.sort(key=lambda m: _device_order(plan.spec.cluster, m.device))
    return replace(plan, memory=tuple(memories), diagnostics=tuple(diagnostics))


def _lifetimes(spec: Spec, order: list[str], step_of: Mapping[str, int], unit_of: Mapping[str, int],
               first_step: list[int], last_step: list[int], device_of: Mapping[str, str]) \
        -> tuple[dict[Key, int], dict[tuple[Key, str], tuple[int, int]]]:
    """Per value, the last step holding it on its own device; per value and other device, the span it is there."""
    # who reads each value: the last step holding it on its own device, the tasks reading it elsewhere
    holds: dict[Key, int] = {}
    away: dict[tuple[Key, str], tuple[int, int]] = {}
    for name in order:
        op = spec.op(name)
        for ref in op.inputs:
            key = (ref.op, ref.output or 0)
            if ref.op not in unit_of:
                continue
            same_task = unit_of[ref.op] == unit_of[name]
            until = step_of[name] if same_task else last_step[unit_of[name]]
            holds[key] = max(holds.get(key, -1), until)
            if device_of[ref.op] != device_of[name]:
                span = away.get((key, device_of[name]))
                start, stop = first_step[unit_of[name]], last_step[unit_of[name]]
                away[(key, device_of[name])] = (start, stop) if span is None else (min(span[0], start),
                                                                                  max(span[1], stop))
    # values a task returns together (it returns a tuple) live as long as the longest-lived of them
    returned: dict[int, list[Key]] = defaultdict(list)
    for key, until in holds.items():
        if until > last_step[unit_of[key[0]]]:
            returned[unit_of[key[0]]].append(key)
    for keys in returned.values():
        if len(keys) > 1:
            longest = max(holds[k] for k in keys)
            for k in keys:
                holds[k] = longest
    return holds, away


def _label(name: str, index: int, outputs: int) -> str:
    return name if outputs == 1 else f"{name}:{index}"


def _peak(intervals: Sequence[tuple[int, int, int, str]], names: Sequence[str], step_of: dict[str, int],
          limit: int | None) -> tuple[int, str | None, str | None, tuple[tuple[str, int], ...]]:
    """(peak, the op running at it, the op whose step first goes over ``limit``, the largest values at the peak)."""
    delta: dict[int, int] = defaultdict(int)
    for start, stop, size, _ in intervals:
        delta[start] += size
        delta[stop + 1] -= size
    running = {step_of[n]: n for n in names}
    live, peak, peak_op, peak_step, over_op = 0, 0, None, -1, None
    for step in sorted(set(delta) | set(running)):
        live += delta.get(step, 0)
        if step not in running:
            continue
        if peak_op is None or live > peak:  # ties: the first op to reach it
            peak, peak_op, peak_step = live, running[step], step
        if over_op is None and limit is not None and live > limit:
            over_op = running[step]
    at_peak = sorted(((what, size) for start, stop, size, what in intervals if start <= peak_step <= stop),
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
