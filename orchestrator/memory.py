"""Static memory plan: the peak of live bytes on every device, against its limit.

Ops run in the plan's topological order (one step each). A value occupies
memory on its producer's device from the step that makes it until the last
step that reads it anywhere (a value sent to another device stays until it is
sent); values named in ``outputs`` live to the end. On each other device that
reads it, a value arriving from elsewhere occupies memory from the first to
the last step that reads it there — it moves once per consuming device.

The peak of a device is the largest sum of live bytes at a step that runs on
it; the op running then is "the op at the peak" (the first such op on a tie).
Limits: a GPU's enforced cap (``gpu_memory``: ``limit``, else ``fraction`` x
``total`` shared by its virtual GPUs), a CPU's ``memory_limit``; a peak over
its limit is an error naming that op. Ops of unknown size (a ``call`` without
``output``, a ``load``) count as zero, so such a device's peak is a lower
bound: a warning where the user declared the limit, a note otherwise.

Ops left on ``GPU:*`` (Dask picks the GPU at run time) are counted together,
as if on one GPU, against the smallest limit among the GPUs they may use: an
upper bound of what those ops hold on any one GPU.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

from .errors import Diagnostic, format_bytes
from .model import Cluster, DeviceMemory, OpRef, Plan

Key = tuple[str, int]  # (op, output index)


def plan_memory(plan: Plan) -> Plan:
    """Return ``plan`` with per-device memory figures and diagnostics for devices over their limit."""
    spec = plan.spec
    step_of = {p.op: i for i, p in enumerate(plan.placements)}
    device_of = {p.op: p.device_name for p in plan.placements}
    last_use: dict[Key, int] = {}
    per_device_use: dict[tuple[Key, str], tuple[int, int]] = {}
    for p in plan.placements:
        op = spec.op(p.op)
        step = step_of[p.op]
        for ref in op.inputs:
            key = (ref.op, ref.output or 0)
            last_use[key] = max(last_use.get(key, -1), step)
            span = per_device_use.get((key, p.device_name))
            per_device_use[(key, p.device_name)] = (step, step) if span is None else (span[0], step)
    end = len(plan.placements)
    kept = {(o.ref.op, o.ref.output or 0) for o in spec.outputs}

    delta: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    unknown: dict[str, list[str]] = defaultdict(list)
    bytes_in: dict[str, int] = defaultdict(int)
    bytes_out: dict[str, int] = defaultdict(int)
    for p in plan.placements:
        op = spec.op(p.op)
        step = step_of[p.op]
        for i in range(op.outputs):
            key = (p.op, i)
            size = spec.value(OpRef(p.op, i if op.outputs > 1 else None)).nbytes
            if size is None:
                unknown[p.device_name].append(p.op)
                continue
            stop = end if key in kept else max(last_use.get(key, step), step)
            delta[p.device_name][step] += size
            delta[p.device_name][stop + 1] -= size
    for (key, device), (first, last) in per_device_use.items():
        source = device_of.get(key[0])
        if source is None or source == device:
            continue
        op = spec.op(key[0])
        size = spec.value(OpRef(key[0], key[1] if op.outputs > 1 else None)).nbytes
        if size is None:
            continue
        delta[device][first] += size
        delta[device][last + 1] -= size
        bytes_in[device] += size
        bytes_out[source] += size

    ops_on: dict[str, list[str]] = defaultdict(list)
    for p in plan.placements:
        ops_on[p.device_name].append(p.op)
    memories = []
    diagnostics = list(plan.diagnostics)
    for device, names in ops_on.items():
        changes = delta.get(device, {})
        live, peak, peak_op = 0, 0, None
        steps = sorted(set(changes) | {step_of[n] for n in names})
        running = {step_of[n]: n for n in names}
        for step in steps:
            live += changes.get(step, 0)
            if step in running and (peak_op is None or live > peak):  # ties: the first op to reach it
                peak, peak_op = live, running[step]
        limit = _limit(plan, device)
        memory = DeviceMemory(device, tuple(names), peak, peak_op, limit, tuple(unknown.get(device, ())),
                              bytes_in.get(device, 0), bytes_out.get(device, 0))
        memories.append(memory)
        diagnostics.extend(_judge(plan, memory))
    memories.sort(key=lambda m: _device_order(plan.spec.cluster, m.device))
    return replace(plan, memory=tuple(memories), diagnostics=tuple(diagnostics))


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
        assert memory.peak_op is not None
        op = plan.spec.op(memory.peak_op)
        bound = "at least " if memory.unknown else ""
        return [doc.diagnostic(
            "memory", op.path,
            f"op '{op.name}' needs {bound}{format_bytes(memory.peak)} on {memory.device}; "
            f"limit is {format_bytes(memory.limit)}",
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
