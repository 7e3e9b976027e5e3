"""The page's pictures, drawn with bokeh: the timeline of ops, loop windows and transfers per device, the loops'
metric curves, memory per device, step pictures and sweeps. The only module that imports bokeh, inside the
functions that draw (importing the package never loads it); :func:`page_html` inlines all bokeh needs, so the
file opens offline. Renderers a browser test finds are named: ``windows:LOOP``, ``curve:LOOP:METRIC``,
``curve:SWEEP:METRIC:copy N``, ``copies:SWEEP``, ``median-step:LOOP``, ``critical-path:LOOP``.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from ...errors import format_bytes
from .lanes import FRAME_WIDTH, Row, device_rows, drawn_ops, extent, time_zero, window_columns
from .loops import Chart, loop_charts, loop_colours
from .steps import STEP_CSS, STEP_ROW_PX, STEP_TEXT_WIDTH, Marks, StepBars, path_bars, split_bars, step_words
from .search import copy_bars, copy_charts
from .view import DeviceView, OpView, RunView, TransferView
from .words import (KIND_COLOURS, LIMIT_COLOUR, PLANNED_COLOUR, SEEN_COLOUR, TRANSFER_COLOUR, op_timing, peak_label,
                    round_bytes, seconds, short_device, size_or_unknown)

if TYPE_CHECKING:
    from bokeh.core.property.vectorization import Field
    from bokeh.models import Model
    from bokeh.models.annotations import LegendItem
    from bokeh.plotting import figure as Figure

LANE_PX = 26  # one lane of a device row: a bar and its label
MAX_LABELS = 200  # more ops than this: no labels on the bars (they would be a blur); hover names them

# A label's white backing, so that it reads over hatching and arrows. (bokeh's annotations of
# ``figure.text`` lack these keywords, though its Text glyph has them.)
_LABEL_BACKGROUND: dict[str, Any] = {"background_fill_color": "#ffffff", "background_fill_alpha": 0.75, "padding": 1}
# An Arrow's body is its line properties, unprefixed (bokeh's stub calls them ``body_line_*``).
_NO_BODY: dict[str, Any] = {"line_alpha": 0.0}


def page_html(view: RunView, template: str, variables: Mapping[str, str]) -> str:
    """The page: bokeh's ``template`` filled with ``variables`` and the figures (or a note that there are none)."""
    from bokeh.embed import file_html
    from bokeh.layouts import column
    from bokeh.models.widgets import Div
    from bokeh.resources import INLINE

    roots: list[Model] = []
    if view.ops or view.transfers:
        roots.append(_timeline(view))
    roots += [_charts(charts) for charts in (loop_charts(loop) for loop in view.loop_curves) if charts]
    if view.devices:
        roots.append(_memory(view))
    roots += _loop_steps(view)
    roots += _searches(view)
    if not roots:
        roots.append(Div(text="<p>The report records no ops and no devices: nothing to draw.</p>"))
    layout = column(*roots, spacing=18)
    return file_html(layout, INLINE, title=f"run of {view.name}", template=template,
                     template_variables=dict(variables))


# --------------------------------------------------------------------------- timeline


def _timeline(view: RunView) -> Figure:
    from bokeh.models.annotations import Legend

    origin = time_zero(view)
    end = extent(view, origin)
    start = -end * 0.01
    rows, lane_of, height, loop_y = device_rows(view, origin, (end - start) / FRAME_WIDTH)
    timed = drawn_ops(view)
    colours = _kind_colours(view)
    fig = _timeline_figure(rows, height, start, end)
    _op_bars(fig, timed, [rows[o.device].lane_y(lane_of[o.name]) for o in timed], origin, colours)
    items = _window_bars(fig, view, loop_y, origin) + _kind_legend(fig, timed, colours)
    if view.transfers:
        items.append(_transfers(fig, view, rows, origin))
    if items:
        # top_left of the side panel: bokeh measures the legend before its font is in, and one placed
        # top_right grew leftwards over the plot
        fig.add_layout(Legend(items=items, title="hover: details", label_text_font_size="10px", spacing=0,
                              location="top_left", title_text_font_size="10px"), "right")
    return fig


def _kind_colours(view: RunView) -> dict[str, str]:
    kinds = sorted({o.kind for o in drawn_ops(view)})
    return {kind: KIND_COLOURS[i % len(KIND_COLOURS)] for i, kind in enumerate(kinds)}


def _window_bars(fig: Figure, view: RunView, loop_y: Mapping[tuple[str, str], float],
                 origin: float) -> list[LegendItem]:
    """Each loop's windows, a bar each on the loop's lane of every device it ran on (``windows:LOOP``)."""
    from bokeh.models import ColumnDataSource, HoverTool

    items = []
    for loop, colour in loop_colours(view.windows).items():
        source = ColumnDataSource(data=window_columns([w for w in view.windows if w.loop == loop], loop_y, origin))
        bars = fig.hbar(y="y", left="left", right="right", height=0.7, source=source, fill_color=colour,
                        fill_alpha=0.75, line_color="#ffffff", line_width=1, name=f"windows:{loop}")
        ticks = fig.rect(x="left", y="y", width=3, width_units="screen", height=0.7, source=source, fill_color=colour,
                         line_color="#333333", line_width=0.5)  # a window of 1 ms on a 1 s axis is a pixel wide
        fig.add_tools(HoverTool(renderers=[bars, ticks], tooltips=[("loop", "@loop"), ("steps", "@steps"),
                                                            ("device", "@device"), ("ran", "@when")]))
        items.append(_legend_item(f"{loop}: its windows", bars))
    return items


def _timeline_figure(rows: Mapping[str, Row], height: float, start: float, end: float) -> Figure:
    """The timeline's empty figure: time across, a band of lanes per device down (top to bottom)."""
    from bokeh.models import FixedTicker, Range1d
    from bokeh.models.annotations import BoxAnnotation
    from bokeh.plotting import figure

    fig = figure(frame_width=FRAME_WIDTH, frame_height=int(height * LANE_PX), x_range=Range1d(start=start, end=end),
                 y_range=Range1d(start=height, end=0), tools="xpan,xwheel_zoom,box_zoom,reset,save",
                 active_scroll="xwheel_zoom", toolbar_location="above",
                 title="Timeline: a row per device: its loops' windows, its ops, and values Dask moved (arrows)",
                 x_axis_label="seconds since the first op, window or transfer started (workers' clocks)")
    fig.yaxis.ticker = FixedTicker(ticks=[row.centre for row in rows.values()])
    fig.yaxis.major_label_overrides = {row.centre: short_device(row.device) for row in rows.values()}
    fig.yaxis.major_label_text_font_size = "11px"
    fig.ygrid.visible = False
    for i, row in enumerate(rows.values()):
        if i % 2 == 0:  # banded rows: which lanes belong to which device
            fig.add_layout(BoxAnnotation(top=row.top - 0.3, bottom=row.top + row.lanes + 0.3,
                                         fill_color="#000000", fill_alpha=0.04, line_alpha=0))
    return fig


def _op_bars(fig: Figure, timed: Sequence[OpView], ys: Sequence[float], origin: float,
             colours: Mapping[str, str]) -> None:
    """A bar per timed op at height ``ys[i]``, a tick at its start, its name (when not too many), its hover."""
    from bokeh.models import ColumnDataSource, HoverTool

    ops = ColumnDataSource(data={
        "name": [o.name for o in timed],
        "kind": [o.kind for o in timed],
        "device": [o.device for o in timed],
        "y": list(ys),
        "left": [(o.start or 0.0) - origin for o in timed],
        "right": [(o.start or 0.0) - origin + (o.duration or 0.0) for o in timed],
        "colour": [colours[o.kind] for o in timed],
        "hatch": ["/" if o.looped else " " for o in timed],
        "alpha": [0.55 if o.looped else 0.9 for o in timed],
        "timing": [op_timing(o, origin) for o in timed],
        "bytes": [size_or_unknown(o.output_bytes) for o in timed],
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


def _kind_legend(fig: Figure, timed: Sequence[OpView], colours: Mapping[str, str]) -> list[LegendItem]:
    """The legend's entries of op kinds (and of hatching: loop ops no window draws, their runs summed)."""
    # legend swatches: a renderer of one undrawable (NaN) bar per entry, so each shows its plain colour
    entries = [(kind, colour, " ") for kind, colour in colours.items()]
    if any(o.looped for o in timed):
        entries.append(("hatched: a loop op's runs, summed", "#dddddd", "/"))
    nan = float("nan")
    hatches: list[Any] = [h for _, _, h in entries]  # bokeh types these as its pattern names, not their letters
    swatches = fig.hbar(y=[nan] * len(entries), left=[nan] * len(entries), right=[nan] * len(entries), height=0.7,
                        fill_color=[c for _, c, _ in entries], line_color="#777777", line_alpha=0.5,
                        hatch_pattern=hatches, hatch_color="#555555", hatch_alpha=0.6,
                        hatch_scale=8)
    return [_legend_item(label, swatches, i) for i, (label, _, _) in enumerate(entries)]


def _transfers(fig: Figure, view: RunView, rows: Mapping[str, Row], origin: float) -> LegendItem:
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


def _legend_item(label: str | Field, renderer: Any, index: int | None = None) -> LegendItem:
    """A legend entry drawn like ``renderer`` at row ``index`` of its data, or one per value of a ``field`` of
    its data. (``Any``: bokeh's stubs want a ``GlyphRenderer[Glyph]``, which to mypy a ``GlyphRenderer[HBar]``
    is not.)"""
    from bokeh.models.annotations import LegendItem

    return LegendItem(label=label, renderers=[renderer], index=index)


# --------------------------------------------------------------------------- memory


def _memory(view: RunView) -> Figure:
    """Per device: planned peak and the peak its backend saw, side by side on a log axis, the limit a red mark."""
    from bokeh.models.annotations import Legend

    devices = list(view.devices)
    values = [v for d in devices for v in (d.planned_peak_bytes, d.peak_bytes_seen, d.limit_bytes) if v]
    high = max([*values, 1024])
    floor = 0.5  # bars start here: a log axis has no zero
    fig = _memory_figure(devices, high, floor)
    bars = _peak_bars(fig, devices, floor)
    items = [_legend_item("planned peak (orchestrate plan)", bars, 0)]
    if devices:
        items.append(_legend_item("peak seen by the device's backend", bars, len(devices)))
    items += _limit_marks(fig, devices, high)
    fig.add_layout(Legend(items=items, label_text_font_size="10px", spacing=0, location="top_left"), "right")
    return fig


def _memory_figure(devices: Sequence[DeviceView], high: int, floor: float) -> Figure:
    """The memory figure's empty figure: bytes across on a log axis, two bars' places per device down."""
    from bokeh.models import CategoricalAxis, FactorRange, FixedTicker, Range1d
    from bokeh.plotting import figure

    # a categorical y axis runs bottom to top: reversed, the first device and its planned peak are on top
    factors = [(short_device(d.device), what) for d in reversed(devices) for what in ("peak seen", "planned peak")]
    fig = figure(frame_width=FRAME_WIDTH, frame_height=44 * len(devices), y_range=FactorRange(factors=factors),
                 x_axis_type="log", x_range=Range1d(start=floor, end=high * 40), tools="save",
                 toolbar_location=None, title="Memory per device: planned peak beside the peak seen, against the limit",
                 x_axis_label="bytes (log scale)")
    ticks = [2 ** (5 * k) for k in range(0, int(math.log2(high * 40) // 5) + 1)]
    fig.xaxis.ticker = FixedTicker(ticks=ticks)
    fig.xaxis.major_label_overrides = {t: round_bytes(t) for t in ticks}
    axis = fig.yaxis[0]
    assert isinstance(axis, CategoricalAxis)
    axis.group_label_orientation = "horizontal"
    axis.major_label_text_font_size = "10px"
    axis.group_text_font_size = "11px"
    fig.ygrid.visible = False
    return fig


def _peak_bars(fig: Figure, devices: Sequence[DeviceView], floor: float) -> Any:
    """Each device's planned peak and peak seen as bars, labelled, with a hover; the bars' renderer."""
    from bokeh.models import ColumnDataSource, HoverTool

    rows = [(d, "planned peak", d.planned_peak_bytes, PLANNED_COLOUR, "planned") for d in devices]
    rows += [(d, "peak seen", d.peak_bytes_seen, SEEN_COLOUR, "seen") for d in devices]
    source = ColumnDataSource(data={
        "y": [(short_device(d.device), what) for d, what, _, _, _ in rows],
        "right": [max(value or 0, floor) for _, _, value, _, _ in rows],
        "colour": [colour for _, _, _, colour, _ in rows],
        "label": [peak_label(d, word, value) for d, _, value, _, word in rows],
        "device": [d.device for d, _, _, _, _ in rows],
        "limit": [size_or_unknown(d.limit_bytes) if d.limit_bytes is not None else "no limit"
                  for d, _, _, _, _ in rows],
        "backend": [d.backend or "-" for d, _, _, _, _ in rows],
    })
    bars = fig.hbar(y="y", left=floor, right="right", height=0.7, source=source, fill_color="colour",
                    line_color="colour")
    fig.text(x="right", y="y", text="label", source=source, x_offset=6, text_baseline="middle",
             text_font_size="10px", text_color="#222222")
    fig.add_tools(HoverTool(renderers=[bars], tooltips=[("device", "@device"), ("peak", "@label"),
                                                        ("limit", "@limit"), ("backend", "@backend")]))
    return bars


def _limit_marks(fig: Figure, devices: Sequence[DeviceView], high: int) -> list[LegendItem]:
    """A red mark at each device's limit, or the words "no limit"; the legend entry of the marks, if any."""
    limited = [(short_device(d.device), float(d.limit_bytes)) for d in devices if d.limit_bytes is not None]
    unlimited = [d for d in devices if d.limit_bytes is None]
    if unlimited:
        fig.text(x=[high * 8 for _ in unlimited], y=[short_device(d.device) for d in unlimited],
                 text=["no limit" for _ in unlimited], text_baseline="middle", text_font_size="10px",
                 text_color=LIMIT_COLOUR)
    marks = Marks({"x": [b for _, b in limited], "row": [name for name, _ in limited],
                   "text_x": [b for _, b in limited], "text": [f"limit {format_bytes(b)}" for _, b in limited]},
                  "memory limit", "the device's memory limit", LIMIT_COLOUR)
    return [_marks(fig, marks)] if limited else []


# --------------------------------------------------------------------------- loop steps


def _loop_steps(view: RunView) -> list[Model]:
    """Per loop with a step picture: its words, one step's critical path, each device's median step."""
    from bokeh.models import InlineStyleSheet
    from bokeh.models.widgets import Div

    roots: list[Model] = []
    for loop in view.loop_steps:
        if loop.segments or loop.devices:
            # a Div's text lives in its own shadow DOM: the page's CSS does not reach it
            roots.append(Div(text=step_words(loop, view), width=STEP_TEXT_WIDTH,
                             stylesheets=[InlineStyleSheet(css=STEP_CSS)]))
            roots += [_step_bars(bars) for bars in (path_bars(loop, view), split_bars(loop, view)) if bars.rows]
    return roots


def _step_bars(bars: StepBars) -> Figure:
    """Bars on device rows (a step's path, or its split), labelled where a label fits, coloured and hovered."""
    from bokeh.core.properties import field
    from bokeh.models import ColumnDataSource, FactorRange, HoverTool, Range1d
    from bokeh.models.annotations import Legend
    from bokeh.plotting import figure

    entries = len(set(bars.columns["legend"])) + len(bars.marks)  # the legend fits beside the rows
    fig = figure(frame_width=FRAME_WIDTH, frame_height=max(STEP_ROW_PX * len(bars.rows) + 10, 20 * entries + 24),
                 y_range=FactorRange(factors=list(reversed(bars.rows))), x_range=Range1d(start=0, end=bars.end),
                 tools="xpan,xwheel_zoom,reset,save", active_scroll="xwheel_zoom", toolbar_location="above",
                 title=bars.title, x_axis_label=bars.axis)
    fig.yaxis.major_label_text_font_size = "11px"
    fig.ygrid.visible = False
    source = ColumnDataSource(data=bars.columns)
    drawn = fig.hbar(y="row", left="left", right="right", height=0.6, source=source, fill_color="colour",
                     line_color="#ffffff", line_width=1, name=bars.name or None)
    fig.text(x="left", y="row", text="label", source=source, x_offset=4, text_baseline="middle",
             text_font_size="10px", text_color="#222222")
    marked = [_marks(fig, marks) for marks in bars.marks]
    if bars.handoffs.get("x"):  # where the path goes on at another device: a dashed line between their rows
        fig.segment(x0=bars.handoffs["x"], x1=bars.handoffs["x"], y0=bars.handoffs["from_row"],
                    y1=bars.handoffs["to_row"], line_color="#555555", line_dash="dashed", line_width=1)
    fig.add_tools(HoverTool(renderers=[drawn], tooltips=list(bars.tooltips)))
    # one entry per kind, from the bars' own "legend" column (bokeh groups it in the browser)
    fig.add_layout(Legend(items=[_legend_item(field("legend"), drawn), *marked], location="top_left",
                          title="hover: what each is", label_text_font_size="10px", spacing=0), "right")
    return fig


def _marks(fig: Figure, marks: Marks) -> LegendItem:
    """Ticks with their words, hovered with what they measure; their legend entry."""
    from bokeh.models import ColumnDataSource, HoverTool

    source = ColumnDataSource(data={"value": marks.columns["text"], **marks.columns,
                                    "why": [marks.why] * len(marks.columns["x"])})
    ticks = fig.scatter(x="x", y="row", source=source, marker="dash", angle=math.pi / 2, size=26,
                        line_color=marks.colour, line_width=2, name=marks.name or None)
    fig.text(x="text_x", y="row", text="text", source=source, x_offset=8, text_baseline="middle",
             text_font_size="10px", text_color=marks.colour)
    fig.add_tools(HoverTool(renderers=[ticks], tooltips=[(marks.legend, "@value"), ("is", "@why")]))
    return _legend_item(marks.legend, ticks)


# --------------------------------------------------------------------------- searches


def _searches(view: RunView) -> list[Model]:
    """Per sweep: its copies by device and wave (a bar each, from its start to its stop) and its copies' curves
    of each metric (a line per copy); its rule's decisions are a table below the pictures."""
    roots: list[Model] = []
    for sweep in view.sweeps:
        bars = copy_bars(sweep, time_zero(view))
        if bars.rows:
            roots.append(_step_bars(bars))
        charts = [chart for chart in copy_charts(sweep) if chart.lines]
        if charts:
            roots.append(_charts(charts))
    return roots


def _charts(charts: Sequence[Chart]) -> Model:
    """Charts of lines over steps, two a row: a line each (named, in the legend; a click there hides it)."""
    from bokeh.layouts import gridplot
    from bokeh.models import HoverTool
    from bokeh.plotting import figure

    figures: list[Any] = []  # (bokeh types gridplot's children as a list of Any)
    for chart in charts:
        fig = figure(frame_width=FRAME_WIDTH // 2 - 40, frame_height=200, title=chart.title, x_axis_label="step",
                     y_axis_label=chart.y_label, tools="pan,wheel_zoom,box_zoom,reset,save", name=chart.name)
        for line in chart.lines:
            drawn = fig.line(x=list(line.xs), y=list(line.ys), line_color=line.colour, line_width=1.6,
                             line_dash=line.dash, legend_label=line.label, name=line.name)
            fig.add_tools(HoverTool(renderers=[drawn], tooltips=[(line.label, "step $x{0}: $y")]))
        fig.legend.label_text_font_size = "10px"
        fig.legend.click_policy = "hide"
        fig.legend.spacing = 0
        figures.append(fig)
    return gridplot(figures, ncols=2, toolbar_location="right")
