"""A sweep's section of the page: its copies by device and wave, its rule's decisions, its copies' curves.

The geometry and the words only (no bokeh): :mod:`.figures` draws the
copies as bars on a row each, grouped by device (a Gantt chart: from the
copy's start to its stop, coloured by its wave, a tick where the sweep's
rule stopped it) and the curves as lines, one per copy; :func:`decision_table`
is the rule's decisions as an HTML table (rows: copies; columns: decision
steps; each cell the copy's value there and whether it went on).
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass
from typing import Any

from .steps import StepBars
from .view import CopyView, SweepView
from .words import seconds, short_device

WAVE_COLOURS = ("#4c78a8", "#f58518", "#54a24b", "#b279a2", "#e45756", "#72b7b2", "#eeca3b", "#9d755d")
STATUS_COLOURS = {"failed": "#c0392b", "stopped": "#999999"}


def _row(copy: CopyView) -> str:
    return f"{short_device(copy.device)} · copy {copy.index}"


def copy_bars(sweep: SweepView, origin: float) -> StepBars:
    """A bar per copy that ran, from its start to its stop (seconds since ``origin``; a bar per span when its
    sweep's rule paused it between), on its own row; rows by device, then wave, then copy. A stopped copy gets
    a tick at its stop, a failed one a red bar."""
    copies = sorted((c for c in sweep.copies if c.start is not None and c.stop is not None),
                    key=lambda c: (c.device, c.wave, c.index))
    end = max([(c.stop or 0.0) - origin for c in copies] + [1e-6]) * 1.15
    # a bar per span of a copy its sweep's rule paused at decision steps, else one from its start to its stop
    bars = [(c, span) for c in copies for span in (c.spans or ((c.start or 0.0, c.stop or 0.0),))]
    timed = [c for c, _ in bars]
    columns: dict[str, list[Any]] = {
        "row": [_row(c) for c in timed],
        "left": [a - origin for _, (a, _) in bars],
        "right": [b - origin for _, (_, b) in bars],
        "colour": [STATUS_COLOURS.get(c.status, WAVE_COLOURS[c.wave % len(WAVE_COLOURS)]) for c in timed],
        "legend": [f"wave {c.wave}" if c.status not in STATUS_COLOURS else c.status for c in timed],
        "label": [f"copy {c.index} ({c.values})" for c in timed],
        "what": [f"copy {c.index}: {c.values}" for c in timed],
        "device": [c.device for c in timed],
        "took": [f"wave {c.wave}, {c.status}" + (f" at step {c.stopped_at_step}" if c.stopped_at_step else "")
                 for c in timed],
        "at": [f"+{seconds((c.start or 0.0) - origin)} to +{seconds((c.stop or 0.0) - origin)}" for c in timed],
    }
    stopped = [c for c in copies if c.status == "stopped"]
    marks: dict[str, list[Any]] = {"x": [(c.stop or 0.0) - origin for c in stopped], "row": [_row(c) for c in stopped],
                                   "text_x": [(c.stop or 0.0) - origin for c in stopped],
                                   "text": [f"stopped at step {c.stopped_at_step}" for c in stopped]}
    return StepBars(title=f"Sweep {sweep.name}: each copy from its start to its stop, by device and wave",
                    axis="seconds since the first op or transfer started", rows=tuple(_row(c) for c in copies),
                    columns=columns, end=end,
                    tooltips=(("copy", "@what"), ("device", "@device"), ("ran", "@took"), ("when", "@at")),
                    marks=marks if stopped else {})


@dataclass(frozen=True)
class CurveLines:
    """Each copy's curve of one metric: a line per copy, hovered with the copy's values."""

    title: str
    metric: str
    columns: dict[str, list[Any]]


def curve_lines(sweep: SweepView) -> CurveLines:
    """The copies' curves of the metric the sweep's rule watches (else of their loop's first metric)."""
    watched = sweep.metric
    metric = watched or next((name for c in sweep.copies for name, _, _ in c.curves), "")
    drawn = [(c, next((steps, values) for name, steps, values in c.curves if name == metric)) for c in sweep.copies
             if any(name == metric for name, _, _ in c.curves)]
    columns: dict[str, list[Any]] = {
        "xs": [list(steps) for _, (steps, _) in drawn],
        "ys": [list(values) for _, (_, values) in drawn],
        "colour": [STATUS_COLOURS.get(c.status, WAVE_COLOURS[c.index % len(WAVE_COLOURS)]) for c, _ in drawn],
        "label": [f"copy {c.index} ({c.values}): {c.status}" for c, _ in drawn],
    }
    rule = f", which its {sweep.rule} rule watches" if watched else ""
    return CurveLines(f"Sweep {sweep.name}: each copy's {metric}{rule} (grey: stopped early, red: failed)", metric,
                      columns)


def decision_table(sweep: SweepView) -> str:
    """The rule's decisions: a row per copy, a column per decision step (its value there, and whether it went
    on), in HTML; "" without decisions."""
    if not sweep.decisions:
        return ""
    head = "".join(f"<th>step {d.step}" + (f"<br>median {_number(d.median)}" if d.median is not None else "")
                   + "</th>" for d in sweep.decisions)
    rows = []
    for copy in sorted(sweep.copies, key=lambda c: c.index):
        cells = []
        for decision in sweep.decisions:
            row = next((r for r in decision.rows if r[0] == copy.index), None)
            if row is None:
                cells.append("<td></td>")
                continue
            _, value, best, kept, reference = row
            shown = _number(value) + ("" if math.isnan(best) or best == value else f" (best {_number(best)})")
            fate = "reference" if reference else ("goes on" if kept else "stopped")
            cells.append(f'<td class="{"kept" if kept else "stopped"}">{html.escape(shown)} {fate}</td>')
        rows.append(f"<tr><td>copy {copy.index}</td><td>{html.escape(copy.values)}</td>{''.join(cells)}</tr>")
    what = "rung" if sweep.rule == "halving" else "decision"
    return (f"<h2>Sweep <code>{html.escape(sweep.name)}</code>: {html.escape(sweep.rule)} on "
            f"<code>{html.escape(sweep.loop)}.{html.escape(sweep.metric)}</code>, {what} by {what}</h2>"
            f'<table class="grid decisions"><tr><th>copy</th><th>values</th>{head}</tr>\n' + "\n".join(rows)
            + "</table>")


def _number(value: float) -> str:
    return "NaN" if math.isnan(value) else f"{value:.4g}"
