"""The run report as a picture: one self-contained HTML page drawn with bokeh (``orchestrate report``).

The page has a header (the spec, backend, granularity, elapsed time, phases,
totals and how loops ran), a **timeline** with one row per device — every op
a bar from its start for its duration, every value Dask moved an arrow from
the sender's row to the receiver's — the **memory** of each device (planned
peak beside the peak its backend saw, and the limit), and tables of the
devices and ops. Everything bokeh needs is inlined, so the file opens
offline. This is the only module that imports bokeh; it does so inside the
functions that draw, so importing the package never loads it.

The input is the JSON ``run --report`` writes (``RunReport.as_dict()``); it
is read through small views that check every field they use, so a file that
is not a run report is one clear error, never a traceback.
"""

from __future__ import annotations

import html
import json
import math
import os
from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from .errors import OrchestratorError, format_bytes
from .model import RUN_REPORT_FORMAT

if TYPE_CHECKING:
    from bokeh.models import Model
    from bokeh.models.annotations import LegendItem
    from bokeh.plotting import figure as Figure

# Layout constants (pixels). The timeline is a fixed width so that the label packing below,
# which estimates how much time a label covers, matches what the browser draws.
PAGE_WIDTH = 1280
FRAME_WIDTH = 840  # the plotting area of both figures; device names and legends take the rest
LANE_PX = 26  # one lane of a device row: a bar and its label
LABEL_CHAR_PX = 6.2  # average width of a character of the 10px labels
MAX_LANES = 6  # beyond this, ops of a device share lanes (their labels may overlap)
MAX_LABELS = 200  # more ops than this: no labels on the bars (they would be a blur); hover names them
HOST_NOT_MEASURED = "not measured (host memory is Dask's)"

# Colour-blind-safe, distinct at a glance (Okabe-Ito, then Tableau's lighter tones).
KIND_COLOURS = ("#56b4e9", "#e69f00", "#009e73", "#f0e442", "#0072b2", "#d55e00", "#cc79a7", "#999999",
                "#8cd17d", "#b6992d", "#f1ce63", "#86bcb6", "#e15759", "#ff9d9a", "#bab0ac", "#d37295")
TRANSFER_COLOUR = "#7b3294"
PLANNED_COLOUR = "#4c78a8"
SEEN_COLOUR = "#f58518"
LIMIT_COLOUR = "#c0392b"


# A label's white backing, so that it reads over hatching and arrows. (bokeh's annotations of
# ``figure.text`` lack these keywords, though its Text glyph has them.)
_LABEL_BACKGROUND: dict[str, Any] = {"background_fill_color": "#ffffff", "background_fill_alpha": 0.75, "padding": 1}
# An Arrow's body is its line properties, unprefixed (bokeh's stub calls them ``body_line_*``).
_NO_BODY: dict[str, Any] = {"line_alpha": 0.0}


class BadRunReport(OrchestratorError):
    """A run report file that cannot be read, is not JSON, or is not a run report."""


# --------------------------------------------------------------------------- reading


@dataclass(frozen=True)
class OpView:
    """One op of the report, as the page draws it."""

    name: str
    kind: str
    device: str  # where it ran (its worker), else where it was planned
    planned_device: str
    start: float | None
    duration: float | None
    output_bytes: int | None
    runs: int | None
    why: str
    note: str

    @property
    def looped(self) -> bool:
        """A loop op: its record sums ``runs`` steps, and ``start`` is the first step's."""
        return (self.runs or 0) > 1


@dataclass(frozen=True)
class DeviceView:
    device: str
    ops: int
    planned_peak_bytes: int | None
    limit_bytes: int | None
    peak_bytes_seen: int | None
    backend: str | None


@dataclass(frozen=True)
class TransferView:
    value: str
    source: str
    target: str
    nbytes: int
    start: float
    stop: float


@dataclass(frozen=True)
class RunView:
    """The fields of a run report the page shows, checked."""

    name: str
    file: str
    run: str
    backend: str
    granularity: str
    naming: str
    naming_why: str
    elapsed: float
    startup: float  # before elapsed: the cluster's start (or connecting) until its workers were ready
    phases: tuple[tuple[str, float], ...]
    totals: Mapping[str, int]
    loops: tuple[tuple[str, str], ...]
    ops: tuple[OpView, ...]
    devices: tuple[DeviceView, ...]
    transfers: tuple[TransferView, ...]
    restarted: tuple[str, ...]
    unverified: tuple[str, ...]

    def device_order(self) -> list[str]:
        """The report's devices in its order, then any device only an op or a transfer names."""
        order = [d.device for d in self.devices]
        for name in [o.device for o in self.ops] + [e for t in self.transfers for e in (t.source, t.target)]:
            if name not in order:
                order.append(name)
        return order


def read_run_report(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The JSON of a run report file; :class:`BadRunReport` when it cannot be read or parsed."""
    name = os.fspath(path)
    try:
        with open(name, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as exc:
        raise BadRunReport(f"cannot read run report {name}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise BadRunReport(f"{name} is not a run report: not UTF-8 text ({exc.reason})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadRunReport(f"{name} is not a run report: invalid JSON at line {exc.lineno} column {exc.colno}: "
                           f"{exc.msg}") from None
    if not isinstance(data, dict):
        raise BadRunReport(f"{name} is not a run report: expected a JSON object, got {_json_type(data)}")
    return data


def _json_type(value: object) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number")


class _Fields:
    """Typed access to one JSON object of the report; a wrong or missing field names its path."""

    def __init__(self, data: object, where: str):
        if not isinstance(data, dict):
            raise _Wrong(f"{where or 'the report'} should be an object, got {_json_type(data)}")
        self.data: dict[str, Any] = data
        self.where = where

    def _path(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def _value(self, key: str, optional: bool) -> Any:
        if key not in self.data:
            if optional:
                return None
            raise _Wrong(f"'{self._path(key)}' is missing")
        return self.data[key]

    def text(self, key: str, default: str | None = None) -> str:
        value = self._value(key, default is not None)
        if value is None and default is not None:
            return default
        if not isinstance(value, str):
            raise _Wrong(f"'{self._path(key)}' should be a string, got {_json_type(value)}")
        return value

    def number(self, key: str, optional: bool = False) -> float | None:
        value = self._value(key, optional)
        if value is None and optional:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise _Wrong(f"'{self._path(key)}' should be a number, got {_json_type(value)}")
        return float(value)

    def count(self, key: str, optional: bool = False) -> int | None:
        value = self._value(key, optional)
        if value is None and optional:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise _Wrong(f"'{self._path(key)}' should be a whole number of at least 0, got {value!r}")
        return value

    def items(self, key: str, optional: bool = False) -> list[Any]:
        value = self._value(key, optional)
        if value is None and optional:
            return []
        if not isinstance(value, list):
            raise _Wrong(f"'{self._path(key)}' should be an array, got {_json_type(value)}")
        return value

    def mapping(self, key: str) -> _Fields:
        value = self._value(key, True)
        return _Fields({} if value is None else value, self._path(key))


class _Wrong(Exception):
    """A field of the report is missing or of the wrong type (becomes :class:`BadRunReport`)."""


def parse_run_report(data: Mapping[str, Any], source: str = "the run report") -> RunView:
    """Check a run report's JSON and return the view the page draws; :class:`BadRunReport` if it is not one."""
    try:
        return _parse(_Fields(dict(data) if isinstance(data, Mapping) else data, ""))
    except _Wrong as exc:
        raise BadRunReport(f"{source} is not a run report: {exc}") from None


def _parse(top: _Fields) -> RunView:
    version = top.data.get("format")
    if version != RUN_REPORT_FORMAT:
        raise _Wrong(f"'format' is {version!r}, this orchestrate reads run reports of format {RUN_REPORT_FORMAT}")
    naming = top.mapping("task_names")
    totals = top.mapping("totals")
    phases = top.mapping("phases_seconds")
    loops = top.mapping("loops")
    return RunView(
        name=top.text("name"), file=top.text("file", ""), run=top.text("run", ""),
        backend=top.text("backend", "unknown"), granularity=top.text("granularity", "partition"),
        naming=naming.text("naming", ""), naming_why=naming.text("why", ""),
        elapsed=top.number("elapsed_seconds") or 0.0, startup=top.number("startup_seconds", optional=True) or 0.0,
        phases=tuple((key, phases.number(key) or 0.0) for key in phases.data),
        totals={key: totals.count(key) or 0 for key in totals.data},
        loops=tuple((key, loops.text(key)) for key in loops.data),
        ops=tuple(_op(_Fields(item, f"ops[{i}]")) for i, item in enumerate(top.items("ops"))),
        devices=tuple(_device(_Fields(item, f"devices[{i}]")) for i, item in enumerate(top.items("devices"))),
        transfers=tuple(_transfer(_Fields(item, f"transfers[{i}]"))
                        for i, item in enumerate(top.items("transfers", optional=True))),
        restarted=tuple(str(d) for d in top.items("restarted_devices", optional=True)),
        unverified=tuple(str(d) for d in top.items("unverified", optional=True)),
    )


def _op(f: _Fields) -> OpView:
    planned = f.text("planned_device")
    worker = f.data.get("worker")
    device = f.text("worker") if worker is not None else planned
    return OpView(name=f.text("name"), kind=f.text("op"), device=device, planned_device=planned,
                  start=f.number("start", optional=True), duration=f.number("duration", optional=True),
                  output_bytes=f.count("output_bytes", optional=True), runs=f.count("runs", optional=True),
                  why=f.text("why", ""), note=f.text("note", ""))


def _device(f: _Fields) -> DeviceView:
    return DeviceView(device=f.text("device"), ops=f.count("ops", optional=True) or 0,
                      planned_peak_bytes=f.count("planned_peak_bytes", optional=True),
                      limit_bytes=f.count("limit_bytes", optional=True),
                      peak_bytes_seen=f.count("peak_bytes_seen", optional=True),
                      backend=f.text("backend", "") or None)


def _transfer(f: _Fields) -> TransferView:
    return TransferView(value=f.text("value"), source=f.text("from"), target=f.text("to"),
                        nbytes=f.count("bytes") or 0, start=f.number("start") or 0.0, stop=f.number("stop") or 0.0)


# --------------------------------------------------------------------------- words


def short_device(device: str) -> str:
    """``/job:worker/replica:0/task:0/device:GPU:1`` as ``/job:worker/task:0/GPU:1`` (replica only when not 0)."""
    parts = [p for p in device.strip("/").split("/") if p and p != "replica:0"]
    return "/" + "/".join(p.removeprefix("device:") for p in parts)


def seconds(value: float) -> str:
    """A duration in the unit that reads best: ``70 µs``, ``12.3 ms``, ``6.81 s``."""
    if value < 1e-3:
        return f"{value * 1e6:.0f} µs"
    if value < 1.0:
        return f"{value * 1e3:.1f} ms"
    return f"{value:.2f} s"


def _plural(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _bytes(n: int | None) -> str:
    return "unknown" if n is None else format_bytes(n)


def op_timing(op: OpView, origin: float) -> str:
    """The op's timing in words; a loop op says that its time is summed over its runs."""
    if op.start is None:
        return op.note or "no timing recorded"
    at = f"+{seconds(op.start - origin)}"
    took = seconds(op.duration or 0.0)
    if op.looped and op.runs:
        each = seconds((op.duration or 0.0) / op.runs)
        return (f"{op.runs} runs, {took} in all ({each} each on average), first at {at}; "
                f"the bar is their summed time drawn from the first run, not when they ran")
    return f"{took} from {at}"


# --------------------------------------------------------------------------- timeline


@dataclass(frozen=True)
class _Row:
    """A device's row of the timeline: its lanes, top to bottom, in y units of one lane each."""

    device: str
    top: float
    lanes: int

    @property
    def centre(self) -> float:
        return self.top + self.lanes / 2

    def lane_y(self, lane: int) -> float:
        return self.top + lane + 0.5


def _origin(view: RunView) -> float:
    """Time zero of the timeline: the first op or transfer that started (the report has no run start time)."""
    starts = [o.start for o in view.ops if o.start is not None] + [t.start for t in view.transfers]
    return min(starts) if starts else 0.0


def _label_px(op: OpView) -> float:
    """About how wide an op's label is drawn, in pixels (its offset from the start tick included)."""
    return len(op.name) * LABEL_CHAR_PX + 12


def _extent(view: RunView, origin: float) -> float:
    """Where the time axis ends: after the last bar, the last transfer and the last label.

    A label of ``p`` pixels starting at ``left`` fits when ``left + p * end / FRAME_WIDTH <= end``.
    """
    ends = [o.start + (o.duration or 0.0) - origin for o in view.ops if o.start is not None]
    ends += [t.stop - origin for t in view.transfers]
    ends += [(o.start - origin) / (1 - _label_px(o) / FRAME_WIDTH) for o in view.ops
             if o.start is not None and _label_px(o) < FRAME_WIDTH / 2]
    return max([*ends, 1e-6]) * 1.02


def _lanes(ops: Sequence[OpView], origin: float, seconds_per_px: float) -> dict[str, int]:
    """Each op's lane in its device row: greedy interval packing where an op covers its bar or its label,
    whichever is longer, so that labels of ops close in time do not overwrite each other."""
    ends: list[float] = []
    lane_of: dict[str, int] = {}
    for op in sorted(ops, key=lambda o: (o.start or 0.0, o.name)):
        left = (op.start or 0.0) - origin
        covers = max(op.duration or 0.0, _label_px(op) * seconds_per_px)
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


def _kind_colours(view: RunView) -> dict[str, str]:
    kinds = sorted({o.kind for o in view.ops if o.start is not None})
    return {kind: KIND_COLOURS[i % len(KIND_COLOURS)] for i, kind in enumerate(kinds)}


def _timeline(view: RunView) -> Figure:
    from bokeh.models import ColumnDataSource, FixedTicker, HoverTool, Range1d
    from bokeh.models.annotations import BoxAnnotation, Legend, Title
    from bokeh.plotting import figure

    origin = _origin(view)
    end = _extent(view, origin)
    start = -end * 0.01
    seconds_per_px = (end - start) / FRAME_WIDTH
    timed = [o for o in view.ops if o.start is not None]
    by_device: dict[str, list[OpView]] = defaultdict(list)
    for op in timed:
        by_device[op.device].append(op)
    rows: dict[str, _Row] = {}
    lane_of: dict[str, int] = {}
    top = 0.0
    for device in view.device_order():
        lanes = _lanes(by_device.get(device, []), origin, seconds_per_px)
        lane_of.update(lanes)
        count = max([1, *(lane + 1 for lane in lanes.values())])
        rows[device] = _Row(device, top + 0.3, count)
        top += count + 0.6
    colours = _kind_colours(view)

    fig = figure(frame_width=FRAME_WIDTH, frame_height=int(top * LANE_PX), x_range=Range1d(start=start, end=end),
                 y_range=Range1d(start=top, end=0), tools="xpan,xwheel_zoom,box_zoom,reset,save",
                 active_scroll="xwheel_zoom", toolbar_location="above",
                 title="Timeline: one row per device; bars are ops, arrows values Dask moved between devices",
                 x_axis_label="seconds since the first op or transfer started")
    fig.yaxis.ticker = FixedTicker(ticks=[row.centre for row in rows.values()])
    fig.yaxis.major_label_overrides = {row.centre: short_device(row.device) for row in rows.values()}
    fig.yaxis.major_label_text_font_size = "11px"
    fig.ygrid.visible = False
    for i, row in enumerate(rows.values()):
        if i % 2 == 0:  # banded rows: which lanes belong to which device
            fig.add_layout(BoxAnnotation(top=row.top - 0.3, bottom=row.top + row.lanes + 0.3,
                                         fill_color="#000000", fill_alpha=0.04, line_alpha=0))

    ops = ColumnDataSource(data={
        "name": [o.name for o in timed],
        "kind": [o.kind for o in timed],
        "device": [o.device for o in timed],
        "y": [rows[o.device].lane_y(lane_of[o.name]) for o in timed],
        "left": [(o.start or 0.0) - origin for o in timed],
        "right": [(o.start or 0.0) - origin + (o.duration or 0.0) for o in timed],
        "colour": [colours[o.kind] for o in timed],
        "hatch": ["/" if o.looped else " " for o in timed],
        "alpha": [0.55 if o.looped else 0.9 for o in timed],
        "timing": [op_timing(o, origin) for o in timed],
        "bytes": [_bytes(o.output_bytes) for o in timed],
        "runs": [str(o.runs) if o.runs is not None else "-" for o in timed],
    })
    bars = fig.hbar(y="y", left="left", right="right", height=0.7, source=ops, fill_color="colour",
                    fill_alpha="alpha", line_color="colour", hatch_pattern="hatch", hatch_color="#555555",
                    hatch_alpha=0.45, hatch_scale=14, hatch_weight=0.8)
    # an op of 70 µs on a 100 ms axis is under a pixel wide: a tick at its start keeps every op visible
    ticks = fig.rect(x="left", y="y", width=3, width_units="screen", height=0.7, source=ops, fill_color="colour",
                     line_color="#333333", line_width=0.5)
    if len(timed) <= MAX_LABELS:
        fig.text(x="left", y="y", text="name", source=ops, x_offset=6, text_baseline="middle",
                 text_font_size="10px", text_color="#222222", **_LABEL_BACKGROUND)
    fig.add_tools(HoverTool(renderers=[bars, ticks], tooltips=[
        ("op", "@name (@kind)"), ("device", "@device"), ("time", "@timing"), ("output", "@bytes"),
        ("runs", "@runs")]))

    # legend swatches: a renderer of one undrawable (NaN) bar per entry, so each shows its plain colour
    entries = [(kind, colour, " ") for kind, colour in colours.items()]
    if any(o.looped for o in timed):
        entries.append(("hatched: a loop op, its runs' time summed", "#dddddd", "/"))
    nan = float("nan")
    hatches: list[Any] = [h for _, _, h in entries]  # bokeh types these as its pattern names, not their letters
    swatches = fig.hbar(y=[nan] * len(entries), left=[nan] * len(entries), right=[nan] * len(entries), height=0.7,
                        fill_color=[c for _, c, _ in entries], line_color="#777777", line_alpha=0.5,
                        hatch_pattern=hatches, hatch_color="#555555", hatch_alpha=0.6,
                        hatch_scale=8)
    items = [_legend_item(label, swatches, i) for i, (label, _, _) in enumerate(entries)]
    if any(o.looped for o in timed):
        fig.add_layout(Title(text=f"Hatched bars are loop ops: the time of all their runs, summed, drawn from the "
                                  f"first run (the runs were spread over the loop; the run took "
                                  f"{seconds(view.elapsed)})", text_font_size="11px", text_font_style="italic",
                             text_color="#555555"), "above")
    if view.transfers:
        items.append(_transfers(fig, view, rows, origin))
    if items:
        # top_left of the side panel: bokeh measures the legend before its font is in, and one placed
        # top_right grew leftwards over the plot
        fig.add_layout(Legend(items=items, title="op kind", label_text_font_size="10px", spacing=0,
                              location="top_left", title_text_font_size="10px"), "right")
    return fig


def _transfers(fig: Figure, view: RunView, rows: Mapping[str, _Row], origin: float) -> LegendItem:
    """Arrows from the sender's row at a transfer's start to the receiver's row at its stop; values moved in
    one Dask transfer (one entry of the receiver's transfer log) share an arrow. The legend item."""
    from bokeh.models import ColumnDataSource, HoverTool
    from bokeh.models.annotations import Arrow, VeeHead

    grouped: dict[tuple[str, str, float, float], list[TransferView]] = defaultdict(list)
    for t in view.transfers:
        grouped[(t.source, t.target, t.start, t.stop)].append(t)
    keys = sorted(grouped, key=lambda k: (k[2], k[0], k[1]))
    source = ColumnDataSource(data={
        "x0": [k[2] - origin for k in keys], "x1": [k[3] - origin for k in keys],
        "y0": [rows[k[0]].centre for k in keys], "y1": [rows[k[1]].centre for k in keys],
        "values": [", ".join(f"{t.value} ({format_bytes(t.nbytes)})" for t in grouped[k]) for k in keys],
        "bytes": [format_bytes(sum(t.nbytes for t in grouped[k])) for k in keys],
        "route": [f"{short_device(k[0])} → {short_device(k[1])}" for k in keys],
        "when": [f"+{seconds(k[2] - origin)} to +{seconds(k[3] - origin)} ({seconds(k[3] - k[2])})" for k in keys],
    })
    lines = fig.segment(x0="x0", y0="y0", x1="x1", y1="y1", source=source, line_color=TRANSFER_COLOUR,
                        line_width=1.5, line_alpha=0.55, line_dash="dashed")
    # the segments draw the arrows' bodies (and carry the hover); the Arrow only its heads
    fig.add_layout(Arrow(x_start="x0", y_start="y0", x_end="x1", y_end="y1", source=source, **_NO_BODY,
                         end=VeeHead(size=9, fill_color=TRANSFER_COLOUR, line_color=TRANSFER_COLOUR,
                                     fill_alpha=0.8)))
    fig.add_tools(HoverTool(renderers=[lines], line_policy="interp", tooltips=[
        ("moved", "@values"), ("bytes", "@bytes"), ("from → to", "@route"), ("when", "@when")]))
    return _legend_item("value moved by Dask (sender → receiver)", lines)


def _legend_item(label: str, renderer: Any, index: int | None = None) -> LegendItem:
    """A legend entry drawn like ``renderer`` at row ``index`` of its data. (``Any``: bokeh's stubs want a
    ``GlyphRenderer[Glyph]``, which to mypy a ``GlyphRenderer[HBar]`` is not.)"""
    from bokeh.models.annotations import LegendItem

    return LegendItem(label=label, renderers=[renderer], index=index)


# --------------------------------------------------------------------------- memory


def _memory(view: RunView) -> Figure:
    """Per device: planned peak and the peak its backend saw, side by side on a log axis, the limit a red mark."""
    from bokeh.models import CategoricalAxis, ColumnDataSource, FactorRange, FixedTicker, HoverTool, Range1d
    from bokeh.models.annotations import Legend
    from bokeh.plotting import figure

    devices = list(view.devices)
    # a categorical y axis runs bottom to top: reversed, the first device and its planned peak are on top
    factors = [(short_device(d.device), what) for d in reversed(devices) for what in ("peak seen", "planned peak")]
    values = [v for d in devices for v in (d.planned_peak_bytes, d.peak_bytes_seen, d.limit_bytes) if v]
    high = max([*values, 1024])
    floor = 0.5  # bars start here: a log axis has no zero
    fig = figure(frame_width=FRAME_WIDTH, frame_height=44 * len(devices), y_range=FactorRange(factors=factors),
                 x_axis_type="log", x_range=Range1d(start=floor, end=high * 40), tools="save",
                 toolbar_location=None, title="Memory per device: planned peak beside the peak seen, against the limit",
                 x_axis_label="bytes (log scale)")
    ticks = [2 ** (5 * k) for k in range(0, int(math.log2(high * 40) // 5) + 1)]
    fig.xaxis.ticker = FixedTicker(ticks=ticks)
    fig.xaxis.major_label_overrides = {t: _round_bytes(t) for t in ticks}
    axis = fig.yaxis[0]
    assert isinstance(axis, CategoricalAxis)
    axis.group_label_orientation = "horizontal"
    axis.major_label_text_font_size = "10px"
    axis.group_text_font_size = "11px"
    fig.ygrid.visible = False

    def label(d: DeviceView, what: str, value: int | None) -> str:
        if value is not None:
            return f"{what} {format_bytes(value)}"
        if what == "seen":
            return HOST_NOT_MEASURED if d.backend == "host" else "not measured"
        return "planned peak unknown"

    rows = [(d, "planned peak", d.planned_peak_bytes, PLANNED_COLOUR, "planned") for d in devices]
    rows += [(d, "peak seen", d.peak_bytes_seen, SEEN_COLOUR, "seen") for d in devices]
    source = ColumnDataSource(data={
        "y": [(short_device(d.device), what) for d, what, _, _, _ in rows],
        "right": [max(value or 0, floor) for _, _, value, _, _ in rows],
        "colour": [colour for _, _, _, colour, _ in rows],
        "label": [label(d, word, value) for d, _, value, _, word in rows],
        "device": [d.device for d, _, _, _, _ in rows],
        "limit": [_bytes(d.limit_bytes) if d.limit_bytes is not None else "no limit" for d, _, _, _, _ in rows],
        "backend": [d.backend or "-" for d, _, _, _, _ in rows],
    })
    bars = fig.hbar(y="y", left=floor, right="right", height=0.7, source=source, fill_color="colour",
                    line_color="colour")
    fig.text(x="right", y="y", text="label", source=source, x_offset=6, text_baseline="middle",
             text_font_size="10px", text_color="#222222")
    fig.add_tools(HoverTool(renderers=[bars], tooltips=[("device", "@device"), ("peak", "@label"),
                                                        ("limit", "@limit"), ("backend", "@backend")]))
    items = [_legend_item("planned peak (orchestrate plan)", bars, 0)]
    if devices:
        items.append(_legend_item("peak seen by the device's backend", bars, len(devices)))
    limited = [(short_device(d.device), float(d.limit_bytes)) for d in devices if d.limit_bytes is not None]
    if limited:
        marks = fig.scatter(x=[b for _, b in limited], y=[name for name, _ in limited], marker="dash",
                            angle=math.pi / 2, size=40, line_color=LIMIT_COLOUR, line_width=3)
        fig.text(x=[b for _, b in limited], y=[name for name, _ in limited],
                 text=[f"limit {format_bytes(b)}" for _, b in limited], x_offset=6, text_baseline="middle",
                 text_font_size="10px", text_color=LIMIT_COLOUR)
        items.append(_legend_item("memory limit", marks))
    unlimited = [d for d in devices if d.limit_bytes is None]
    if unlimited:
        fig.text(x=[high * 8 for _ in unlimited], y=[short_device(d.device) for d in unlimited],
                 text=["no limit" for _ in unlimited], text_baseline="middle", text_font_size="10px",
                 text_color=LIMIT_COLOUR)
    fig.add_layout(Legend(items=items, label_text_font_size="10px", spacing=0, location="top_left"), "right")
    return fig


# --------------------------------------------------------------------------- header and tables


def _round_bytes(n: int) -> str:
    """An axis tick in binary units without a needless decimal: ``32 KiB``, ``1 GiB``."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:g} {unit}"
        n //= 1024
    raise AssertionError("unreachable")


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _header(view: RunView, source: str) -> str:
    t = view.totals
    exchanged = t.get("bytes_exchanged", 0)
    dask_moved = max(t.get("bytes_moved", 0) - exchanged, 0)
    facts = [
        ("spec", f"{_e(view.file or '-')} (run {_e(view.run or '-')})"),
        ("backend", _e(view.backend)),
        ("granularity", _e(view.granularity) + (" (a Dask task per device partition; loops per device and window)"
                                                 if view.granularity == "partition" else " (a Dask task per op)")),
        ("task names", f"{_e(view.naming or '-')}" + (f" ({_e(view.naming_why)})" if view.naming_why else "")),
        ("elapsed", _e(seconds(view.elapsed)) + (f" (after {_e(seconds(view.startup))} of start-up: cluster and "
                                                 "device workers)" if view.startup else "")),
        ("phases", ", ".join(f"{_e(k)} {_e(seconds(v))}" for k, v in view.phases) or "-"),
        ("totals", _e(f"{_plural(t.get('ops', len(view.ops)), 'op')} in {_plural(t.get('tasks', 0), 'Dask task')}; "
                      f"{_plural(t.get('moves', 0), 'planned transfer')}; Dask moved {format_bytes(dask_moved)} in "
                      f"{_plural(t.get('transfers_seen', len(view.transfers)), 'transfer')}"
                      + (f"; loop windows sent {format_bytes(exchanged)} worker to worker" if exchanged else ""))),
        ("loops", "<br>".join(f"<b>{_e(k)}</b>: {_e(v)}" for k, v in view.loops) or "none"),
    ]
    if view.restarted:
        facts.append(("restarted devices", _e(", ".join(view.restarted))))
    if view.unverified:
        facts.append(("unverified ops", _e(", ".join(view.unverified)) + " (their records died with a restarted "
                                                                          "worker)"))
    rows = "\n".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in facts)
    return (f'<header><h1>Run of <code>{_e(view.name)}</code></h1>'
            f'<p class="source">report: {_e(source)}</p>\n<table class="facts">\n{rows}\n</table>\n'
            f"{_notes(view)}</header>")


def _notes(view: RunView) -> str:
    """How to read the pictures, saying what the report cannot show."""
    notes = ["Time zero is the first op or transfer that started; ops' starts and transfers' times are the "
             "workers' clocks. Hover over a bar or an arrow for its details; drag or scroll to zoom the time axis.",
             "Each op is a bar from its start for its duration, with a tick at its start (short ops are narrower "
             "than a pixel). Ops of a device that run close together are drawn in separate lanes of its row."]
    if sum(o.start is not None for o in view.ops) > MAX_LABELS:
        notes.append(f"More than {MAX_LABELS} ops: the bars carry no names; hover over one for its name.")
    looped = [o for o in view.ops if o.looped]
    if looped:
        runs = sorted({o.runs or 0 for o in looped})
        notes.append(f"<b>Loop ops</b> (hatched) ran {' or '.join(str(r) for r in runs)} times: each has one record "
                     "whose duration is summed over its runs, drawn from its <i>first</i> run's start. The bar shows "
                     "how much time the op took in all, not when: its runs were spread over the loop "
                     f"(the run took {_e(seconds(view.elapsed))}).")
    if view.totals.get("bytes_exchanged", 0):
        notes.append("Values loop windows sent worker to worker are not drawn: the report records their total "
                     "bytes, not each message.")
    untimed = [o for o in view.ops if o.start is None]
    if untimed:
        notes.append(f"{_plural(len(untimed), 'op')} with no worker record (loop states and results the driver "
                     "resolves) are listed in the table below, not drawn.")
    if any(d.backend == "host" and d.peak_bytes_seen is None for d in view.devices):
        notes.append(f"Host (CPU) devices: peak seen is {HOST_NOT_MEASURED}; their limit is the worker's "
                     "memory_limit.")
    return '<ul class="notes">' + "".join(f"<li>{n}</li>" for n in notes) + "</ul>"


def _tables(view: RunView) -> str:
    origin = _origin(view)
    busy: dict[str, float] = defaultdict(float)
    for o in view.ops:
        busy[o.device] += o.duration or 0.0
    device_rows = []
    for d in view.devices:
        seen = (format_bytes(d.peak_bytes_seen) if d.peak_bytes_seen is not None
                else HOST_NOT_MEASURED if d.backend == "host" else "not measured")
        device_rows.append(
            f"<tr><td><code>{_e(d.device)}</code></td><td>{_e(d.backend or '-')}</td><td class=n>{d.ops}</td>"
            f"<td class=n>{_e(seconds(busy[d.device]))}</td><td class=n>{_e(_bytes(d.planned_peak_bytes))}</td>"
            f"<td class=n>{_e(seen)}</td>"
            f"<td class=n>{_e(format_bytes(d.limit_bytes) if d.limit_bytes is not None else 'no limit')}</td></tr>")
    op_rows = []
    for o in view.ops:
        moved = "" if o.device == o.planned_device else f" (planned {_e(o.planned_device)})"
        op_rows.append(
            f"<tr><td><code>{_e(o.name)}</code></td><td>{_e(o.kind)}</td><td><code>{_e(short_device(o.device))}"
            f"</code>{moved}</td><td class=n>{_e(o.runs if o.runs is not None else '-')}</td>"
            f"<td class=n>{_e('+' + seconds(o.start - origin) if o.start is not None else '-')}</td>"
            f"<td class=n>{_e(seconds(o.duration) if o.duration is not None else '-')}</td>"
            f"<td class=n>{_e(_bytes(o.output_bytes) if o.output_bytes is not None else '-')}</td>"
            f"<td>{_e(o.note or o.why)}</td></tr>")
    return ("<section><h2>Devices</h2><table class=grid><tr><th>device</th><th>backend</th><th>ops</th>"
            "<th>busy (op time summed)</th><th>planned peak</th><th>peak seen</th><th>limit</th></tr>\n"
            + "\n".join(device_rows) + "</table>"
            "<h2>Ops</h2><table class=grid><tr><th>op</th><th>kind</th><th>device</th><th>runs</th>"
            "<th>(first) start</th><th>duration (summed over runs)</th><th>output</th><th>why here</th></tr>\n"
            + "\n".join(op_rows) + "</table></section>")


_STYLE = """
<style>
  body { font: 14px/1.45 -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; color: #222;
         margin: 0 auto; padding: 16px 24px; max-width: %(width)dpx; height: auto; }
  h1 { font-size: 22px; margin: 0 0 2px; } h2 { font-size: 16px; margin: 22px 0 6px; }
  .source { color: #666; margin: 0 0 8px; font-size: 12px; }
  table.facts th { text-align: left; padding: 1px 14px 1px 0; color: #555; font-weight: 600;
                   vertical-align: top; white-space: nowrap; }
  table.facts td { padding: 1px 0; }
  ul.notes { color: #444; font-size: 12.5px; margin: 10px 0 14px; padding-left: 18px; }
  table.grid { border-collapse: collapse; font-size: 12.5px; }
  table.grid th, table.grid td { border-bottom: 1px solid #e3e3e3; padding: 3px 10px 3px 0; text-align: left; }
  table.grid td.n { text-align: right; font-variant-numeric: tabular-nums; }
  code { font-size: 12px; }
</style>
""" % {"width": PAGE_WIDTH + 40}

# bokeh's page template (bokeh prepends "{% extends base %}"): our CSS in the head after bokeh's (which sets
# the body's margins to 0 and its height to 100%), the header above
# the pictures and the tables below them.
_TEMPLATE = """
{% block postamble %}""" + _STYLE + """{% endblock %}
{% block contents %}
{{ header_html | safe }}
{{ super() }}
{{ tables_html | safe }}
{% endblock %}
"""


def run_report_html(data: Mapping[str, Any], source: str = "the run report") -> str:
    """The page of a run report's JSON: header, timeline, memory and tables, all resources inline."""
    view = parse_run_report(data, source)
    from bokeh.embed import file_html
    from bokeh.layouts import column
    from bokeh.models.widgets import Div
    from bokeh.resources import INLINE

    roots: list[Model] = []
    if view.ops or view.transfers:
        roots.append(_timeline(view))
    if view.devices:
        roots.append(_memory(view))
    if not roots:
        roots.append(Div(text="<p>The report records no ops and no devices: nothing to draw.</p>"))
    layout = column(*roots, spacing=18)
    return file_html(layout, INLINE, title=f"run of {view.name}", template=_TEMPLATE,
                     template_variables={"header_html": _header(view, source), "tables_html": _tables(view)})


def render_run_report_file(path: str | os.PathLike[str]) -> str:
    """Read a run report file and return its HTML page."""
    return run_report_html(read_run_report(path), os.fspath(path))
