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

from .loops import LINE_COLOURS, Chart, Line
from .steps import Marks, StepBars
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
        "label": [f"copy {c.index} ({c.values})" + (" · selected" if c.index == sweep.selected else "")
                  for c in timed],
        "what": [f"copy {c.index}: {c.values}" for c in timed],
        "device": [c.device for c in timed],
        "took": [f"wave {c.wave}, {c.status}" + (f" at step {c.stopped_at_step}" if c.stopped_at_step else "")
                 for c in timed],
        "at": [f"+{seconds((c.start or 0.0) - origin)} to +{seconds((c.stop or 0.0) - origin)}" for c in timed],
    }
    stopped = [c for c in copies if c.status == "stopped"]
    marks = [Marks({"x": [(c.stop or 0.0) - origin for c in stopped], "row": [_row(c) for c in stopped],
                    "text_x": [(c.stop or 0.0) - origin for c in stopped],
                    "text": [f"stopped at step {c.stopped_at_step}" for c in stopped]},
                   "stopped by the rule", "its sweep's rule stopped it there", name=f"stopped:{sweep.name}")]
    chosen = [c for c in copies if c.index == sweep.selected]
    marks += [Marks({"x": [(c.stop or 0.0) - origin for c in chosen], "row": [_row(c) for c in chosen],
                     "text_x": [(c.stop or 0.0) - origin for c in chosen], "text": ["" for _ in chosen],
                     "value": [f"copy {c.index} ({c.values})" for c in chosen]},
                    "selected copy", "the copy the sweep's select chose", "#d55e00", f"selected:{sweep.name}")]
    return StepBars(title=f"Sweep {sweep.name}: each copy from its start to its stop, by device and wave",
                    axis="seconds since the first op, window or transfer started", rows=tuple(_row(c) for c in copies),
                    columns=columns, end=end,
                    tooltips=(("copy", "@what"), ("device", "@device"), ("ran", "@took"), ("when", "@at")),
                    marks=tuple(m for m in marks if m.columns["x"]), name=f"copies:{sweep.name}")


def copy_charts(sweep: SweepView) -> list[Chart]:
    """A chart per metric of the copies' loop, a line per copy (``curve:SWEEP:METRIC:copy N``, its legend the
    copy's values); the metric its rule watches first. Stopped copies are dashed, the selected one thick."""
    metrics = list(dict.fromkeys(name for c in sweep.copies for name, _, _ in c.curves))
    metrics.sort(key=lambda m: m != sweep.metric)
    charts = []
    for metric in metrics:
        lines = tuple(Line(f"curve:{sweep.name}:{metric}:copy {c.index}", _legend(c, sweep), steps, values,
                           LINE_COLOURS[c.index % len(LINE_COLOURS)], "dashed" if c.status == "stopped" else "solid")
                      for c in sweep.copies for name, steps, values in c.curves if name == metric and steps)
        watched = f" ({sweep.rule} watches it)" if metric == sweep.metric and sweep.rule else ""
        charts.append(Chart(f"metric:{sweep.name}:{metric}", f"Sweep {sweep.name}: {metric} per copy{watched}",
                            metric, lines))
    return charts


def _legend(copy: CopyView, sweep: SweepView) -> str:
    ended = "" if copy.status in ("finished", "") else f", {copy.status}"
    return f"{copy.index}: {copy.values}{ended}" + (" (selected)" if copy.index == sweep.selected else "")


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
        chosen = " (selected)" if copy.index == sweep.selected else ""
        rows.append(f"<tr><td>copy {copy.index}{chosen}</td><td>{html.escape(copy.values)}</td>{''.join(cells)}</tr>")
    what = "rung" if sweep.rule == "halving" else "decision"
    return (f'<section id="sweep-{html.escape(sweep.name)}">'
            f"<h2>Sweep <code>{html.escape(sweep.name)}</code>: {html.escape(sweep.rule)} on "
            f"<code>{html.escape(sweep.loop)}.{html.escape(sweep.metric)}</code>, {what} by {what}</h2>"
            f'<table class="grid decisions"><tr><th>copy</th><th>values</th>{head}</tr>\n' + "\n".join(rows)
            + "</table></section>")


def _number(value: float) -> str:
    return "NaN" if math.isnan(value) else f"{value:.4g}"
