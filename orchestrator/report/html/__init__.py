"""The run report as a picture: one self-contained HTML page drawn with bokeh (``orchestrate report``).

The page has a header (the spec, backend, granularity, elapsed time, phases,
totals and how loops ran), a **timeline** with one row per device — every op
a bar from its start for its duration, every value Dask moved an arrow from
the sender's row to the receiver's — the **memory** of each device (planned
peak beside the peak its backend saw, and the limit), and tables of the
devices and ops. For each loop that ran in gang windows, its **step picture**:
one sampled step's critical path, segment by segment on its devices, and each
device's median step split into compute per op, waiting, sending and
overhead. Everything bokeh needs is inlined, so the file opens
offline. Only :mod:`.figures` imports bokeh, inside the functions that draw,
so importing the package never loads it.

Its modules: :mod:`.view` (the run report's JSON, checked), :mod:`.words`
(durations, sizes, device names), :mod:`.lanes` (the timeline's geometry),
:mod:`.steps` (a loop's step picture: its bars and words), :mod:`.figures` (the bokeh
figures) and :mod:`.page` (header, tables, template).
"""

from __future__ import annotations

from .figures import LANE_PX, MAX_LABELS
from .lanes import FRAME_WIDTH, LABEL_CHAR_PX, MAX_LANES
from .page import PAGE_WIDTH, render_run_report_file, run_report_html
from .steps import STEP_COLOURS, micro
from .view import (
    BadRunReport,
    DeviceView,
    LoopStepsView,
    OpView,
    RunView,
    SegmentView,
    StepSplitView,
    TransferView,
    parse_run_report,
    read_run_report,
)
from .words import (
    HOST_NOT_MEASURED,
    KIND_COLOURS,
    LIMIT_COLOUR,
    PLANNED_COLOUR,
    SEEN_COLOUR,
    TRANSFER_COLOUR,
    op_timing,
    seconds,
    short_device,
)

__all__ = [
    "FRAME_WIDTH",
    "HOST_NOT_MEASURED",
    "KIND_COLOURS",
    "LABEL_CHAR_PX",
    "LANE_PX",
    "LIMIT_COLOUR",
    "MAX_LABELS",
    "MAX_LANES",
    "PAGE_WIDTH",
    "PLANNED_COLOUR",
    "SEEN_COLOUR",
    "STEP_COLOURS",
    "TRANSFER_COLOUR",
    "BadRunReport",
    "DeviceView",
    "LoopStepsView",
    "OpView",
    "RunView",
    "SegmentView",
    "StepSplitView",
    "TransferView",
    "micro",
    "op_timing",
    "parse_run_report",
    "read_run_report",
    "render_run_report_file",
    "run_report_html",
    "seconds",
    "short_device",
]
