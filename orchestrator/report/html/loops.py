"""A run's loops as the page draws them: their windows on each device, and their metric curves.

The run report records, per gang loop, each window that ran on each device
(``loops.LOOP.windows``: start, stop, first and last step, on the workers'
clocks) and, per loop outside sweep copies, every step and evaluation metric
as it ran (``loops.LOOP.curves``). Here they are read into records, and the
timeline's loop lanes and the curve charts are laid out, without bokeh
(:mod:`.figures` draws them). Loop ops whose runs a window covers are drawn
by the window, not as a bar of their summed time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

LOOP_COLOURS = ("#3b6fb6", "#b5475b", "#4d9a6a", "#8a5fb0", "#c27d2b", "#2f9aa0")
# a copy's line: by its index (copies are few; beyond the palette, colours repeat and the legend tells)
LINE_COLOURS = ("#4c78a8", "#f58518", "#54a24b", "#b279a2", "#e45756", "#72b7b2", "#eeca3b", "#9d755d",
                "#ff9da6", "#bab0ac")


@dataclass(frozen=True)
class WindowView:
    """One window of a loop on one device: when it ran (workers' clock) and its steps, first to last."""

    loop: str
    device: str
    start: float
    stop: float
    first: int
    last: int


@dataclass(frozen=True)
class LoopCurvesView:
    """A loop's metrics as it ran: (metric, steps, values: NaN for none) each."""

    loop: str
    curves: tuple[tuple[str, tuple[float, ...], tuple[float, ...]], ...]


def loose(value: object) -> float:
    """A number of the report that may be missing or not a number (a NaN metric): NaN then."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else math.nan


def read_curve(item: Mapping[str, Any]) -> tuple[str, tuple[float, ...], tuple[float, ...]]:
    """A ``curve`` of the report (checked against its schema): its metric, steps and values."""
    return (str(item.get("metric", "")), tuple(loose(s) for s in item.get("steps", ())),
            tuple(loose(v) for v in item.get("values", ())))


def read_loops(loops: Mapping[str, Any]) -> tuple[tuple[WindowView, ...], tuple[LoopCurvesView, ...]]:
    """The windows (by loop, device, time) and the curves of the report's ``loops`` (already checked)."""
    windows: list[WindowView] = []
    curves: list[LoopCurvesView] = []
    for name, loop in loops.items():
        if not isinstance(loop, Mapping):  # reports of before loops carried more than their mode
            continue
        for device, ran in (loop.get("windows") or {}).items():
            windows += [WindowView(name, device, float(a), float(b), int(first), int(last))
                        for a, b, first, last in ran]
        drawn = tuple(read_curve(item) for item in loop.get("curves", ()))
        if drawn:
            curves.append(LoopCurvesView(name, drawn))
    return tuple(sorted(windows, key=lambda w: (w.loop, w.device, w.start))), tuple(curves)


def covered(device: str, start: float | None, windows: Sequence[WindowView]) -> bool:
    """A loop op's first run at ``start`` on ``device`` lies in a window drawn there: the window draws it."""
    return start is not None and any(w.device == device and w.start <= start <= w.stop for w in windows)


def loop_colours(windows: Sequence[WindowView]) -> dict[str, str]:
    loops = sorted({w.loop for w in windows})
    return {loop: LOOP_COLOURS[i % len(LOOP_COLOURS)] for i, loop in enumerate(loops)}


@dataclass(frozen=True)
class Line:
    """One line of a chart: its stable name (the page's element a browser test finds), legend and points."""

    name: str
    label: str
    xs: tuple[float, ...]
    ys: tuple[float, ...]
    colour: str
    dash: str = "solid"


@dataclass(frozen=True)
class Chart:
    """A chart of lines over steps: one metric of a loop, or of every copy of a sweep."""

    name: str
    title: str
    y_label: str
    lines: tuple[Line, ...]


def loop_charts(loop: LoopCurvesView) -> list[Chart]:
    """A chart per metric of the loop (metrics differ in scale: one axis each), its one line named
    ``curve:LOOP:METRIC``."""
    return [Chart(f"metric:{loop.loop}:{metric}", f"{loop.loop}: {metric}", metric,
                  (Line(f"curve:{loop.loop}:{metric}", metric, steps, values, LOOP_COLOURS[i % len(LOOP_COLOURS)]),))
            for i, (metric, steps, values) in enumerate(loop.curves) if steps]
