"""Where things go on the timeline, without bokeh: time zero, the axis's end, device rows and their lanes.

The timeline is a fixed width (:data:`FRAME_WIDTH`) so that the label packing
here, which estimates how much time a label covers, matches what the browser draws.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Sequence

from .view import OpView, RunView

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
    return min(starts) if starts else 0.0


def label_px(op: OpView) -> float:
    """About how wide an op's label is drawn, in pixels (its offset from the start tick included)."""
    return len(op.name) * LABEL_CHAR_PX + 12


def extent(view: RunView, origin: float) -> float:
    """Where the time axis ends: after the last bar, the last transfer and the last label.

    A label of ``p`` pixels starting at ``left`` fits when ``left + p * end / FRAME_WIDTH <= end``.
    """
    ends = [o.start + (o.duration or 0.0) - origin for o in view.ops if o.start is not None]
    ends += [t.stop - origin for t in view.transfers]
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
        free = [i for i, end in enumerate(ends) if end <= left]
        if free:
            lane = free[0]
        elif len(ends) < MAX_LANES:
            lane = len(ends)
            ends.append(0.0)
        else:
            lane = min(range(len(ends)), key=ends.__getitem__)
        ends[lane] = left + covers
        lane_of[op.name] = lane
    return lane_of


def device_rows(view: RunView, origin: float, seconds_per_px: float) -> tuple[dict[str, Row], dict[str, int], float]:
    """Each device's row, top to bottom in the report's device order; each timed op's lane; the rows' height."""
    by_device: dict[str, list[OpView]] = defaultdict(list)
    for op in view.ops:
        if op.start is not None:
            by_device[op.device].append(op)
    rows: dict[str, Row] = {}
    lane_of: dict[str, int] = {}
    top = 0.0
    for device in view.device_order():
        packed = pack_lanes(by_device.get(device, []), origin, seconds_per_px)
        lane_of.update(packed)
        count = max([1, *(lane + 1 for lane in packed.values())])
        rows[device] = Row(device, top + 0.3, count)
        top += count + 0.6
    return rows, lane_of, top
