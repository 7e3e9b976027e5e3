"""What happened to each copy of a sweep: the run report's ``sweeps`` and the ``table:`` CSVs.

Read after a run from the op records (each op's worker, start, duration and
last end, reported from inside the worker), the plan's packing and what the
copies' driver decided (``execute.halving``): per copy its values, the
device it ran on, its wave, when it started and stopped (the workers'
clocks, as the ops' ``start``: for a copy with a loop, its loop's first
window's start and last window's end, its other ops running in stages with
every copy's), how it ended (finished, stopped by the sweep's rule, failed)
and its metric curves; per sweep its rule's decisions; per device how many
copies were planned at once, how many the records show at once, and the
peak memory the backend saw against the cap. Nothing here decides anything:
the plan packed, the run enforced it.
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
from .records import LoopOutcome, OpRecord, RunReport, SearchOutcome


def with_sweeps(plan: Plan, report: RunReport, values: dict[str, Any], outcomes: Mapping[str, LoopOutcome],
                searches: Mapping[str, SearchOutcome]) -> tuple[RunReport, dict[str, str]]:
    """The report with its ``sweeps``, and the text of every ``table:`` by the output that writes it.

    ``outcomes``: the staged run's, by loop (how each ended); ``searches``: by sweep, what its copies' driver
    decided and saw (``execute.halving``)."""
    if not plan.spec.sweeps:
        return report, {}
    seen = {d.device: d.peak_bytes_seen for d in report.devices}
    sweeps: dict[str, Any] = {}
    tables: dict[str, str] = {}
    for search in plan.spec.sweeps:
        packing = plan.packing_of(search.name)
        if packing is None:
            continue
        own: dict[int, list[OpRecord]] = {}  # each copy's op records, in one pass
        for record in report.ops:
            op = plan.spec.op_index.get(record.name)
            index = op.scope.copy_in(search.name) if op is not None else None
            if index is not None:
                own.setdefault(index, []).append(record)
        outcome = searches.get(search.name, SearchOutcome())
        stepped = _stepped(plan, search)
        loops: dict[int, LoopOutcome] = {}  # each copy's loops that ended early by their own rule, and how
        windows: dict[int, list[tuple[float, float]]] = {}  # each copy's loops' windows, span by span
        for copy in search.copies:
            for loop in copy.loops:
                ended = outcomes.get(loop)
                if ended is not None and ended.stopped_early:
                    loops[copy.index] = ended
                windows.setdefault(copy.index, []).extend(
                    (float(a), float(b)) for a, b in (report.loops.get(loop) or {}).get("spans", ()))
        spans = {i: sorted(windows.get(i, ())) or [(float(r.start or 0.0), _end(r))
                                                   for r in _timed(search, i, records, stepped.get(i, frozenset()))]
                 for i, records in own.items()}
        copies = [_copy(search, packing, i, own.get(i, []), stepped.get(i, frozenset()), outcome, loops.get(i),
                      sorted(windows.get(i, ()))) for i in range(len(search.copies))]
        best = values.get(f"{search.name}.best")
        sweeps[search.name] = {"params": list(search.params), "copies": copies,
                               "devices": _devices(packing, copies, seen, spans),
                               "allow_failures": search.allow_failures}
        if best is not None and search.select is not None:  # the copy's index (a one-number space's best is its value)
            chosen = list(plan.spec.op_index[f"{search.name}.best"].params.get("values", []))
            index = int(np.asarray(best)) if len(search.params) != 1 else \
                next((i for i, v in enumerate(chosen) if v == np.asarray(best).item()), None)
            sweeps[search.name].update({"selected": index} if index is not None else {})
        sweeps[search.name].update(_rule(search, outcome))
        if search.table is not None and f"{search.name}.table" in values:
            tables[f"{search.name}.table"] = table_text(search, copies, values[f"{search.name}.table"])
    return replace(report, sweeps=sweeps), tables


def fatal_sweeps(report: RunReport) -> list[str]:
    """The sweeps whose failed copies fail the run: those with a failed copy that do not allow failures."""
    return [name for name, sweep in (report.sweeps or {}).items()
            if not sweep["allow_failures"] and any(c["status"] == "failed" for c in sweep["copies"])]


def _rule(search: Search, outcome: SearchOutcome) -> dict[str, Any]:
    """The sweep's rule and its decision table: ``rungs`` (halving) or ``median`` (the median rule)."""
    rule = search.rule
    if rule is None:
        return {}
    kind = "halving" if search.halving is not None else "median"
    said: dict[str, Any] = {"rule": {"kind": kind, "loop": rule.loop, "metric": rule.metric, "mode": rule.mode,
                                     "steps": list(rule.steps)}}
    if search.median is not None:
        said["rule"].update(n_startup=search.median.n_startup, warmup_steps=search.median.warmup_steps,
                            every=search.median.every)
    said["rungs" if kind == "halving" else "median"] = [d.as_dict() for d in outcome.decisions]
    return said


def _stepped(plan: Plan, search: Search) -> dict[int, frozenset[str]]:
    """Each copy's loops' ops (their steps and evaluations): when it ran, its loop's first and last windows."""
    by_name = {loop.name: loop for loop in plan.spec.loops}
    return {copy.index: frozenset(name for loop in copy.loops if loop in by_name
                                  for name in (*by_name[loop].body, *by_name[loop].evaluated))
            for copy in search.copies if copy.loops}


def _timed(search: Search, index: int, own: Sequence[OpRecord], stepped: frozenset[str]) -> list[OpRecord]:
    """Copy ``index``'s op records that say when it ran: its values' ops aside (made whenever, not its work);
    of a copy with a loop, its loop's (its ops before and after the loop run with every copy's in stages of
    their own, and would make every copy start at the first and stop at the last)."""
    values = {search.copies[index].prefix + p for p in search.params}
    ran = [r for r in own if r.start is not None and r.duration is not None and r.name not in values]
    return [r for r in ran if r.name in stepped] or ran


def _end(record: OpRecord) -> float:
    """When an op's last run ended (older records: its first start plus its runs' summed time)."""
    if record.end is not None:
        return float(record.end)
    return float(record.start or 0) + float(record.duration or 0)


def _copy(search: Search, packing: SweepPacking, index: int, own: Sequence[OpRecord], stepped: frozenset[str],
          outcome: SearchOutcome, stopped: LoopOutcome | None,
          windows: Sequence[tuple[float, float]]) -> dict[str, Any]:
    """One copy in the report: ``own`` its op records, ``stepped`` its loops' ops, ``stopped`` how its loop
    ended early by its own rule (or None), ``windows`` when its loop's windows ran (spans of them)."""
    copy = search.copies[index]
    slot = packing.copies[index]
    ran = _timed(search, index, own, frozenset())
    timed = _timed(search, index, own, stepped)
    workers = sorted({r.worker for r in ran if r.worker})
    reused = bool(own) and all(r.cache.startswith("reused") for r in own if r.start is None)
    start = min((float(r.start) for r in timed if r.start is not None), default=None)
    stop = max((_end(r) for r in timed), default=None)
    if windows:  # the loop's windows as they ran (gang windows; the ops' records otherwise)
        start, stop = windows[0][0], max(b for _, b in windows)
    ended = outcome.ends.get(index)
    status = "finished" if ran else ("reused" if reused else "not run")
    errors = [r.error for r in own if r.error and not r.error.startswith("not run:")]
    failed = ended is not None and ended.failed
    if errors or failed or any(r.error for r in own):
        status = "failed"
    out = {"index": index, "id": copy.id, "params": dict(copy.values), "device": slot.device,
           "ran_on": workers, "wave": slot.wave, "start": start, "stop": stop, "status": status}
    if status == "failed":
        out["error"] = ended.reason if failed and ended is not None else \
            errors[0] if errors else next(r.error for r in own if r.error)
    if ended is not None and not ended.failed:  # the sweep's rule stopped it
        out.update(status="stopped", stopped_at_step=ended.step, stop_reason=ended.reason)
    elif stopped is not None:  # its own rule (early_stop, stop_when) ended its loop early
        out.update(stopped_at_step=stopped.stopped_at_step, stop_reason=stopped.stop_reason)
    if len(windows) > 1:  # its sweep's rule paused it at its decision steps: when it ran, span by span
        out["spans"] = [list(span) for span in windows]
    if index in outcome.curves:
        out["curves"] = [c.as_dict() for c in outcome.curves[index]]
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
