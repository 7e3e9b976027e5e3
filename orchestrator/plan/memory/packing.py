"""Packing a sweep's copies: how many run at once on each device, by planned memory.

Policy. A copy's home is the device that runs most of its ops (the first of
them on a tie); copies take their homes in index order, and a GPU runs
``at_once`` of them side by side, the rest queued in waves (copy ``j`` of a
device is in wave ``j // at_once``). ``at_once`` is the largest number that
keeps the device under its cap:

    peak packed = peak one at a time + at_once x per copy <= limit

where *per copy* is everything one copy ever holds on the device (its values,
its ``call`` ops' input copies, what it keeps for a later ``gather``), all at
once: a bound, not a guess. The device's own peak already counts one copy, so
this counts one copy too many; the plan errs on the safe side. It is also
bounded by the device's threads (``gpu_threads``; 1 by default, which packs
nothing) and by the copies there. A copy whose size is unknown (a ``call``
without ``output``) is never packed: the bound would be a lower one.

A CPU runs a task per thread anyway (``cpu_threads``); its copies are shown
with that many at once and its peak is left as planned (host memory is the
worker's ``memory_limit``, which Dask watches, not a cap the plan enforces).

The run enforces what the plan says (``compile`` gives a copy's tasks a
share of the GPU's thread slots, every other task all of them) and records
when each copy started and stopped on which device.

State: none; a pure function of the plan and the values each device holds.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence

from ...errors import Diagnostic, format_bytes
from ..records import CopySlot, DevicePacking, Plan, SweepPacking
from ...spec.records import Search, SweepCopy
from .timeline import Held


def pack(plan: Plan, held: Mapping[str, Sequence[Held]], unknown: Mapping[str, Sequence[str]],
         peaks: Mapping[str, int], limits: Mapping[str, int | None]) -> tuple[SweepPacking, ...]:
    """Every sweep's packing (see the module's policy)."""
    return tuple(_pack_search(plan, search, held, unknown, peaks, limits) for search in plan.spec.sweeps)


def halving_problems(plan: Plan) -> list[Diagnostic]:
    """A sweep with a rule (halving, median) brings every copy's loop to each decision step before deciding, so
    they are all in flight at once: each must keep to one device.

    A loop on two devices exchanges values between them every step; two such loops
    in flight at once could each hold one device while waiting for the other.
    """
    out = []
    for search in plan.spec.sweeps:
        rule = search.rule
        if rule is None:
            continue
        kind = "halving" if search.halving is not None else "median"
        for copy in search.copies:
            loop = next((lp for lp in plan.spec.loops if lp.name == copy.prefix + rule.loop), None)
            devices = sorted({plan.placement(n).device_name for n in loop.body}) if loop is not None else []
            if len(devices) > 1:
                out.append(plan.spec.document.diagnostic(
                    kind, rule.at, f"{kind} of sweep '{search.name}' steps its copies' loops side by "
                    f"side, but copy {copy.index}'s loop '{rule.loop}' runs on {len(devices)} devices "
                    f"({', '.join(devices)}): two such loops could each wait for the other's device",
                    "keep each copy's loop on one device (spread: gives each copy one)", key=True))
                break
    return out


def home_of(plan: Plan, names: Sequence[str]) -> str:
    """The device that runs most of a copy's ops ``names`` (the first of them on a tie)."""
    counts: dict[str, int] = {}
    for name in names:
        device = plan.placement(name).device_name
        counts[device] = counts.get(device, 0) + 1
    return max(counts, key=lambda d: counts[d]) if counts else ""


def by_copy(search: Search, names: Iterable[str]) -> dict[int, list[str]]:
    """``names`` (ops, or what a device holds) by the copy of ``search`` they belong to, in one pass."""
    out: dict[int, list[str]] = {}
    for name in names:
        copy = search.copy_of(name)
        if copy is not None:
            out.setdefault(copy.index, []).append(name)
    return out


def _pack_search(plan: Plan, search: Search, held: Mapping[str, Sequence[Held]],
                 unknown: Mapping[str, Sequence[str]], peaks: Mapping[str, int],
                 limits: Mapping[str, int | None]) -> SweepPacking:
    ops_of = by_copy(search, (p.op for p in plan.placements))
    on: dict[str, list[SweepCopy]] = {}
    for copy in search.copies:
        on.setdefault(home_of(plan, ops_of.get(copy.index, [])), []).append(copy)
    devices: list[DevicePacking] = []
    slots: list[CopySlot] = []
    for device, copies in on.items():
        holds: dict[int, int] = {}
        for h in held.get(device, ()):
            owner = search.copy_of(h.what)
            if owner is not None:
                holds[owner.index] = holds.get(owner.index, 0) + h.size
        unsized = {c.index for c in (search.copy_of(name) for name in unknown.get(device, ())) if c is not None}
        packing = _pack_device(plan, device, copies, holds, unsized, peaks.get(device, 0), limits.get(device))
        devices.append(packing)
        slots.extend(CopySlot(c.index, c.id, device, j // packing.at_once) for j, c in enumerate(copies))
    return SweepPacking(search.name, tuple(sorted(slots, key=lambda s: s.index)), tuple(devices))


def _pack_device(plan: Plan, device: str, copies: Sequence[SweepCopy], holds: Mapping[int, int],
                 unsized: Collection[int], peak: int, limit: int | None) -> DevicePacking:
    """``holds``: everything each copy holds on the device at any time, summed (a bound of what it holds at
    once); ``unsized``: the copies with an op of unknown size there."""
    known = plan.spec.cluster.device(device)
    threads = known.threads if known is not None else 1
    n = len(copies)
    sizes = [holds.get(copy.index, 0) for copy in copies]
    sized = not any(copy.index in unsized for copy in copies)
    per_copy = max(sizes) if sizes and sized else None
    if known is None or not known.is_gpu:
        at_once = min(threads, n)
        why = f"a CPU runs a task per thread ({threads})" if known is not None else "Dask picks the device"
        return DevicePacking(device, n, max(at_once, 1), per_copy, peak, peak, limit, threads, why)
    if threads <= 1 or n <= 1:
        why = "one copy: nothing to pack" if n <= 1 else "gpu_threads is 1: one task at a time"
        return DevicePacking(device, n, 1, per_copy, peak, peak, limit, threads, why)
    if per_copy is None:
        return DevicePacking(device, n, 1, None, peak, peak, limit, threads,
                             "a copy's size is unknown (declare output: on its call ops): one at a time")
    fit = n if limit is None or per_copy == 0 else (limit - peak) // per_copy
    at_once = max(1, min(threads, n, fit))
    packed = peak + at_once * per_copy if at_once > 1 else peak
    bound = min(threads, n)
    if at_once == bound:
        why = ("every copy" if at_once == n else f"as many as its {threads} threads") + \
              (f", {format_bytes(packed)} of {format_bytes(limit)} planned" if limit is not None else "")
    else:
        why = (f"as many as fit its cap: {format_bytes(peak)} planned one at a time + {at_once} x "
               f"{format_bytes(per_copy)} per copy = {format_bytes(packed)} of {format_bytes(limit or 0)}")
    return DevicePacking(device, n, at_once, per_copy, peak, packed, limit, threads, why)

