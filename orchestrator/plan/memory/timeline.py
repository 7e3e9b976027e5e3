"""The schedule the memory plan follows, its positions, and the scopes of a plan with loops.

The units are the tasks a run makes outside loops and one step of each loop
(:func:`schedule`); every op has a position in their order. A :class:`Held`
is bytes a device holds from one position to another, both included: the
peak of a device is the largest sum of them at a position where one of its
ops runs. :class:`Scopes` says, per op, which loop runs it and in which
stage of a run the driver runs it (a run with loops is staged: the ops a
loop needs, the loop, the ops its results feed, ...).
"""

from __future__ import annotations

import bisect
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from ..records import Plan
from ...spec.records import Loop, Op, OpRef, Spec

Key = tuple[str, int]  # (op, output index)
SCAN = 64  # tasks of a device looked at for the one that lets a value go: beyond, it is held to the end


@dataclass(frozen=True)
class Held:
    """``size`` bytes on a device from position ``start`` to ``stop`` (both included); ``what`` names them, and
    ``key`` is the value they are of (its op and output: which copy of a sweep owns them, if any)."""

    start: int
    stop: int
    size: int
    what: str
    key: Key


Placed = tuple[str, Held]  # (device, what it holds)


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


@dataclass(frozen=True)
class Timeline:
    """Every op's position, the bounds of every unit, and per device its units in order."""

    order: tuple[str, ...]
    step_of: Mapping[str, int]
    unit_of: Mapping[str, int]
    first: tuple[int, ...]  # per unit: the position of its first op
    last: tuple[int, ...]  # per unit: the position of its last op
    device_of: Mapping[str, str]
    units_on: Mapping[str, tuple[int, ...]]  # device -> its units, in order
    starts_on: Mapping[str, tuple[int, ...]]  # device -> the first position of each of its units
    reads_from: Mapping[int, frozenset[int]]  # unit -> the units it waits for (data or control)
    # by position, what the mappings above say by name: planners walk the ops in this order and look each
    # up here by index (a lookup by name costs more per op the larger the plan: ``benchmarks/README.md``, B2)
    ops: tuple[Op, ...] = ()
    unit_at: tuple[int, ...] = ()
    device_at: tuple[str, ...] = ()
    unit_device: tuple[str, ...] = ()  # per unit: its device
    waiting: dict[tuple[int, int], bool] = field(default_factory=dict, compare=False)  # waits_for, worked out

    @property
    def end(self) -> int:
        """The position after the last op: a value held to the end of the run is held to here."""
        return len(self.order)

    def released(self, device: str, start: int, readers: Collection[int]) -> int:
        """The last position ``device`` holds a value Dask keeps for the tasks ``readers``, held from ``start``.

        Dask forgets a key once the last task reading it anywhere has ended, by a message from the
        scheduler. Devices run side by side, so until then the device may run any of its tasks that
        do not wait for all those readers; and a task it already had ready when its own last reader
        ended may run before the message arrives. The value is gone by the first of its tasks that
        waits for every reader elsewhere and is not such a ready one; without one, it is counted to
        the end (looking at most ``SCAN`` tasks ahead).
        """
        near = [u for u in readers if self.unit_device[u] == device]
        far = [u for u in readers if self.unit_device[u] != device]
        last_near = max(near, key=self.last.__getitem__) if near else None
        after = max([start] + [self.last[u] for u in near])
        units = self.units_on.get(device, ())
        i = bisect.bisect_right(self.starts_on.get(device, ()), after)
        for k, unit in enumerate(units[i:i + SCAN]):
            if all(self.waits_for(unit, u) for u in far) and \
                    (last_near is None or k > 0 or self.waits_for(unit, last_near)):
                return self.first[unit] - 1
        return self.end

    def arrives(self, device: str, unit: int) -> int:
        """The first position at which a value of ``unit`` may be on ``device``, moved there as soon as it
        exists: after the last task of the device that ``unit`` waits for (looking at most ``SCAN`` back)."""
        units = self.units_on.get(device, ())
        i = bisect.bisect_left(self.starts_on.get(device, ()), self.first[unit])
        for back in range(i - 1, max(-1, i - 1 - SCAN), -1):
            if self.waits_for(unit, units[back]):
                return self.last[units[back]] + 1
        return self.first[units[max(0, i - SCAN)]] if units else self.first[unit]

    def waits_for(self, unit: int, earlier: int) -> bool:
        """Does ``unit`` wait, through any chain of tasks, for unit ``earlier`` to end?"""
        found = self.waiting.get((unit, earlier))
        if found is None:
            seen, todo = {unit}, [unit]
            found = False
            while todo and not found:
                for dep in self.reads_from[todo.pop()]:
                    # a task waits only for tasks before it: none before ``earlier`` can lead to it
                    if dep == earlier:
                        found = True
                    elif dep not in seen and self.first[dep] > self.last[earlier]:
                        seen.add(dep)
                        todo.append(dep)
            self.waiting[(unit, earlier)] = found
        return found


def timeline(plan: Plan, granularity: str) -> Timeline:
    """The positions of ``plan``'s ops in the schedule the runner follows at ``granularity``."""
    index = plan.spec.op_index
    units = schedule(plan, granularity)
    order = tuple(name for unit in units for name in unit)
    step_of = {name: i for i, name in enumerate(order)}
    unit_at = tuple(u for u, unit in enumerate(units) for _ in unit)
    unit_of = dict(zip(order, unit_at))
    device_of = {p.op: p.device_name for p in plan.placements}
    ops = tuple(index[name] for name in order)
    device_at = tuple(device_of[name] for name in order)
    first = tuple(step_of[unit[0]] for unit in units)
    last = tuple(step_of[unit[-1]] for unit in units)
    unit_device = tuple(device_at[f] for f in first)
    on: dict[str, list[int]] = {}
    for u, device in enumerate(unit_device):
        on.setdefault(device, []).append(u)
    reads: list[set[int]] = [set() for _ in units]
    for u, op in zip(unit_at, ops):
        waits = reads[u]
        for ref in op.inputs:
            dep = unit_of.get(ref.op)
            if dep is not None:
                waits.add(dep)
        for name in op.after:
            dep = unit_of.get(name)
            if dep is not None:
                waits.add(dep)
    return Timeline(order, step_of, unit_of, first, last, device_of,
                    {d: tuple(us) for d, us in on.items()}, {d: tuple(first[u] for u in us) for d, us in on.items()},
                    {u: frozenset(w - {u}) for u, w in enumerate(reads)}, ops, unit_at, device_at, unit_device)


def size_of(spec: Spec, key: Key) -> int | None:
    """The bytes of output ``key[1]`` of op ``key[0]``, or None when its size is unknown."""
    op = spec.op(key[0])
    return spec.value(OpRef(key[0], key[1] if op.outputs > 1 else None)).nbytes


def sizes(spec: Spec, op: Op) -> tuple[int | None, ...]:
    """The bytes of each output of ``op`` (None where unknown): :func:`size_of` of each, the op in hand."""
    infos = spec.values.get(op.name, ())
    if op.outputs == 1:
        return (infos[0].nbytes if infos else None,)
    return tuple(infos[i].nbytes if i < len(infos) else None for i in range(op.outputs))


def label(spec: Spec, key: Key) -> str:
    """``op``, or ``op:i`` for an output of an op with several."""
    return key[0] if spec.op(key[0]).outputs == 1 else f"{key[0]}:{key[1]}"


def key_of(ref: OpRef) -> Key:
    return ref.op, ref.output or 0


@dataclass(frozen=True)
class Scopes:
    """Which loop runs each op, and the stage of a run each op outside loops belongs to."""

    loop_of: Mapping[str, Loop]  # a body op -> the innermost loop running it (a loop's exports: none)
    parent: Mapping[str, Loop | None]  # loop -> the loop holding it
    placeholders: Mapping[str, Loop]  # a state's op -> its loop
    exports: Mapping[str, Loop]  # NAME.state and NAME.metric -> the loop
    stage: Mapping[str, frozenset[str]]  # op -> the loops (outside any loop) that must end before it runs

    def in_loop(self, name: str) -> bool:
        return name in self.loop_of

    def own(self, loop: Loop) -> tuple[str, ...]:
        """The ops a step of ``loop`` runs itself: its body but for its states and its inner loops' ops."""
        return tuple(n for n in loop.body if self.loop_of.get(n) is loop and n not in self.placeholders)


def scopes(plan: Plan) -> Scopes:
    spec = plan.spec
    loop_of = {op.name: spec.loop(op.scope.loop) for op in spec.ops
               if op.scope.loop is not None and op.scope.role in ("step", "state")}
    exports = {name: lp for lp in spec.loops for name in lp.exports}
    for name, lp in exports.items():  # an inner loop's exports are its enclosing loop's values
        if lp.parent is not None:
            loop_of[name] = spec.loop(lp.parent)
    placeholders = {var.placeholder: lp for lp in spec.loops for var in lp.state}
    stage: dict[str, frozenset[str]] = {}
    # in the plan's order: every value before its readers, a loop's body before its exports
    for p in plan.placements if spec.loops else ():  # without loops a run is one stage
        op = spec.op(p.op)
        before = frozenset().union(*(stage.get(dep, frozenset()) for dep in (*(r.op for r in op.inputs), *op.after)))
        loop = exports.get(p.op)
        if loop is not None and loop.parent is None:  # a loop's results: after it and what it read
            before = before.union(*(stage.get(n, frozenset()) for n in loop.body), {loop.name})
        stage[p.op] = before
    return Scopes(loop_of, {lp.name: spec.loop(lp.parent) if lp.parent else None for lp in spec.loops},
                  placeholders, exports, stage)
