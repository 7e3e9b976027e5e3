"""What changes between two plans: ops added, removed and moved, transfers, peak memory per device.

``orchestrate plan new.yaml --diff old.yaml`` reviews a change to a spec the
way a pull request needs it: not the whole plan again, only what moved. Ops
are matched by name (construct copies by their expanded names,
``towers/0/c``); an op "moved" when its planned device changed, and the
diff keeps the new plan's *why* (the rule, scope or default that decided
it). Transfers are compared as the sets of planned moves (value, from
device, to device); memory as each device's planned peak, before and after.

Everything here is computed from two :class:`~orchestrator.plan.records.Plan`
records alone: no user code, no cluster. Renderers live in
``orchestrator.report.diff``.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from .records import DeviceMemory, Placement, Plan

FAIL_CONDITIONS = ("memory", "moved")  # what ``--fail-on`` accepts


@dataclass(frozen=True)
class OpEntry:
    """An op only one of the plans has: where it runs there, why, and where it is written."""

    op: str
    kind: str
    device: str
    why: str
    file: str
    line: int
    column: int


@dataclass(frozen=True)
class MovedOp:
    """An op both plans have, planned on another device now; ``why`` is the new plan's reason."""

    op: str
    kind: str
    before: str
    after: str
    why: str
    why_before: str
    file: str  # the new spec, where the change was made
    line: int
    column: int


@dataclass(frozen=True)
class PlannedMove:
    """A value the plan sends from one device to another (once per consuming device)."""

    value: str
    source: str
    target: str
    nbytes: int | None


@dataclass(frozen=True)
class MemoryChange:
    """One device's planned peak before and after; ``None`` where that plan puts no op on it."""

    device: str
    before: int | None
    after: int | None
    limit_before: int | None
    limit_after: int | None
    lower_bound_before: bool  # ops of unknown size count as zero: the peak is at least this
    lower_bound_after: bool
    peak_op: str | None  # the op at the new peak (the old one's when the device is no longer used)
    file: str
    line: int
    column: int

    @property
    def delta(self) -> int:
        return (self.after or 0) - (self.before or 0)

    @property
    def grew(self) -> bool:
        return self.delta > 0

    @property
    def changed(self) -> bool:
        # None != 0: a device newly used (or no longer used) is a change even when its peak is 0 bytes
        return (self.before, self.limit_before, self.lower_bound_before) != \
            (self.after, self.limit_after, self.lower_bound_after)


@dataclass(frozen=True)
class PlanDiff:
    """The difference of two plans of (usually) two versions of one spec."""

    old_file: str
    new_file: str
    old_name: str
    new_name: str
    added: tuple[OpEntry, ...]
    removed: tuple[OpEntry, ...]
    moved: tuple[MovedOp, ...]
    transfers_added: tuple[PlannedMove, ...]
    transfers_removed: tuple[PlannedMove, ...]
    memory: tuple[MemoryChange, ...]  # every device either plan uses, in the new cluster's order

    @property
    def memory_changes(self) -> tuple[MemoryChange, ...]:
        return tuple(m for m in self.memory if m.changed)

    @property
    def memory_grown(self) -> tuple[MemoryChange, ...]:
        return tuple(m for m in self.memory if m.grew)

    @property
    def empty(self) -> bool:
        return not (self.added or self.removed or self.moved or self.transfers_added or self.transfers_removed
                    or self.memory_changes)

    def fails(self, conditions: Collection[str]) -> bool:
        """Whether ``--fail-on`` conditions hold: ``moved`` (any op moved), ``memory`` (any peak grew)."""
        return ("moved" in conditions and bool(self.moved)) or ("memory" in conditions and bool(self.memory_grown))


def _where(plan: Plan, op: str) -> tuple[str, int, int]:
    spec = plan.spec
    line, column = spec.document.locate(spec.op(op).path)
    return spec.file, line, column


def _entry(plan: Plan, p: Placement) -> OpEntry:
    return OpEntry(p.op, p.kind, p.device_name, p.why(), *_where(plan, p.op))


def _moves(plan: Plan) -> dict[tuple[str, str, str], PlannedMove]:
    """The plan's transfers as a set, in the order they first appear (placements are in execution order)."""
    out: dict[tuple[str, str, str], PlannedMove] = {}
    for p in plan.placements:
        for t in p.transfers:
            key = (str(t.ref), t.source, t.target)
            out.setdefault(key, PlannedMove(*key, t.nbytes))
    return out


def _memory(new: Plan, old: Plan) -> tuple[MemoryChange, ...]:
    before: dict[str, DeviceMemory] = {m.device: m for m in old.memory}
    after: dict[str, DeviceMemory] = {m.device: m for m in new.memory}
    # Cluster order (a device the new plan no longer uses stays in its place); devices outside the
    # cluster's list (GPU:* of ops Dask places) go last, in the plans' order.
    cluster = new.spec.cluster
    rank = {d.name: i for i, d in enumerate(cluster.before_loss or cluster.devices)}  # a re-plan's lost ones too
    devices = sorted([*after, *(d for d in before if d not in after)], key=lambda d: rank.get(d, len(rank)))
    out = []
    for device in devices:
        b, a = before.get(device), after.get(device)
        # An annotation needs a place in a file: the op at the peak, in the plan that has the device.
        where, peak_op = (new, a.peak_op) if a is not None else (old, b.peak_op if b else None)
        file, line, column = _where(where, peak_op) if peak_op else (where.spec.file, 1, 1)
        out.append(MemoryChange(
            device, b.peak if b else None, a.peak if a else None, b.limit if b else None, a.limit if a else None,
            bool(b and b.unknown), bool(a and a.unknown), peak_op, file, line, column))
    return tuple(out)


def diff_plans(new: Plan, old: Plan) -> PlanDiff:
    """What changed from ``old`` to ``new``: ops by name, transfers as sets, peaks per device."""
    old_at, new_at = old.placement_index, new.placement_index
    added = tuple(_entry(new, p) for p in new.placements if p.op not in old_at)
    removed = tuple(_entry(old, p) for p in old.placements if p.op not in new_at)
    moved = tuple(
        MovedOp(p.op, p.kind, old_at[p.op].device_name, p.device_name, p.why(), old_at[p.op].why(),
                *_where(new, p.op))
        for p in new.placements if p.op in old_at and old_at[p.op].device_name != p.device_name)
    old_moves, new_moves = _moves(old), _moves(new)
    return PlanDiff(
        old.spec.file, new.spec.file, old.spec.name, new.spec.name, added, removed, moved,
        tuple(m for key, m in new_moves.items() if key not in old_moves),
        tuple(m for key, m in old_moves.items() if key not in new_moves),
        _memory(new, old))
