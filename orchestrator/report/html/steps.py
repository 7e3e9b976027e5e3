"""A loop's step picture, without bokeh: its words, and the bars its two figures draw.

The run report's ``loop_steps`` (gang windows only) holds, per loop, one
sampled step's critical path and each device's median step split into
compute per op, waiting, sending and overhead. Here they become
:class:`StepBars` (rows, columns, hover) that :mod:`.figures` draws, and the
section's words above them. Nothing is computed here that the report does
not hold: the bars are its segments and medians, laid end to end.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any, Sequence

from ..text import PATH_KINDS, TRANSPORT_WORDS, path_by_kind, step_line
from .lanes import FRAME_WIDTH, LABEL_CHAR_PX
from .view import LoopStepsView, RunView, SegmentView, StepSplitView
from .words import short_device

# Okabe-Ito, as the timeline: compute green, values in transit blue, sending orange, waiting grey.
STEP_COLOURS = {"op": "#009e73", "transit": "#56b4e9", "wait": "#bbbbbb", "send": "#e69f00",
                "overhead": "#cc79a7", "other devices": "#f0e442"}
COMPUTE_SHADES = ("#009e73", "#7fcdb0")  # a device's ops alternate, so that neighbours stay apart
OTHER_COLOUR = "#777777"  # a segment kind this page does not know (a newer report)
STEP_ROW_PX = 34
STEP_TEXT_WIDTH = FRAME_WIDTH + 380
STEP_CSS = """
h2 { font-size: 16px; margin: 22px 0 6px; }
p, li { font-size: 13px; line-height: 1.45; color: #222; }
ul { color: #444; padding-left: 18px; margin: 6px 0; }
table { border-collapse: collapse; font-size: 12px; }
th, td { border-bottom: 1px solid #e3e3e3; padding: 2px 10px 2px 0; text-align: left; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
summary { cursor: pointer; font-size: 13px; }
"""
# Long forms of the report's transport, for the section's words.
TRANSPORT_SENTENCES = {
    "links": "Values went between device workers over direct links (one TCP stream per pair of devices).",
    "dask-comms": "Values went between device workers over Dask's comms (a TLS cluster: no direct links).",
}


# What each figure's numbers measure (execute.steps): the hover of its marks and segments, not a paragraph.
STEP_MEANS = ("a device's step: wall time from its start to its end on that device, waits included, median over "
              "the sampled steps; steps of devices overlap, so this is the loop's period there")
PATH_MEANS = ("one step's chain of dependent events (ops, sends, transits, overhead), walked back from the "
              "step's last event until it reaches the previous step: what a device waited for from the previous "
              "step, and work off the chain, is not in it, so it may be shorter than a device's median step")
SEGMENT_MEANS = {
    "op": "compute: the op's call on its device",
    "transit": "from the value's write on the sender until the waiting receiver had it (link + waking up; "
               "clocks of different hosts skew it)",
    "wait": "waiting for a value already on its way",
    "send": "serializing and writing a value to another device",
    "overhead": "the runtime's own Python between two events of a device",
    "other devices": "its thread running the ops of the other devices of its process (processes: host)",
}


@dataclass(frozen=True)
class Marks:
    """Ticks on a figure's rows (``x``, ``row``; their words ``text`` from ``text_x``; ``value``, when there,
    the hover's number, else ``text``), in the legend as ``legend``, hovered with ``why`` (what it measures)."""

    columns: dict[str, list[Any]]
    legend: str
    why: str
    colour: str = "#222222"
    name: str = ""


@dataclass(frozen=True)
class StepBars:
    """One figure of bars on rows (short names, top to bottom): a step picture (µs), or a sweep's copies."""

    title: str
    axis: str
    rows: tuple[str, ...]
    columns: dict[str, list[Any]]
    end: float
    tooltips: tuple[tuple[str, str], ...]
    marks: tuple[Marks, ...] = ()
    handoffs: dict[str, list[Any]] = field(default_factory=dict)  # x, from_row, to_row: the path changes device
    name: str = ""  # the bars' renderer: the element a browser test finds


def micro(seconds: float) -> str:
    """A step's part in µs: ``2.1 µs``, ``919 µs``."""
    us = seconds * 1e6
    return f"{us:.1f} µs" if us < 10 else f"{us:.0f} µs"


def _fitted(name: str, seconds: float, end_us: float) -> str:
    """A bar's label when it fits inside the bar, else its duration alone when that fits, else none (hover tells)."""
    width_px = seconds * 1e6 / end_us * FRAME_WIDTH
    for text in (f"{name} {micro(seconds)}", micro(seconds)):
        if len(text) * LABEL_CHAR_PX + 8 <= width_px:
            return text
    return ""


def path_bars(loop: LoopStepsView, view: RunView) -> StepBars:
    """The critical path's segments end to end, each on its device's row: a transit on the receiver's."""
    order = [d for d in view.device_order() if any(s.device == d for s in loop.segments)]
    order += [d for d in dict.fromkeys(s.device for s in loop.segments) if d not in order]
    starts = [sum(s.seconds for s in loop.segments[:i]) * 1e6 for i in range(len(loop.segments))]
    end = max(loop.path_seconds, sum(s.seconds for s in loop.segments), 1e-6) * 1e6 * 1.02
    words = dict(PATH_KINDS)
    segs = loop.segments
    columns: dict[str, list[Any]] = {
        "row": [short_device(s.device) for s in segs], "left": starts,
        "right": [at + s.seconds * 1e6 for at, s in zip(starts, segs)],
        "colour": [STEP_COLOURS.get(s.kind, OTHER_COLOUR) for s in segs],
        "legend": [words.get(s.kind, s.kind) for s in segs],
        "label": [_fitted(s.name if s.kind == "op" else s.kind, s.seconds, end) for s in segs],
        "what": [f"{s.kind}: {s.name}" if s.name else s.kind for s in segs],
        "device": [s.device for s in segs], "took": [micro(s.seconds) for s in segs],
        "at": [f"+{micro(at / 1e6)}" for at in starts],
        "means": [SEGMENT_MEANS.get(s.kind, s.kind) for s in segs],
    }
    moves = [i for i in range(1, len(segs)) if segs[i].device != segs[i - 1].device]
    handoffs: dict[str, list[Any]] = {"x": [starts[i] for i in moves],
                                      "from_row": [short_device(segs[i - 1].device) for i in moves],
                                      "to_row": [short_device(segs[i].device) for i in moves]}
    return StepBars(title=f"Loop {loop.loop}: the critical path of step {loop.path_step} "
                          f"({micro(loop.path_seconds)}), segment by segment on the device where it happened",
                    axis="µs since the path's first segment began", rows=tuple(short_device(d) for d in order),
                    columns=columns, end=end,
                    tooltips=(("segment", "@what"), ("device", "@device"), ("took", "@took"), ("at", "@at"),
                              ("is", "@means")),
                    handoffs=handoffs, marks=(_path_marks(loop, order),), name=f"path:{loop.loop}")


def _path_marks(loop: LoopStepsView, devices: Sequence[str]) -> Marks:
    """A tick at the critical path's length on each row (its length in the hover: the titles say it)."""
    x, n = loop.path_seconds * 1e6, len(devices)
    return Marks({"x": [x] * n, "row": [short_device(d) for d in devices], "text_x": [x] * n, "text": [""] * n,
                  "value": [f"critical path {micro(loop.path_seconds)}"] * n},
                 "critical path", PATH_MEANS, "#d55e00", f"critical-path:{loop.loop}")


def _split_parts(d: StepSplitView) -> list[tuple[str, str, str, str, float]]:
    """A device's median step as (legend, label, what, colour, seconds), in the order drawn."""
    parts = [("compute", op, f"compute: {op}", COMPUTE_SHADES[i % 2], s) for i, (op, s) in enumerate(d.compute)]
    parts += [("wait", "wait", "waiting for values", STEP_COLOURS["wait"], d.wait),
              ("send", "send", "sending (serialize + write)", STEP_COLOURS["send"], d.send),
              ("overhead", "overhead", "overhead (the runtime's Python between)", STEP_COLOURS["overhead"],
               d.overhead)]
    if d.other_devices:  # one thread ran this device and others (processes: host)
        parts.insert(len(d.compute), ("other devices", "other devices", SEGMENT_MEANS["other devices"],
                                      STEP_COLOURS["other devices"], d.other_devices))
    return parts


def split_bars(loop: LoopStepsView, view: RunView) -> StepBars:
    """Each device's median step: compute per op, then waiting, sending and overhead, stacked."""
    order = [d for d in view.device_order() if any(s.device == d for s in loop.devices)]
    devices = sorted(loop.devices, key=lambda s: order.index(s.device) if s.device in order else len(order))
    stacked: list[tuple[StepSplitView, float, tuple[str, str, str, str, float]]] = []
    for d in devices:
        left = 0.0
        for part in _split_parts(d):
            stacked.append((d, left, part))
            left += part[4] * 1e6
    # room right of the longest bar for its "median step" words
    end = max([*(left + part[4] * 1e6 for _, left, part in stacked), *(d.step * 1e6 for d in devices), 1.0]) * 1.3
    columns: dict[str, list[Any]] = {
        "row": [short_device(d.device) for d, _, _ in stacked], "left": [left for _, left, _ in stacked],
        "right": [left + part[4] * 1e6 for _, left, part in stacked],
        "legend": [part[0] for _, _, part in stacked], "label": [_fitted(part[1], part[4], end) for _, _, part in stacked],
        "what": [part[2] for _, _, part in stacked], "colour": [part[3] for _, _, part in stacked],
        "device": [d.device for d, _, _ in stacked], "took": [micro(part[4]) for _, _, part in stacked],
        "share": [f"{100 * part[4] / d.step:.0f}% of the median step" if d.step else "-" for d, _, part in stacked],
    }
    ends = {d.device: left + part[4] * 1e6 for d, left, part in stacked}  # the last part's end: the words go after
    rows = [short_device(d.device) for d in devices]
    marks = [Marks({"x": [d.step * 1e6 for d in devices], "row": rows,
                    "text_x": [max(d.step * 1e6, ends[d.device]) for d in devices],
                    "text": [f"median step {micro(d.step)}" for d in devices]},
                   "median step", STEP_MEANS, "#222222", f"median-step:{loop.loop}")]
    if loop.segments:  # the path's length beside each device's step: the two numbers, side by side
        marks.append(_path_marks(loop, [d.device for d in devices]))
    end = max(end, loop.path_seconds * 1e6 * 1.3)
    return StepBars(title=f"Loop {loop.loop}: each device's step, median of each part over "
                          f"{len(loop.sampled_steps)} sampled steps (so they need not add up)",
                    axis="µs of a step", rows=tuple(rows), columns=columns, end=end,
                    tooltips=(("device", "@device"), ("part", "@what"), ("median", "@took"), ("share", "@share")),
                    marks=tuple(marks), name=f"split:{loop.loop}")


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def step_words(loop: LoopStepsView, view: RunView) -> str:
    """The section's words above a loop's two figures: its summary line, what was sampled, how to read them."""
    steps = ", ".join(str(s) for s in loop.sampled_steps) or "none"
    by_kind = path_by_kind((s.kind, s.seconds) for s in loop.segments)
    summary = (step_line(loop.loop, loop.path_seconds, by_kind, len(loop.sampled_steps), view.transport)
               if loop.segments else f"{loop.loop}: no critical path recorded")
    transport = TRANSPORT_SENTENCES.get(view.transport, TRANSPORT_WORDS.get(view.transport, view.transport))
    path = (f" The critical path is step {loop.path_step}'s, the sampled step whose path is the median length."
            if loop.path_step is not None else "")
    return (f"<h2>Loop <code>{_e(loop.loop)}</code>: one step</h2><p><b>{_e(summary)}</b></p>"
            f"<p>Sampled steps: {_e(steps)} (each recorded on every device together with the step before it)."
            f"{_e(path)} {_e(transport)}</p>" + _segment_table(loop.segments))


def _segment_table(segments: Sequence[SegmentView]) -> str:
    if not segments:
        return ""
    rows = "".join(f"<tr><td><code>{_e(short_device(s.device))}</code></td><td>{_e(s.kind)}</td>"
                   f"<td>{_e(s.name)}</td><td class=n>{_e(micro(s.seconds))}</td></tr>" for s in segments)
    return (f"<details><summary>The critical path's {len(segments)} segments, in time order</summary>"
            f"<table><tr><th>device</th><th>kind</th><th>name</th><th>took</th></tr>{rows}</table></details>")
