"""Records of a sweep's copies: what each copy is, kept in the spec for every later stage.

A :class:`Search` is one ``sweep`` after expansion: its parameters, one
:class:`SweepCopy` per copy (its index, stable id, values, the prefix of its
ops and its last ops), its gathering ops, what the run gathers into a table,
and the rule that stops copies early (``halving``, or the ``median`` rule)
with the steps at which it decides. The plan adds where and when each copy
runs; the run adds what happened to it.

A copy's *last ops* are those of its ops (outside its loops' steps) that no
other op of the copy reads. Every failure in a copy reaches one of them (a
failed op's readers fail with it), so the sweep's gathering ops wait for
them and learn from them whether the copy failed: a copy that fails after
its metric was made is still never selected, gathered or combined.
"""

from __future__ import annotations

from collections.abc import Mapping
import functools
from dataclasses import dataclass, field
from typing import Any

from ..errors import YamlPath


@dataclass(frozen=True)
class SweepCopy:
    index: int
    id: str  # stable: a hash of its values (copy_id)
    values: Mapping[str, Any] = field(hash=False)
    prefix: str  # its ops are named PREFIX + body name: "ridge/3/"
    last: tuple[str, ...] = ()  # its ops (outside its loops' steps) that no other op of the copy reads
    loops: tuple[str, ...] = ()  # the loops its body makes (not those inside another loop), in body order


@dataclass(frozen=True)
class Gathering:
    """One of a sweep's ops that read every copy (select, pick, gather, combine, table): the copy of each of
    its inputs, then of each op it waits for (its ``after``: every copy's last ops, in copy order)."""

    op: str
    copies: tuple[int, ...]


@dataclass(frozen=True)
class Table:
    """``table:``: one CSV row per copy, its values and these body metrics (scalars)."""

    path: str
    metrics: tuple[str, ...]
    at: YamlPath


@dataclass(frozen=True)
class Halving:
    """``halving:``: at each rung (a step of the copies' loop), keep the best ``keep`` of the copies still running
    by the loop's metric at that step, decided on all of them together; stop the rest there."""

    loop: str  # the body's loop (its name in the body: each copy's is PREFIX + loop)
    metric: str
    mode: str  # min | max
    keep: float
    rungs: tuple[int, ...]
    at: YamlPath
    evaluated: bool = False  # the metric is the loop's evaluation's (read at evaluation steps), not a step metric
    written: str = "rungs"  # how the rungs were written: rungs, every or factor (where to say what is wrong)

    @property
    def steps(self) -> tuple[int, ...]:
        """The steps at which it decides."""
        return self.rungs


@dataclass(frozen=True)
class Median:
    """``median:``: Optuna's MedianPruner, decided on all copies together at fixed steps.

    The first ``n_startup`` copies are the reference: never stopped by the rule. At each decision step every
    other copy still running stops when its best value so far is worse than the median of the reference
    copies' values at that step (``execute.halving``)."""

    loop: str
    metric: str
    mode: str  # min | max
    n_startup: int
    warmup_steps: int
    every: int
    steps: tuple[int, ...]  # the decision steps: warmup_steps + k x every, before the loop's last step
    at: YamlPath
    evaluated: bool = False


def median_steps(warmup: int, every: int, last: int) -> tuple[int, ...]:
    """The median rule's decision steps: ``warmup + k * every`` (k >= 0, at least step 1), before ``last``."""
    return tuple(s for s in range(warmup, last, every) if s >= 1) if every > 0 else ()


@dataclass(frozen=True)
class Search:
    name: str
    params: tuple[str, ...]
    copies: tuple[SweepCopy, ...]
    path: YamlPath
    table: Table | None = None
    select: tuple[str, str] | None = None  # (min | max, body metric)
    allow_failures: bool = False
    halving: Halving | None = None
    median: Median | None = None
    gathering: tuple[Gathering, ...] = ()  # its select, pick, gather, combine and table ops: they read every copy

    @property
    def rule(self) -> Halving | Median | None:
        """The rule that stops its copies early, if any."""
        return self.halving if self.halving is not None else self.median

    def loop_of(self, loop: str) -> tuple[SweepCopy, int] | None:
        """The copy whose body made ``loop`` (at its top level), and the loop's position among the copy's."""
        found = self._loops.get(loop)
        return (self.copies[found[0]], found[1]) if found is not None else None

    @functools.cached_property
    def _loops(self) -> dict[str, tuple[int, int]]:
        return {name: (copy.index, i) for copy in self.copies for i, name in enumerate(copy.loops)}

    def ruled_loop(self, copy: SweepCopy) -> str | None:
        """The name of ``copy``'s loop that the rule (halving, median) judges (None without a rule)."""
        rule = self.rule
        return copy.prefix + rule.loop if rule is not None else None
