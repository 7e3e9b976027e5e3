"""A sweep's copies of a training loop: stepped side by side in waves, decided together, failing alone.

Policy. Every copy's loop runs window by window (``TrainingLoop.stepwise``),
the copies in turn, a window each, so that each has a window on the cluster
while the driver reads another's. A device takes its copies in the plan's
waves (``Plan.packing``): ``at_once`` of them step side by side, and the
next wave starts once every copy of the wave before has reached the step the
driver is going to (the loop's end, or the rule's next decision step), so
what a device holds at once is what the plan packed, and a copy's start and
stop show its wave. Copies whose loop spans devices take one lane, one at a
time (two loops exchanging values across devices could each hold a device
the other waits for).

With a rule (``halving:``, ``median:``; :mod:`.rules`), the loops are read
at its decision steps and go no further until the driver has decided
(``TrainingLoop.holds``): the driver brings every copy still running to the
step, then decides on all of them together, so no copy's fate depends on
which one got there first, and the same spec decides the same way on any
cluster. A stopped copy's loop ends at that step (its final states are the
step's; its metric series and evaluation tables are padded with NaN to the
loop's steps, so that the copies' values still stack and a stopped copy is
never selected); it ran nothing past it. A copy that its own rule stops
(``early_stop``, ``stop_when``) leaves the ranking from then on.

A copy whose loop fails (an op's exception, its device's memory cap, a
window that cannot finish) is a failed copy like any other: its loop's
results are a ``CopyFailed`` each, which the sweep's gathering ops leave
out, and the others go on; it leaves the ranking too.

State: per copy its loop's generator, series and the step it reached; the
decisions, how each copy ended and each copy's metric curves
(:class:`~.records.SearchOutcome`, for the run report).
"""

from __future__ import annotations

import math
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import numpy as np

from ..compile import LoopState, loop_start
from ..compile.records import Located
from ..devices import DeviceSpec
from ..errors import NoWorkerError, RunError
from ..ops.training import evaluation_steps
from ..ops.values import CopyFailed
from ..spec.records import Loop, Search, Spec
from .caching import CacheUse
from .records import MAX_CURVE, CopiesRun, CopyEnd, Curve, Decision, LoopNews, LoopOutcome, SearchOutcome, SweepNews
from .rules import best_so_far, halving_decision, median_decision, stop_reason
from .training import Driver, TrainingLoop


class Staged(Driver, Protocol):
    """What the copies' driver needs of the staged run (``execute.loops.StagedRun``) that runs it."""

    @property
    def cache(self) -> CacheUse | None: ...
    @property
    def parent(self) -> Mapping[str, str | None]: ...

    def place(self, name: str, future: Any, device: DeviceSpec) -> Located: ...

    def keep_on_client(self, values: Mapping[str, Any]) -> None: ...

    def drop_sinks(self, futures: Sequence[Any]) -> None: ...

    def window_mode(self, loop: Loop) -> str: ...

    def export(self, loop: Loop, state: LoopState, series: dict[str, list[Any]]) -> None: ...

    def store_loop(self, cache: CacheUse, loop: Loop) -> None: ...


def group_search(spec: Spec, loop: Loop) -> Search:
    """The sweep whose copies' loop ``loop`` is (``copy_loops`` found one)."""
    for search in spec.sweeps:
        if search.loop_of(loop.name) is not None:
            return search
    raise KeyError(loop.name)


def copy_loops(staged: Staged, loop: Loop, pending: Sequence[Loop]) -> list[Loop]:
    """Every pending copy's loop of the sweep whose copy's (top-level body) loop ``loop`` is, when the plan steps
    them side by side (``SweepPacking.side_by_side``); else [] (no such loop, or they run one after another)."""
    try:
        search = group_search(staged.plan.spec, loop)
    except KeyError:
        return []
    found = search.loop_of(loop.name)
    packing = staged.plan.packing_of(search.name)
    if found is None or packing is None or found[1] not in packing.side_by_side:
        return []
    names = {c.loops[found[1]] for c in search.copies if len(c.loops) > found[1]}
    return [lp for lp in pending if lp.name in names]


END = 1 << 62  # a step past every loop's last: to its end


@dataclass
class _Copy:
    index: int
    loop: Loop
    lane: str  # its loop's device, or "" for a loop on several devices (one at a time)
    training: TrainingLoop
    steps: Generator[int, str | None, LoopState]
    series: dict[str, list[Any]]
    reached: int = 0
    started: bool = False
    final: LoopState | None = None
    failed: CopyEnd | None = None

    @property
    def ended(self) -> bool:
        return self.final is not None or self.failed is not None


@dataclass
class CopyLoops:
    staged: Staged
    search: Search
    loops: list[Loop]
    decisions: list[Decision] = field(default_factory=list)
    ends: dict[int, CopyEnd] = field(default_factory=dict)
    outcomes: dict[str, LoopOutcome] = field(default_factory=dict)  # each copy's loop, as it ended

    def run(self) -> CopiesRun:
        """Every copy's loop to its end (or its rule's stop, or its failure): what the sweep's copies did."""
        copies = [self.start(loop) for loop in self.loops]
        running = copies
        rule = self.search.rule
        for number, step in enumerate(rule.steps if rule is not None else (), start=1):
            self.advance(running, step)
            running = [c for c in running if not c.ended]
            if not running:
                break
            running = self.decide(number, step, running)
        self.advance(running, END)
        for copy in copies:
            self.end(copy)
        return CopiesRun(SearchOutcome(tuple(self.decisions), dict(self.ends), {c.index: curves(c) for c in copies}),
                         dict(self.outcomes))

    def start(self, loop: Loop) -> _Copy:
        staged = self.staged
        mode = staged.window_mode(loop)
        series: dict[str, list[Any]] = {name: [] for name, _ in loop.metrics}
        rule = self.search.rule
        training = TrainingLoop(staged, loop, 0, mode == "gang", series,
                                holds=frozenset(rule.steps) if rule is not None else frozenset())
        found = self.search.loop_of(loop.name)
        assert found is not None
        copy = found[0]
        devices = {staged.plan.placement(name).device_name for name in loop.body}
        state = loop_start(staged.plan, loop, staged.known)
        return _Copy(copy.index, loop, devices.pop() if len(devices) == 1 else "", training,
                     training.stepwise(state), series)

    def advance(self, copies: Sequence[_Copy], target: int) -> None:
        """Step ``copies`` a window each in turn until each has read step ``target`` (or ended), every lane
        (device) in its waves: ``at_once`` copies side by side, the next wave once those have got there."""
        waves = self.waves(copies)
        active = {lane: queue.pop(0) for lane, queue in waves.items()}
        while any(active.values()):
            for lane, group in active.items():
                group[:] = [c for c in group if self.step(c, target)]
                if not group and waves[lane]:
                    group[:] = waves[lane].pop(0)

    def waves(self, copies: Sequence[_Copy]) -> dict[str, list[list[_Copy]]]:
        """Per lane, its copies (in copy order) in waves of its device's ``at_once`` (one for a loop on
        several devices); without a packing, all at once (the cluster's slots decide)."""
        packing = next((p for p in self.staged.plan.packing if p.name == self.search.name), None)
        lanes: dict[str, list[_Copy]] = {}
        for copy in sorted(copies, key=lambda c: c.index):
            lanes.setdefault(copy.lane, []).append(copy)
        out = {}
        for lane, members in lanes.items():
            device = packing.device(lane) if packing is not None and lane else None
            at_once = 1 if not lane else device.at_once if device is not None else len(members)
            out[lane] = [members[i:i + max(1, at_once)] for i in range(0, len(members), max(1, at_once))]
        return out

    def step(self, copy: _Copy, target: int) -> bool:
        """One window of ``copy`` read (the next submitted); True while it has not reached ``target``."""
        if copy.ended or copy.reached >= target:
            return False
        try:
            copy.reached = copy.steps.send(None) if copy.started else next(copy.steps)
            copy.started = True
        except StopIteration as end:
            copy.final = end.value
        except NoWorkerError:
            raise  # a device is missing: no copy's fault
        except RunError as exc:
            self.fail(copy, exc)
        return not copy.ended and copy.reached < target

    def stop(self, copy: _Copy, reason: str) -> None:
        """End ``copy``'s loop at the step it reached (nothing past it was submitted)."""
        try:
            copy.steps.send(reason)
        except StopIteration as end:
            copy.final = end.value

    def fail(self, copy: _Copy, exc: Exception) -> None:
        """``copy``'s loop failed: a failed copy; what it waited for on other devices is woken."""
        error = str(exc)
        copy.failed = self.ends[copy.index] = CopyEnd(copy.index, copy.reached, error, failed=True)
        copy.steps.close()
        staged = self.staged
        if not copy.lane:
            staged.submitter.abort_loop(staged.plan.spec.loops.index(copy.loop), f"copy {copy.index} failed")
        staged.drop_sinks(copy.training.sinks)
        if staged.tracks is not None:  # its TensorBoard file closed, its MLflow run FAILED
            staged.tracks.failed(copy.loop)
        staged.submitter.tell(LoopNews(copy.loop.name, copy.reached, copy.loop.steps, {}, {}, {},
                                       failed=error.splitlines()[0] if error else "?"))
        staged.echo(f"sweep '{self.search.name}': copy {copy.index}'s loop '{copy.loop.name}' failed past step "
                    f"{copy.reached}; the other copies go on: {error.splitlines()[0] if error else '?'}")

    def decide(self, number: int, step: int, running: list[_Copy]) -> list[_Copy]:
        """The rule's decision at ``step`` on every copy still running; those it stops end there."""
        rule = self.search.rule
        assert rule is not None
        values = {c.index: value_at(c, rule.metric, step) for c in running}
        if self.search.halving is not None:
            decision = halving_decision(self.search.halving, number, step, values)
        else:
            assert self.search.median is not None
            best = {c.index: best_so_far(values_to(c, rule.metric, step), rule.mode) for c in running}
            decision = median_decision(self.search.median, number, step, values, best)
        by_index = {c.index: c for c in running}
        for row in decision.rows:
            if not row.kept:
                reason = stop_reason(decision, row)
                copy = by_index[row.copy]
                self.stop(copy, reason)  # at the step (or, resumed from a checkpoint past it, where it resumed)
                self.ends[row.copy] = CopyEnd(row.copy, copy.training.outcome.stopped_at_step, reason)
        self.decisions.append(decision)
        self.staged.submitter.tell(SweepNews(self.search.name, decision))
        self.staged.echo(_said(self.search.name, decision))
        return [c for c in running if c.index not in self.ends]

    def end(self, copy: _Copy) -> None:
        """The copy's loop's results, as ``StagedRun.run_windows`` leaves them; a stopped copy's padded to the
        loop's steps, a failed copy's a CopyFailed each."""
        staged, loop = self.staged, copy.loop
        if copy.failed is not None:
            self.end_failed(copy, copy.failed)
            return
        assert copy.final is not None
        tables = copy.training.tables()
        stopped = self.ends.get(copy.index)
        if stopped is not None and loop.evaluation is not None:  # its evaluations stop there too
            missing = [s for s in evaluation_steps(loop.steps, loop.evaluation.every) if s > stopped.step]
            tables = {k: np.concatenate([v, [[s, np.nan] for s in missing]]) if missing else v
                      for k, v in tables.items()}
        staged.keep_on_client(tables)
        self.outcomes[loop.name] = copy.training.outcome
        if stopped is not None:
            for values in copy.series.values():
                values.extend([np.float64(np.nan)] * (loop.steps - len(values)))
        staged.export(loop, copy.final, copy.series)
        cache = staged.cache
        if cache is not None and staged.parent[loop.name] is None and cache.wanted(loop.name):
            staged.store_loop(cache, loop)  # as a loop run alone is stored

    def end_failed(self, copy: _Copy, failed: CopyEnd) -> None:
        """A failed copy's loop results: a CopyFailed on each result's device, read by the copy's later ops
        (which fail with it) and by the sweep's gathering ops (which leave it out)."""
        staged, loop = self.staged, copy.loop
        marker = CopyFailed(loop.name, copy.lane or "several devices", failed.reason)
        for name in loop.exports:
            device = staged.plan.placement(name).device
            future = staged.submitter.scatter(marker, device)
            staged.place(name, future, device)
            staged.keep_on_client({name: marker})
            staged.note(name, f"result of loop '{loop.name}', which failed (its copy failed)")
        for name in (*loop.body, *loop.evaluated):
            staged.note(name, f"loop '{loop.name}' of copy {copy.index} failed after step {failed.step}",
                        unless_said=True)
        self.outcomes[loop.name] = replace(copy.training.outcome, stopped_at_step=failed.step,
                                           stop_reason="failed", steps_run=failed.step)


def value_at(copy: _Copy, metric: str, step: int) -> float:
    """The copy's metric at ``step``: a step metric's value, or its evaluation's there (NaN if none)."""
    if metric in copy.series:
        values = copy.series[metric]
        return float(np.asarray(values[step - 1])) if len(values) >= step else math.nan
    return next((v for s, v in copy.training.evaluations.get(metric, ()) if s == step), math.nan)


def values_to(copy: _Copy, metric: str, step: int) -> list[float]:
    """The copy's values of ``metric`` up to ``step`` (step metrics: every step; evaluation metrics: each
    evaluation)."""
    if metric in copy.series:
        return [float(np.asarray(v)) for v in copy.series[metric][:step]]
    return [v for s, v in copy.training.evaluations.get(metric, ()) if s <= step]


def curves(copy: _Copy) -> tuple[Curve, ...]:
    """Each metric of the copy's loop as it ran (at most ``MAX_CURVE`` points each, evenly thinned)."""
    out = []
    for name, values in copy.series.items():
        out.append(_thinned(name, [(i + 1, float(np.asarray(v))) for i, v in enumerate(values)]))
    for name, rows in copy.training.evaluations.items():
        out.append(_thinned(name, [(int(s), float(v)) for s, v in rows]))
    return tuple(out)


def _thinned(metric: str, points: Sequence[tuple[int, float]]) -> Curve:
    return Curve.of(metric, points)


def _said(sweep: str, decision: Decision) -> str:
    """The run's line about a decision."""
    kept = [r for r in decision.rows if r.kept]
    if decision.rule == "halving":
        best = ", ".join(f"{r.value:.4g}" for r in sorted(kept, key=lambda r: r.value))
        return (f"sweep '{sweep}': rung {decision.number} at step {decision.step}: {len(kept)} of "
                f"{len(decision.rows)} copies go on ({decision.metric} {best})")
    stopped = [str(r.copy) for r in decision.rows if not r.kept]
    judged = sum(1 for r in decision.rows if not r.reference)
    return (f"sweep '{sweep}': median at step {decision.step}: {decision.metric} {decision.median:.4g} "
            f"(copies {', '.join(str(r.copy) for r in decision.rows if r.reference) or 'none'}); "
            f"{len(stopped)} of {judged} judged copies stop{(': ' + ', '.join(stopped)) if stopped else ''}")

