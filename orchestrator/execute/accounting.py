"""The run report, built from what the workers recorded, and the check that the plan was kept.

Every op records, from inside the worker that ran it, where it ran, when,
for how long and how many bytes it made (``runtime.Runtime.record``); the
runner drains those records once per run. Here they become the run
report's :class:`~orchestrator.execute.records.OpRecord` per op, and each op's
worker is compared with its planned device: any difference fails the run
(an op whose record died with a restarted worker is reported as
unverified instead).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping, Sequence

from ..devices import DeviceSpec
from ..errors import OrchestratorError, PlacementMismatch
from ..plan.records import Plan
from .records import DeviceRecord, OpRecord


def op_records(plan: Plan, events: Sequence[Mapping[str, Any]]) -> tuple[tuple[OpRecord, ...], int]:
    """One record per op of the plan (in plan order), and the bytes loop windows sent worker to worker."""
    ran: dict[str, Mapping[str, Any]] = {}
    failures: dict[str, int] = {}
    errors: dict[str, str] = {}  # a sweep copy's op that failed (or did not run because one before it did)
    moved = 0
    for e in events:
        if e.get("kind") == "op":
            ran[e["op"]] = e
        elif e.get("kind") == "copy-failed":
            errors[e["op"]] = str(e.get("error", ""))
        elif e.get("kind") == "failed":
            failures[e["op"]] = failures.get(e["op"], 0) + int(e.get("count", 1))
        elif e.get("kind") == "exchange":
            moved += int(e.get("bytes", 0)) * int(e.get("count", 1))
    records = []
    for p in plan.placements:
        e = ran.get(p.op, {})
        records.append(OpRecord(p.op, p.kind, p.device_name, e.get("ran_on"), e.get("start"), e.get("duration"),
                                e.get("bytes"), failures.get(p.op, 0), e.get("count"), p.why(),
                                error=errors.get(p.op, ""), end=e.get("end")))
    return tuple(records), moved


def by_device(drained: Mapping[str, Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """What each worker drained, one entry per device: a host worker's ``seats`` as if each came from a worker
    of its own (the first under the worker's address: a Dask transfer from that process names its first device)."""
    out: dict[str, Mapping[str, Any]] = {}
    for address, said in drained.items():
        for i, each in enumerate(said.get("seats") or [said]):
            out[address if i == 0 else f"{address} {each['ran_on']}"] = each
    return out


def device_records(plan: Plan, stats: Mapping[str, Mapping[str, Any]]) -> tuple[DeviceRecord, ...]:
    out = []
    for m in plan.memory:
        seen = next((s for s in stats.values() if s.get("ran_on") == m.device), {})
        out.append(DeviceRecord(m.device, len(m.ops), m.peak, m.limit, seen.get("peak"), seen.get("backend")))
    return tuple(out)


def verify(records: Sequence[OpRecord], not_run: Mapping[str, str],
           restarted: set[str]) -> tuple[tuple[OpRecord, ...], tuple[str, ...]]:
    """Records with their notes, and the ops that cannot be verified; raises when an op ran elsewhere."""
    wrong, unverified, checked = [], [], []
    for record in records:
        if record.name in not_run:
            record = replace(record, note=not_run[record.name])
        elif record.worker is None and record.planned_device in restarted:
            unverified.append(record.name)  # its record died with the worker that ran it
        elif record.worker is None:
            wrong.append(f"{record.name}: no record of where it ran (planned {record.planned_device})")
        elif record.worker != record.planned_device and \
                not DeviceSpec.parse(record.planned_device).matches(_spec_or_empty(record.worker)):
            wrong.append(f"{record.name}: ran on {record.worker}, planned {record.planned_device}")
        checked.append(record)
    if wrong:
        raise PlacementMismatch("ops did not run where planned:\n  " + "\n  ".join(wrong))
    return tuple(checked), tuple(unverified)


def _spec_or_empty(text: str) -> DeviceSpec:
    try:
        return DeviceSpec.parse(text)
    except OrchestratorError:
        return DeviceSpec()
