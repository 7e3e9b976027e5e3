"""What happened to each copy of a sweep: the run report's ``sweeps`` and the ``table:`` CSVs.

Read after a run from the op records (each op's worker, start and duration,
reported from inside the worker) and the plan's packing: per copy its
values, the device it ran on, its planned wave, when its first op started
and its last op stopped (the workers' clocks, as the ops' ``start``), and
per device how many copies were planned at once, how many the records show
at once, and the peak memory the backend saw against the cap. Nothing here
decides anything: the plan packed, the run enforced it.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from ..plan.records import Plan, SweepPacking
from ..spec.records import Search
from .records import OpRecord, RunReport


def with_sweeps(plan: Plan, report: RunReport, values: dict[str, Any],
                outcomes: Mapping[str, Mapping[str, Any]]) -> tuple[RunReport, dict[str, str]]:
    """The report with its ``sweeps``, and the text of every ``table:`` by the output that writes it.

    ``outcomes``: the staged run's, by loop (how each ended) and by halving sweep (its rung table). A failed
    copy's rows of the gathered values and the table are made NaN in ``values``: the gathered op may have
    run before one of the copy's later ops failed."""
    if not plan.spec.sweeps:
        return report, {}
    seen = {d.device: d.peak_bytes_seen for d in report.devices}
    sweeps: dict[str, Any] = {}
    tables: dict[str, str] = {}
    for search, packing in zip(plan.spec.sweeps, plan.packing):
        own: dict[int, list[OpRecord]] = {}  # each copy's op records, in one pass
        for record in report.ops:
            copy = search.copy_of(record.name)
            if copy is not None:
                own.setdefault(copy.index, []).append(record)
        loops = {}  # each copy's loops that ended early, and how
        for loop, outcome in outcomes.items():
            copy = search.copy_of(loop)
            if copy is not None and outcome.get("stop_reason", "steps") != "steps":
                loops[copy.index] = outcome
        copies = [_copy(search, packing, i, own.get(i, []), loops.get(i)) for i in range(len(search.copies))]
        _blank_failed(plan, search, [c["index"] for c in copies if c["status"] == "failed"], values)
        spans = {i: [(float(r.start), float(r.start) + float(r.duration or 0)) for r in records if r.start is not None]
                 for i, records in own.items()}
        best = values.get(f"{search.name}.best")
        sweeps[search.name] = {"params": list(search.params), "copies": copies,
                               "devices": _devices(packing, copies, seen, spans),
                               "allow_failures": search.allow_failures}
        if best is not None and search.select is not None and len(search.params) != 1:
            sweeps[search.name]["selected"] = int(np.asarray(best))
        if search.halving is not None:
            sweeps[search.name]["rungs"] = list((outcomes.get(search.name) or {}).get("rungs") or [])
        if search.table is not None and f"{search.name}.table" in values:
            tables[f"{search.name}.table"] = table_text(search, copies, values[f"{search.name}.table"])
    return replace(report, sweeps=sweeps), tables


def fatal_sweeps(report: RunReport) -> list[str]:
    """The sweeps whose failed copies fail the run: those with a failed copy that do not allow failures."""
    return [name for name, sweep in (report.sweeps or {}).items()
            if not sweep["allow_failures"] and any(c["status"] == "failed" for c in sweep["copies"])]


def _blank_failed(plan: Plan, search: Search, failed: Sequence[int], values: dict[str, Any]) -> None:
    """Each failed copy's rows of the sweep's gathered values and table: NaN, as a gather of a failed op gives."""
    if not failed:
        return
    for op in plan.spec.ops:
        if op.group != search.name or op.kind != "stack" or op.name not in values:
            continue
        rows = np.array(values[op.name], dtype=float)  # a copy: the value may be read-only, or of integers
        per_copy = len(op.inputs) // len(search.copies)  # the table: its metrics, copy by copy
        grid = rows.reshape(len(search.copies), per_copy, *rows.shape[1:]) if per_copy > 1 else rows
        grid[list(failed)] = np.nan
        values[op.name] = grid.reshape(rows.shape)


def _copy(search: Search, packing: SweepPacking, index: int, own: Sequence[OpRecord],
          stopped: Mapping[str, Any] | None) -> dict[str, Any]:
    """One copy in the report: ``own`` its op records, ``stopped`` how its loop ended early (or None)."""
    copy = search.copies[index]
    slot = packing.copies[index]
    values = {copy.prefix + p for p in search.params}  # its values as ops: made whenever, not its work
    ran = [r for r in own if r.start is not None and r.duration is not None and r.name not in values]
    workers = sorted({r.worker for r in ran if r.worker})
    reused = bool(own) and all(r.cache.startswith("reused") for r in own if r.start is None)
    start = min((float(r.start) for r in ran if r.start is not None), default=None)
    stop = max((float(r.start or 0) + float(r.duration or 0) for r in ran), default=None)
    status = "finished" if ran else ("reused" if reused else "not run")
    errors = [r.error for r in own if r.error and not r.error.startswith("not run:")]
    if errors or any(r.error for r in own):
        status = "failed"
    out = {"index": index, "id": copy.id, "params": dict(copy.values), "device": slot.device,
           "ran_on": workers, "wave": slot.wave, "start": start, "stop": stop, "status": status}
    if status == "failed":
        out["error"] = errors[0] if errors else next(r.error for r in own if r.error)
    if stopped is not None:  # a loop of the copy that halving (or its own rule) stopped early
        halved = str(stopped["stop_reason"]).startswith("halving")
        out.update(status="stopped" if halved else status, stopped_at_step=stopped.get("stopped_at_step"),
                   stop_reason=stopped["stop_reason"])
    return out


def _devices(packing: SweepPacking, copies: Sequence[Mapping[str, Any]], seen: Mapping[str, int | None],
             spans: Mapping[int, list[tuple[float, float]]]) -> dict[str, Any]:
    out = {}
    for d in packing.devices:
        here = {c["index"]: spans.get(c["index"], []) for c in copies if c["device"] == d.device}
        out[d.device] = {"copies": d.copies, "at_once": d.at_once, "waves": d.waves,
                         "most_at_once_seen": most_at_once(here), "per_copy_bytes": d.per_copy,
                         "planned_peak_bytes": d.peak, "peak_bytes_seen": seen.get(d.device), "limit_bytes": d.limit,
                         "why": d.why}
    return out


def most_at_once(spans: Mapping[int, Sequence[tuple[float, float]]]) -> int:
    """The most copies with an op running at one time (each copy's ops' (start, stop) as its worker timed
    them; a stop before a start at the same instant): what ran side by side, not interleaved."""
    events = sorted([(start, 1, copy) for copy, ops in spans.items() for start, _ in ops] +
                    [(stop, -1, copy) for copy, ops in spans.items() for _, stop in ops], key=lambda e: (e[0], e[1]))
    running: dict[int, int] = {}
    most = 0
    for _, change, copy in events:
        running[copy] = running.get(copy, 0) + change
        most = max(most, sum(1 for n in running.values() if n > 0))
    return most


def table_text(search: Search, copies: Sequence[Mapping[str, Any]], metrics: Any) -> str:
    """The CSV of ``table:``: a row per copy, its id, values, metrics, device, wave, times and status."""
    assert search.table is not None
    names = search.table.metrics
    grid = np.asarray(metrics, dtype=float).reshape(len(copies), len(names))
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["copy", "id", *search.params, *names, "device", "wave", "start_s", "stop_s", "status"])
    began = min((c["start"] for c in copies if c["start"] is not None), default=0.0)
    for copy, row in zip(copies, grid):
        writer.writerow([copy["index"], copy["id"], *(copy["params"][p] for p in search.params),
                         *(repr(float(v)) for v in row), copy["device"], copy["wave"],
                         _since(copy["start"], began), _since(copy["stop"], began), copy["status"]])
    return out.getvalue()


def _since(value: float | None, began: float) -> str:
    """Seconds since the sweep's first copy started (the report keeps the workers' clock)."""
    return "" if value is None else f"{value - began:.6f}"
