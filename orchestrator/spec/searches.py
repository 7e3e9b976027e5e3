"""Records of a sweep's copies: what each copy is, kept in the spec for every later stage.

A :class:`Search` is one ``sweep`` after expansion: its parameters, one
:class:`SweepCopy` per copy (its index, stable id, values and the prefix of
its ops), what the run gathers into a table, and its halving rungs. The plan
adds where and when each copy runs; the run adds what happened to it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import YamlPath


@dataclass(frozen=True)
class SweepCopy:
    index: int
    id: str  # stable: a hash of its values (copy_id)
    values: Mapping[str, Any] = field(hash=False)
    prefix: str  # its ops are named PREFIX + body name: "ridge/3/"


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

    def halved_loop(self, copy: SweepCopy) -> str | None:
        """The name of ``copy``'s loop that halving ranks (None without halving)."""
        return copy.prefix + self.halving.loop if self.halving is not None else None

    def copy_of(self, op: str) -> SweepCopy | None:
        """The copy whose body made ``op`` (ops outside the copies: None)."""
        head = op[len(self.name) + 1:].split("/", 1)[0] if op.startswith(self.name + "/") else ""
        if not head.isdigit():
            return None
        index = int(head)
        return self.copies[index] if index < len(self.copies) else None
