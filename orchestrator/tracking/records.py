"""The records a sink is fed: a tracked run, its points, and the run of orchestrate it belongs to."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class Tracked:
    """One tracked run: a loop of the spec (a copy's loop carries the copy's values in ``params``)."""

    key: str  # a folder name, unique in this run of orchestrate (the loop's safe name)
    name: str  # as shown: the loop's name
    params: Mapping[str, str] = field(default_factory=dict)
    tags: Mapping[str, str] = field(default_factory=dict)


Point = tuple[int, float]  # (step, value)


class MetricSink(Protocol):
    """Where one format's files go; made once per run of orchestrate by the registry's maker."""

    def where(self) -> str:
        """Where this run's files go, in a few words (said when the run starts)."""

    def log(self, run: Tracked, metric: str, points: Sequence[Point]) -> None:
        """Append ``points`` of ``metric`` to ``run`` (opened on its first points)."""

    def end(self, run: Tracked, finished: bool) -> None:
        """``run`` ended before the others (a sweep copy that failed: ``finished`` False)."""

    def close(self, finished: bool) -> None:
        """The run of orchestrate ended: ``finished`` (or it failed); every tracked run is closed."""


@dataclass(frozen=True)
class SinkTarget:
    """What a sink is told about the run of orchestrate: its folder, the spec, the run's token and start."""

    folder: str
    spec: str
    token: str
    started: float  # seconds since the epoch
