"""A sweep's copies of a training loop, stepped side by side; with ``halving:``, decided rung by rung.

Policy. Every copy's loop runs window by window (``TrainingLoop.stepwise``;
its windows end at the rungs, ``Loop.rungs``), the copies in turn, so that
each has a window on the cluster while the driver reads another's: the
cluster's resources (and a packed GPU's slots) decide what runs at once, as
they do for a sweep's other ops. Only copies whose loop keeps to one device
are stepped so (two loops exchanging values across devices could each hold
a device the other waits for); other copies' loops run one after another, as
any loops do. With successive halving, at a rung the driver waits until every copy still running has reached it, then
ranks them all by the metric's value at that step: ``mode`` first, a NaN
last, ties by copy index. The best ``keep`` of them (at least one) go on;
the rest stop at that step, and their loops end there (their final states
are those of the rung; their metric series are padded with NaN to the
loop's steps, so that the copies' series still stack and a stopped copy is
never chosen by ``select``). Because a rung waits for every copy, no copy's
fate depends on which one reported first, and the same spec halves the same
way on any cluster. A copy that its own rule stops earlier (``early_stop``,
``stop_when``) is out of the ranking from then on.

State: per copy its loop's generator, series and the step it reached; the
rung table (copy, value, kept or stopped) for the run report.
"""

from __future__ import annotations

import math
from collections.abc import Generator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from ..compile import LoopState, loop_start
from ..plan.records import Plan
from ..spec.records import Halving, Loop, Search, Spec
from .caching import CacheUse
from .training import Driver, TrainingLoop


class Staged(Driver, Protocol):
    """What halving needs of the staged run (``execute.loops.StagedRun``) that drives it."""

    known: dict[str, Any]
    client_values: dict[str, Any]
    outcomes: dict[str, dict[str, Any]]
    cache: CacheUse | None
    parent: dict[str, str | None]

    def window_mode(self, loop: Loop) -> str: ...

    def export(self, loop: Loop, state: LoopState, series: dict[str, list[Any]]) -> None: ...

    def store_loop(self, cache: CacheUse, loop: Loop) -> None: ...


def group_search(spec: Spec, loop: Loop) -> tuple[Search, Halving | None]:
    """The sweep whose copies' loop ``loop`` is (``copy_loops`` found one), and its halving."""
    for search in spec.sweeps:
        copy = search.copy_of(loop.name)
        if copy is not None and "/" not in loop.name[len(copy.prefix):]:
            return search, search.halving
    raise KeyError(loop.name)


def copy_loops(plan: Plan, loop: Loop, pending: Sequence[Loop]) -> list[Loop]:
    """Every pending copy's loop of the sweep whose copy's (top-level body) loop ``loop`` is, when they can be
    stepped side by side (each on one device, holding no loop); [] otherwise: they run one after another."""
    try:
        search, halving = group_search(plan.spec, loop)
    except KeyError:
        return []
    copy = search.copy_of(loop.name)
    assert copy is not None
    names = {c.prefix + loop.name[len(copy.prefix):] for c in search.copies}
    group = [lp for lp in pending if lp.name in names]
    if halving is None and not all(_alone(plan, lp) for lp in group):
        return []  # (a halving sweep's are checked by the plan: it refuses a copy loop on two devices)
    return group


def _alone(plan: Plan, loop: Loop) -> bool:
    """A loop on one device, holding no loop of its own."""
    nested = any(other.name.startswith(loop.name + "/") for other in plan.spec.loops)
    return not nested and len({plan.placement(name).device_name for name in loop.body}) == 1


@dataclass
class _Copy:
    index: int
    loop: Loop
    training: TrainingLoop
    steps: Generator[int, str | None, LoopState]
    series: dict[str, list[Any]]
    reached: int = 0
    final: LoopState | None = None


@dataclass
class CopyLoops:
    staged: Staged
    search: Search
    halving: Halving | None
    loops: list[Loop]
    rungs: list[dict[str, Any]] = field(default_factory=list)

    def run(self) -> None:
        copies = [self.start(loop) for loop in self.loops]
        running = [c for c in copies if self.advance(c, 1)]
        for number, rung in enumerate(self.halving.rungs if self.halving is not None else (), start=1):
            running = [c for c in running if self.advance(c, rung)]
            if not running:
                break
            running = self.decide(number, rung, running)
        for copy in running:  # past its last step: its loop ends
            self.advance(copy, copy.loop.steps + 1)
        for copy in copies:
            self.end(copy)
        if self.halving is not None:
            self.staged.outcomes[self.search.name] = {"rungs": self.rungs}

    def start(self, loop: Loop) -> _Copy:
        staged = self.staged
        mode = staged.window_mode(loop)
        series: dict[str, list[Any]] = {name: [] for name, _ in loop.metrics}
        training = TrainingLoop(staged, loop, 0, mode == "gang", series)
        copy = self.search.copy_of(loop.name)
        assert copy is not None
        return _Copy(copy.index, loop, training, training.stepwise(loop_start(staged.plan, loop, staged.known)), series)

    @staticmethod
    def advance(copy: _Copy, step: int, stop: str | None = None) -> bool:
        """Step ``copy`` until it has read step ``step`` (or send it ``stop``); False once its loop has ended."""
        try:
            if stop is not None:
                copy.steps.send(stop)
            while copy.final is None and copy.reached < step:
                copy.reached = next(copy.steps) if copy.reached == 0 else copy.steps.send(None)
        except StopIteration as end:
            copy.final = end.value
        return copy.final is None

    def decide(self, number: int, rung: int, running: list[_Copy]) -> list[_Copy]:
        """Rank every copy still running by the metric at ``rung``; the best ``keep`` go on, the rest stop."""
        h = self.halving
        assert h is not None
        values = {c.index: float(np.asarray(c.series[h.metric][rung - 1])) for c in running}
        sign = 1.0 if h.mode == "min" else -1.0
        ranked = sorted(running, key=lambda c: (math.isnan(values[c.index]), sign * values[c.index], c.index))
        kept = ranked[:max(1, int(len(ranked) * h.keep))]
        best = ", ".join(f"{v:.4g}" for v in sorted(values[c.index] for c in kept))
        for copy in ranked[len(kept):]:
            reason = f"halving: rung {number} at step {rung}, {h.metric} {values[copy.index]:.4g} not among the " \
                     f"best {len(kept)} of {len(ranked)}"
            self.advance(copy, rung, stop=reason)
        self.rungs.append({"rung": number, "step": rung, "metric": h.metric, "mode": h.mode,
                           "copies": [{"copy": c.index, "value": values[c.index], "kept": c in kept} for c in ranked]})
        self.staged.echo(f"sweep '{self.search.name}': rung {number} at step {rung}: {len(kept)} of {len(ranked)} "
                         f"copies go on ({h.metric} {best})")
        kept_ids = {c.index for c in kept}
        return [c for c in running if c.index in kept_ids]

    def end(self, copy: _Copy) -> None:
        """The copy's loop's exports, as ``StagedRun.run_windows`` leaves them; its series padded to its steps."""
        staged, loop = self.staged, copy.loop
        assert copy.final is not None
        staged.client_values.update(copy.training.tables())
        staged.outcomes[loop.name] = copy.training.outcome
        if str(copy.training.outcome["stop_reason"]).startswith("halving"):
            for values in copy.series.values():
                values.extend([np.float64(np.nan)] * (loop.steps - len(values)))
        staged.export(loop, copy.final, copy.series)
        cache = staged.cache
        if cache is not None and staged.parent[loop.name] is None and cache.wanted(loop.name):
            staged.store_loop(cache, loop)  # as a loop run alone is stored
