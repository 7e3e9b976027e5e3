"""The run's live page, the client's half: what the run already knows, sent to the scheduler as it learns it.

Policy. The page (``execute.page``, served by the scheduler) shows what the
plan said beside what the run does. The plan's part goes once, as the run
starts: each device's planned peak and cap, the bytes the plan moves into
each device (each transfer times the steps of the loops that run its op),
each loop's steps and metrics, each sweep's copies by device and wave. Then
the news the driver already has, and nothing it would have to ask for: a
loop's window as read (its step, its new metric points, early stopping's
state, its last checkpoint), a sweep's decisions, a copy's failure, the
run's end. What each device holds and runs now comes from the workers'
own heartbeats, not from here.

The news rides on the client's stream to the scheduler (the one its graphs
take) and nobody waits for an answer. It goes at most every
:data:`INTERVAL` seconds; a loop's end or stop, a copy's failure, a
decision and the run's end go at once. So a window's read never waits on
the page, and a loop of 10,000 windows does not send 10,000 messages: a
message carries every point since the last one.

State: per loop its news not sent yet, how many points of each of its
series and evaluations were taken, when its first window was read (its
steps per second); the decisions not sent yet; when the last message went.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from ..ops.training import evaluation_steps
from ..plan.records import Plan
from ..spec.records import Op, Spec
from ..spec.searches import Halving, Median
from .records import LoopNews, RunResult, SweepNews

INTERVAL = 0.5  # seconds: the most often a message goes, bar the ones that go at once
Send = Callable[[dict[str, Any]], None]


class LiveFeed:
    def __init__(self, plan: Plan, run: str, send: Send):
        self.run, self.send = run, send
        self.pending: dict[str, dict[str, Any]] = {}  # loop -> its news not sent yet
        self.taken: dict[tuple[str, str], int] = {}  # (loop, metric) -> its points taken so far
        self.began: dict[str, tuple[float, int]] = {}  # loop -> (when, step) its first window was read
        self.decisions: list[dict[str, Any]] = []
        self.last = time.perf_counter()
        send({"run": run, "status": "running", "started": time.time(), "plan": plan_summary(plan)})

    def loop_progress(self, loop: str, done: int, steps: int, note: str = "") -> None:
        entry = self.pending.setdefault(loop, {})
        began = self.began.setdefault(loop, (time.perf_counter(), done))
        elapsed = time.perf_counter() - began[0]
        entry.update(step=done, steps=steps)
        if done > began[1] and elapsed > 0:
            entry["rate"] = (done - began[1]) / elapsed
        ended = note.startswith("stopped") or done >= steps
        entry["state"] = note if note.startswith("stopped") else "done" if done >= steps else "running"
        self.flush(force=ended)

    def tell(self, news: LoopNews | SweepNews) -> None:
        if isinstance(news, SweepNews):
            self.decisions.append({"sweep": news.sweep, **news.decision.as_dict()})
            self.flush(force=True)
            return
        entry = self.pending.setdefault(news.loop, {})
        entry.setdefault("step", news.step)
        entry.setdefault("steps", news.steps)
        series = entry.setdefault("series", {})
        for name, values in news.series.items():
            at = self.taken.get((news.loop, name), 0)
            series.setdefault(name, []).extend([i + 1, _number(v)] for i, v in enumerate(values[at:], start=at))
            self.taken[(news.loop, name)] = max(at, len(values))
        evaluations = entry.setdefault("evaluations", {})
        for name, rows in news.evaluations.items():
            at = self.taken.get((news.loop, f"eval:{name}"), 0)
            evaluations.setdefault(name, []).extend([int(s), _number(v)] for s, v in rows[at:])
            self.taken[(news.loop, f"eval:{name}")] = max(at, len(rows))
        if news.stopping:
            entry["stopping"] = {k: _number(v) if isinstance(v, float) else v for k, v in news.stopping.items()}
        if news.checkpoint is not None:
            entry["checkpoint"] = news.checkpoint
        if news.failed:
            entry.update(state=f"failed: {news.failed}", step=news.step)
        self.flush(force=bool(news.failed) or news.step >= news.steps)  # (the loop's last window: its last points)

    def flush(self, force: bool = False, **extra: Any) -> None:
        """Send the news so far: now if ``force``, else once :data:`INTERVAL` has passed since the last."""
        now = time.perf_counter()
        if not force and now - self.last < INTERVAL:
            return
        if not (self.pending or self.decisions or extra):
            return
        self.send({"run": self.run, "loops": self.pending, "decisions": self.decisions, **extra})
        self.pending, self.decisions, self.last = {}, [], now

    def copies_ended(self, result: RunResult) -> RunResult:
        """Each copy's end as the run's report has it: what the page shows of the copies that run no loop, whose
        ops it is not told of one by one. The result, as it was."""
        copies = {name: {str(c["index"]): c["status"] for c in sweep.get("copies", ())}
                  for name, sweep in result.run_report.sweeps.items()}  # (not ``report``: the whole dict)
        if copies:
            self.flush(force=True, copies=copies)
        return result

    @contextlib.contextmanager
    def ending(self) -> Iterator[None]:
        """Around the run: its end (``finished``, or ``failed`` and the error's first line) goes with the last news."""
        try:
            yield
        except BaseException as exc:
            said = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            self.flush(force=True, status="failed", ended=time.time(), error=said)
            raise
        self.flush(force=True, status="finished", ended=time.time())


def _number(value: Any) -> float | None:
    """A metric's value as JSON takes it: a float, None for NaN or a value that is no scalar."""
    try:
        number = float(np.asarray(value))
    except (TypeError, ValueError):
        return None
    return None if math.isnan(number) or math.isinf(number) else number


def plan_summary(plan: Plan) -> dict[str, Any]:
    """What the page shows of the plan: its devices, the bytes it moves into each, its loops and sweeps."""
    spec = plan.spec
    memory = {m.device: m for m in plan.memory}
    planned: dict[str, list[int]] = {}  # device -> [bytes, transfers, of unknown size]
    for placement in plan.placements:
        times = _runs(spec, spec.op(placement.op))
        for transfer in placement.transfers:
            into = planned.setdefault(transfer.target, [0, 0, 0])
            into[0] += (transfer.nbytes or 0) * times
            into[1] += times
            into[2] += transfer.nbytes is None
    devices = []
    for device in spec.cluster.devices:
        held = memory.get(device.name)
        devices.append({"name": device.name, "kind": "GPU" if device.is_gpu else "CPU", "threads": device.threads,
                        "peak": held.peak if held else None, "peak_op": held.peak_op if held else None,
                        "cap": held.limit if held else None, "unknown": len(held.unknown) if held else 0,
                        "planned_in": planned.get(device.name, [0, 0, 0])})
    loops = [{"name": loop.name, "steps": loop.steps, "parent": loop.parent,
              "metrics": [name for name, _ in loop.metrics],
              "evaluations": [name for name, _ in loop.evaluation.metrics] if loop.evaluation else [],
              "early_stop": [rule.metric for rule in loop.stopping if rule.patience is not None],
              "checkpoint_every": loop.checkpoint.every if loop.checkpoint else None} for loop in spec.loops]
    return {"name": spec.name, "devices": devices, "loops": loops, "sweeps": _sweeps(plan)}


def _sweeps(plan: Plan) -> list[dict[str, Any]]:
    out = []
    for search in plan.spec.sweeps:
        packing = next((p for p in plan.packing if p.name == search.name), None)
        slots = {slot.index: slot for slot in packing.copies} if packing is not None else {}
        rule = search.rule
        copies = [{"index": copy.index, "id": copy.id, "values": {k: _plain(v) for k, v in copy.values.items()},
                   "device": slots[copy.index].device if copy.index in slots else None,
                   "wave": slots[copy.index].wave if copy.index in slots else None, "loops": list(copy.loops),
                   "ruled": search.ruled_loop(copy)} for copy in search.copies]
        out.append({"name": search.name, "copies": copies, "rule": _rule(rule)})
    return out


def _rule(rule: Halving | Median | None) -> dict[str, Any] | None:
    if rule is None:
        return None
    return {"kind": "halving" if isinstance(rule, Halving) else "median", "metric": rule.metric, "mode": rule.mode,
            "steps": list(rule.steps)}


def _plain(value: Any) -> Any:
    """A copy's value as JSON takes it (numbers, strings, lists of them); anything else as its text."""
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    if isinstance(value, Sequence) and not isinstance(value, (bytes, bytearray)):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    return str(value)


def _runs(spec: Spec, op: Op) -> int:
    """How many times the plan runs ``op``: once, times the steps (or evaluations) of each loop around it."""
    times, name, role = 1, op.scope.loop, op.scope.role
    while name is not None:
        loop = spec.loop(name)
        if role == "evaluation" and loop.evaluation is not None:
            times *= len(evaluation_steps(loop.steps, loop.evaluation.every))
        elif role == "step":
            times *= loop.steps
        name, role = loop.parent, "step"
    return times
