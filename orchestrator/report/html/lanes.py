"""Where things go on the timeline, without bokeh: time zero, the axis's end, device rows and their lanes.

A device's row has a lane per loop whose windows ran there (on top), then its
ops' lanes; a loop op a window covers is drawn by the window, not again.

The timeline is a fixed width (:data:`FRAME_WIDTH`) so that the label packing
here, which estimates how much time a label covers, matches what the browser draws.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from .loops import WindowView, covered
from .view import OpView, RunView
from .words import seconds, short_device

FRAME_WIDTH = 840  # the plotting area of both figures; device names and legends take the rest
LABEL_CHAR_PX = 6.2  # average width of a character of the 10px labels
MAX_LANES = 6  # beyond this, ops of a device share lanes (their labels may overlap)


@dataclass(frozen=True)
class Row:
    """A device's row of the timeline: its lanes, top to bottom, in y units of one lane each."""

    device: str
    top: float
    lanes: int

    @property
    def centre(self) -> float:
        return self.top + self.lanes / 2

    def lane_y(self, lane: int) -> float:
        return self.top + lane + 0.5


def time_zero(view: RunView) -> float:
    """Time zero of the timeline: the first op or transfer that started (the report has no run start time)."""
    starts = [o.start for o in view.ops if o.start is not None] + [t.start for t in view.transfers]
    starts += [w.start for w in view.windows]
    return min(starts) if starts else 0.0


def label_px(op: OpView) -> float:
    """About how wide an op's label is drawn, in pixels (its offset from the start tick included)."""
    return len(op.name) * LABEL_CHAR_PX + 12


def extent(view: RunView, origin: float) -> float:
    """Where the time axis ends: after the last bar, the last transfer and the last label.

    A label of ``p`` pixels starting at ``left`` fits when ``left + p * end / FRAME_WIDTH <= end``.
    """
    ends = [o.start + (o.duration or 0.0) - origin for o in view.ops if o.start is not None]
    ends += [t.stop - origin for t in view.transfers] + [w.stop - origin for w in view.windows]
    ends += [(o.start - origin) / (1 - label_px(o) / FRAME_WIDTH) for o in view.ops
             if o.start is not None and label_px(o) < FRAME_WIDTH / 2]
    return max([*ends, 1e-6]) * 1.02


def pack_lanes(ops: Sequence[OpView], origin: float, seconds_per_px: float) -> dict[str, int]:
    """Each op's lane in its device row: greedy interval packing where an op covers its bar or its label,
    whichever is longer, so that labels of ops close in time do not overwrite each other."""
    ends: list[float] = []
    lane_of: dict[str, int] = {}
    for op in sorted(ops, key=lambda o: (o.start or 0.0, o.name)):
        left = (op.start or 0.0) - origin
        covers = max(op.duration or 0.0, label_px(op) * seconds_per_px)
        lane = _take_lane(ends, left)
        ends[lane] = left + covers
        lane_of[op.name] = lane
    return lane_of


def drawn_ops(view: RunView) -> list[OpView]:
    """The ops drawn as bars: timed, and not a loop op whose runs a drawn window covers."""
    return [o for o in view.ops if o.start is not None and not (o.looped and covered(o.device, o.start, view.windows))]


def _loop_lanes(windows: Sequence[WindowView]) -> dict[str, int]:
    """Each loop's lane of windows on one device: loops that ran one after another share a lane (a sweep's
    copies in waves), loops side by side get one each (at most :data:`MAX_LANES`)."""
    extent: dict[str, list[float]] = {}
    for w in windows:
        span = extent.setdefault(w.loop, [w.start, w.stop])
        span[0], span[1] = min(span[0], w.start), max(span[1], w.stop)
    ends: list[float] = []
    lane_of: dict[str, int] = {}
    for loop, (start, stop) in sorted(extent.items(), key=lambda item: (item[1][0], item[0])):
        lane = _take_lane(ends, start)
        ends[lane] = max(ends[lane], stop)
        lane_of[loop] = lane
    return lane_of


def device_rows(view: RunView, origin: float, seconds_per_px: float
                ) -> tuple[dict[str, Row], dict[str, int], float, dict[tuple[str, str], float]]:
    """Each device's row, top to bottom in the report's device order; each drawn op's lane; the rows' height;
    the y of each (loop, device) lane of windows."""
    by_device: dict[str, list[OpView]] = defaultdict(list)
    for op in drawn_ops(view):
        by_device[op.device].append(op)
    loops = {device: _loop_lanes([w for w in view.windows if w.device == device])
             for device in dict.fromkeys(w.device for w in view.windows)}
    rows: dict[str, Row] = {}
    lane_of: dict[str, int] = {}
    loop_y: dict[tuple[str, str], float] = {}
    top = 0.0
    for device in view.device_order() + [d for d in loops if d not in view.device_order()]:
        above = max([0, *(lane + 1 for lane in loops.get(device, {}).values())])
        packed = pack_lanes(by_device.get(device, []), origin, seconds_per_px)
        lane_of.update({name: lane + above for name, lane in packed.items()})
        count = max([1, *(lane + 1 + above for lane in packed.values()), above])
        rows[device] = Row(device, top + 0.3, count)
        loop_y.update({(loop, device): rows[device].lane_y(lane) for loop, lane in loops.get(device, {}).items()})
        top += count + 0.6
    return rows, lane_of, top, loop_y


def window_columns(windows: Sequence[WindowView], ys: Mapping[tuple[str, str], float],
                   origin: float) -> dict[str, list[Any]]:
    """One loop's windows as the timeline's bars: on its lane of each device's row, hovered with their steps."""
    return {
        "y": [ys[(w.loop, w.device)] for w in windows],
        "left": [w.start - origin for w in windows], "right": [w.stop - origin for w in windows],
        "loop": [w.loop for w in windows], "device": [short_device(w.device) for w in windows],
        "steps": [f"{w.first}" if w.first == w.last else f"{w.first}–{w.last}" for w in windows],
        "when": [f"+{seconds(w.start - origin)}, {seconds(w.stop - w.start)}" for w in windows],
        "label": [f"{w.loop} {w.first}–{w.last}" for w in windows],
    }


def _take_lane(ends: list[float], start: float) -> int:
    """The first lane free by ``start`` (``ends``: where each lane's last bar ends), else a new one while there
    are fewer than :data:`MAX_LANES`, else the lane that frees first."""
    free = [i for i, end in enumerate(ends) if end <= start]
    if free:
        return free[0]
    if len(ends) < MAX_LANES:
        ends.append(0.0)
        return len(ends) - 1
    return min(range(len(ends)), key=ends.__getitem__)
