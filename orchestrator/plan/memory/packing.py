"""Packing a sweep's copies: how many run at once on each device, each copy counted by its own size.

Policy. A copy's home is the device that runs most of its ops (the first of
them on a tie); copies take their homes in index order. The memory plan
says what a device holds, value by value and position by position, with
the copies one after another; packing splits that three ways:

* **shared**: what no copy of the sweep owns, at the most it comes to while
  the copies run there. The data every copy reads is in it once: a value
  moves to a device once and every copy's task there reads that one copy
  (``compile``: one ``move`` per value and device, whichever copies or
  loops read it);
* **kept**: what each copy still holds after its last op (what the sweep's
  gather, select or table reads at the end), for every copy of the device:
  a copy that has finished keeps it while the others run;
* **running**: what a copy holds while it runs beyond what it keeps, the
  peak of its own values over its ops (its *size*, less what it keeps).

A GPU of several threads runs its copies side by side, as many at once as

    shared + kept (all its copies) + running (the copies at once) <= limit

and its threads (``gpu_threads``; 1 by default, which packs nothing)
allow. Copies may differ in size (a sweep over widths), and each is
counted by its own, not padded to the largest. The run enforces this with
Dask's resources: a GPU's worker offers a slot per thread, and a copy's
tasks take the larger of one thread and its running size's share of the
room under the cap (shared and kept taken off), in units of 1/1024 of a
slot rounded up (``CopySlot.slots``); every other task there takes every
slot. Dask then starts a copy only while the copies running there leave it
room, whichever of them finish first, and never more than the threads;
sums of 1/1024ths are exact in floating point, so no rounding lets one more
in. ``at_once`` is the most copies that fit together (the smallest); the
planned peak packed is ``shared + kept + min(room, the at_once largest
running sizes)``, a bound on any set of copies Dask may start together.
The waves the plan shows are the copies in index order, each wave as many
as fit beside each other (wave ``w`` starts as ``w - 1`` ends): copies of
one size are in wave ``j // at_once``; of different sizes, Dask fills a
slot as soon as one frees, so the waves are a picture and the bound holds
anyway. A copy whose size is unknown (a ``call`` without ``output``) is
never packed: its bound would be a lower one.

The sizes are bounds: a copy's values are counted from the op that makes
them to the last that reads them, as the memory plan counts them, so a
value freed early inside a task is counted to the task's end. Two sweeps
on one GPU are packed each on its own (the other's copies count as shared,
one at a time).

A CPU runs a task per thread anyway (``cpu_threads``); its copies are shown
with that many at once and its peak is left as planned (host memory is the
worker's ``memory_limit``, which Dask watches, not a cap the plan enforces).

The run records when each copy started and stopped on which device.

State: none; a pure function of the plan and the values each device holds.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ...errors import Diagnostic, format_bytes
from ..records import CopySlot, DevicePacking, Plan, SweepPacking
from ...spec.records import Search, SweepCopy
from .timeline import Held, Key, key_of, label, size_of

UNIT = 1024  # a GPU thread slot's parts: a copy takes a whole number of them, so Dask's sums are exact


def pack(plan: Plan, held: Mapping[str, Sequence[Held]], unknown: Mapping[str, Sequence[str]],
         peaks: Mapping[str, int], limits: Mapping[str, int | None],
         step_of: Mapping[str, int]) -> tuple[SweepPacking, ...]:
    """Every sweep's packing (see the module's policy)."""
    return tuple(_pack_search(plan, search, held, unknown, peaks, limits, step_of) for search in plan.spec.sweeps)


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
            loop = plan.spec.loop_index.get(search.ruled_loop(copy) or "")
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


def by_copy(plan: Plan, search: Search, names: Iterable[str]) -> dict[int, list[str]]:
    """``names`` (ops) by the copy of ``search`` they belong to (``Op.scope``), in one pass."""
    out: dict[int, list[str]] = {}
    for name in names:
        index = plan.spec.op(name).scope.copy_in(search.name)
        if index is not None:
            out.setdefault(index, []).append(name)
    return out


@dataclass(frozen=True)
class _Footprint:
    """What a device holds while its copies of one sweep run (see the module's policy)."""

    shared: int
    size: Mapping[int, int]  # copy index -> the most it holds while it runs
    kept: Mapping[int, int]  # copy index -> what it holds after its last op
    values: tuple[tuple[str, int], ...]  # the values outside the sweep its copies read there, each once

    def running(self, index: int) -> int:
        return max(0, self.size.get(index, 0) - self.kept.get(index, 0))


def _pack_search(plan: Plan, search: Search, held: Mapping[str, Sequence[Held]],
                 unknown: Mapping[str, Sequence[str]], peaks: Mapping[str, int],
                 limits: Mapping[str, int | None], step_of: Mapping[str, int]) -> SweepPacking:
    ops_of = by_copy(plan, search, (p.op for p in plan.placements))
    owner = {name: index for index, names in ops_of.items() for name in names}
    on: dict[str, list[SweepCopy]] = {}
    for copy in search.copies:
        on.setdefault(home_of(plan, ops_of.get(copy.index, [])), []).append(copy)
    devices: list[DevicePacking] = []
    slots: list[CopySlot] = []
    for device, copies in on.items():
        mine = {c.index for c in copies}
        names = [n for c in copies for n in ops_of.get(c.index, [])]
        footprint = _footprint(plan, held.get(device, ()), owner, mine, names, step_of)
        unsized = any(owner.get(name) in mine for name in unknown.get(device, ()))
        packing, units, waves = _pack_device(plan, device, copies, footprint, unsized, peaks.get(device, 0),
                                             limits.get(device))
        devices.append(packing)
        slots.extend(CopySlot(c.index, c.id, device, wave, None if unsized else footprint.size.get(c.index, 0),
                              units[c.index] / UNIT) for c, wave in zip(copies, waves))
    return SweepPacking(search.name, tuple(sorted(slots, key=lambda s: s.index)), tuple(devices),
                        side_by_side(plan, search))


def side_by_side(plan: Plan, search: Search) -> tuple[int, ...]:
    """The positions of the copies' top-level loops that step side by side: those where no copy's loop holds a
    loop of its own (``halving_problems`` checks that each keeps to one device)."""
    deepest = max((len(copy.loops) for copy in search.copies), default=0)
    return tuple(i for i in range(deepest) if not any(plan.spec.loop(copy.loops[i]).children
                                                      for copy in search.copies if len(copy.loops) > i))


def _footprint(plan: Plan, entries: Sequence[Held], owner: Mapping[str, int], mine: set[int],
               names: Sequence[str], step_of: Mapping[str, int]) -> _Footprint:
    """Shared, per copy and kept bytes of one device (``mine``: the copies it is home to, ``names`` their ops)."""
    own: dict[int, list[Held]] = {}
    shared: list[Held] = []
    for h in entries:
        index = owner.get(h.key[0])
        if index in mine:
            own.setdefault(index, []).append(h)
        else:
            shared.append(h)
    positions = [step_of[n] for n in names]
    lo, hi = (min(positions), max(positions)) if positions else (0, -1)
    last: dict[int, int] = {}
    for name in names:
        last[owner[name]] = max(last.get(owner[name], 0), step_of[name])
    size = {i: _most(hs, 0, last.get(i, 0)) for i, hs in own.items()}
    kept = {i: sum(h.size for h in hs if h.stop > last.get(i, 0)) for i, hs in own.items()}
    read: set[Key] = {key_of(ref) for name in names for ref in plan.spec.op(name).inputs
                      if owner.get(ref.op) not in mine}
    there = {h.key for h in shared}
    values = tuple((label(plan.spec, key), size_of(plan.spec, key) or 0)
                   for key in sorted(read & there, key=lambda k: step_of.get(k[0], 0)))
    return _Footprint(_most(shared, lo, hi), size, kept, values)


def _most(entries: Iterable[Held], lo: int, hi: int) -> int:
    """The most bytes ``entries`` hold together at any position from ``lo`` to ``hi``."""
    delta: dict[int, int] = {}
    for h in entries:
        if h.stop >= lo and h.start <= hi:
            start = max(h.start, lo)
            delta[start] = delta.get(start, 0) + h.size
            delta[h.stop + 1] = delta.get(h.stop + 1, 0) - h.size
    live = most = 0
    for position in sorted(delta):
        if position > hi:
            break
        live += delta[position]
        most = max(most, live)
    return most


def _pack_device(plan: Plan, device: str, copies: Sequence[SweepCopy], fp: _Footprint, unsized: bool,
                 peak: int, limit: int | None) -> tuple[DevicePacking, dict[int, int], list[int]]:
    """The device's packing, each copy's slot units and each copy's wave (in ``copies``' order)."""
    known = plan.spec.cluster.device(device)
    threads = known.threads if known is not None else 1
    n = len(copies)
    kept = sum(fp.kept.get(c.index, 0) for c in copies)
    per_copy = None if unsized else max((fp.size.get(c.index, 0) for c in copies), default=0)

    def record(at_once: int, packed: int, waves: int, why: str) -> DevicePacking:
        return DevicePacking(device, n, at_once, per_copy, peak, packed, limit, threads, why, waves, fp.shared,
                             kept, fp.values)

    if known is None or not known.is_gpu:
        at_once = max(1, min(threads, n))
        why = f"a CPU runs a task per thread ({threads})" if known is not None else "Dask picks the device"
        return record(at_once, peak, -(-n // at_once), why), {c.index: UNIT for c in copies}, \
            [j // at_once for j in range(n)]
    alone = {c.index: threads * UNIT for c in copies}
    if threads <= 1 or n <= 1 or unsized:
        why = "one copy: nothing to pack" if n <= 1 else "gpu_threads is 1: one task at a time" if threads <= 1 \
            else "a copy's size is unknown (declare output: on its call ops): one at a time"
        return record(1, peak, n, why), alone, list(range(n))
    room = None if limit is None else limit - fp.shared - kept
    units = {c.index: _units(fp.running(c.index), room, threads) for c in copies}
    at_once = _most_at_once([units[c.index] for c in copies], threads)
    waves = _waves([units[c.index] for c in copies], threads)
    largest = sum(sorted((fp.running(c.index) for c in copies), reverse=True)[:at_once])
    running = largest if room is None else min(room, largest)
    packed = max(peak, fp.shared + kept + running) if at_once > 1 else peak
    sized = any(u > UNIT for u in units.values())  # some copies take more than a thread's slot: the cap binds
    why = _why(at_once, n, threads, sized, fp, kept, running, packed, limit, [fp.running(c.index) for c in copies])
    return record(at_once, packed, waves[-1] + 1, why), units, waves


def _units(running: int, room: int | None, threads: int) -> int:
    """The slot units a copy takes: one thread's, or its running size's share of the room if more."""
    whole = threads * UNIT
    if room is None or running == 0:
        return UNIT
    if running > room:
        return whole  # it does not fit beside anything: it runs alone
    return min(whole, max(UNIT, -(-running * whole // room)))


def _most_at_once(units: Sequence[int], threads: int) -> int:
    """The most copies whose units fit in the device's slots together: the smallest ones."""
    total, count = 0, 0
    for u in sorted(units):
        if total + u > threads * UNIT:
            break
        total, count = total + u, count + 1
    return max(1, count)


def _waves(units: Sequence[int], threads: int) -> list[int]:
    """Each copy's wave, in index order: a wave takes copies while their units fit in the slots."""
    waves, wave, total = [], 0, 0
    for u in units:
        if total and total + u > threads * UNIT:
            wave, total = wave + 1, 0
        waves.append(wave)
        total += u
    return waves


def _why(at_once: int, n: int, threads: int, sized: bool, fp: _Footprint, kept: int, running: int, packed: int,
         limit: int | None, sizes: Sequence[int]) -> str:
    """The rule in words, with its sum."""
    if at_once == min(threads, n) and not sized:
        shown = f", {format_bytes(packed)} of {format_bytes(limit)} planned" if limit is not None else ""
        return ("every copy" if at_once == n else f"as many as its {threads} threads") + shown
    assert limit is not None  # the cap bounds them
    terms = [f"{format_bytes(fp.shared)} shared"] + ([f"{format_bytes(kept)} kept by the copies"] if kept else [])
    if at_once == 1:
        two = sum(sorted(sizes)[:2])
        total = fp.shared + kept + two
        return f"one at a time: two copies do not fit its cap ({' + '.join(terms)} + {format_bytes(two)} " \
               f"for the two smallest = {format_bytes(total)} of {format_bytes(limit)})"
    if len(set(sizes)) == 1:
        terms.append(f"{at_once} x {format_bytes(sizes[0])} per copy")
        return f"as many as fit its cap: {' + '.join(terms)} = {format_bytes(packed)} of {format_bytes(limit)}"
    terms.append(f"{format_bytes(running)} for the copies running")
    return f"as many as fit its cap by their sizes ({format_bytes(min(sizes))} to {format_bytes(max(sizes))}; " \
           f"{at_once} of the smallest): {' + '.join(terms)} = {format_bytes(packed)} of {format_bytes(limit)}"
