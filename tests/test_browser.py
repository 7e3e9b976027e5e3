"""Our pages in a real browser: headless Chromium loads them, waits for Bokeh to draw, and reads what it drew.

tests/test_report_html.py reads the Bokeh documents a page embeds as JSON; these tests
load the page in Chromium (tests/browser.py, over the DevTools protocol) and ask the
live Bokeh documents instead, once every view has finished drawing: a page whose
script fails, whose documents do not build, or whose figure is laid out but painted
empty fails here and not there. Every wait watches for content and has a generous
deadline; none sleeps for a fixed time.

- the run report (``orchestrate report --html``) of examples/train.yaml: every device, the
  loop, every op that ran, each figure drawn with ink in its frame;
- the report of a halving sweep over a training loop: every copy's row, its metric curve,
  the rule's decisions;
- Dask's own dashboard (/status) of a live ``run --keep-alive``, opened while the run waits
  at a gate op, then showing the run's task names in its task stream.

Where Chromium is missing (and ``.ci/run`` could not install it) they are skipped with a note.
"""

from __future__ import annotations

import io
import json
import re
import sys
from pathlib import Path
from typing import Iterator

import pytest

from browser import NO_CHROMIUM, BrowserError, Chromium, Drawn, GatedRun, Page, bokeh_drawn, find_chromium
from orchestrator import run_file
from orchestrator.api import plan_file
from orchestrator.cli import run_cli
from orchestrator.report.html import short_device
from test_halving import LRS, spec_text

pytestmark = pytest.mark.browser
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def chromium() -> Iterator[Chromium]:
    """One headless Chromium for the module's tests, each in a tab of its own."""
    if find_chromium() is None:
        pytest.skip(NO_CHROMIUM)
    with Chromium() as browser:
        yield browser


def _quiet(_: str) -> None:
    pass


def _page(report: Path) -> Path:
    page = report.with_suffix(".html")
    out = io.StringIO()
    assert run_cli(["report", str(report), "--html", str(page)], out=out) == 0, out.getvalue()
    return page


def _every_figure_has_ink(drawn: Drawn) -> None:
    for plot in drawn.plots:
        assert plot.width > 0 and plot.height > 0, plot.title
        assert plot.ink > 0, f"the figure {plot.title!r} was laid out but nothing was painted in its frame"


def test_the_probe_waits_for_bokeh_and_tells_an_empty_figure_from_a_drawn_one(chromium: Chromium,
                                                                              tmp_path: Path) -> None:
    from bokeh.embed import file_html
    from bokeh.layouts import column
    from bokeh.plotting import figure
    from bokeh.resources import INLINE

    empty = figure(title="empty", width=300, height=200)
    empty.line([], [])
    drawn_one = figure(title="drawn", width=300, height=200)
    drawn_one.line([0, 1, 2], [0, 2, 1], line_width=3)
    page = tmp_path / "two.html"
    page.write_text(file_html(column(empty, drawn_one), INLINE, title="two"), encoding="utf-8")
    drawn = bokeh_drawn(chromium.open(page))
    assert drawn.plot("empty").ink == 0 and drawn.plot("drawn").ink > 50

    # a page without Bokeh never draws: the wait fails on its deadline, saying what it waited for
    (tmp_path / "plain.html").write_text("<p>no bokeh here</p>", encoding="utf-8")
    with pytest.raises(BrowserError, match="waited 3 s for Bokeh to draw"):
        bokeh_drawn(chromium.open(tmp_path / "plain.html"), timeout=3)


@pytest.mark.cluster
def test_the_report_of_the_training_example_draws_every_device_loop_and_op(chromium: Chromium,
                                                                            tmp_path: Path) -> None:
    report_path = tmp_path / "run.json"
    sys.path.insert(0, str(ROOT / "examples"))  # train_fns, beside the spec
    try:
        run_file(ROOT / "examples" / "train.yaml", output_dir=str(tmp_path), report_path=str(report_path),
                 echo=_quiet)
    finally:
        sys.path.remove(str(ROOT / "examples"))
    report = json.loads(report_path.read_text())
    page = chromium.open(_page(report_path), 1400, 1000)
    drawn = bokeh_drawn(page)

    assert page.errors() == []
    assert drawn.documents == 1
    timeline, memory = drawn.plot("Timeline"), drawn.plot("Memory per device")
    assert len(report["devices"]) == 5
    for device in report["devices"]:
        assert short_device(device["device"]) in timeline.strings  # its row of the timeline
        assert short_device(device["device"]) in memory.strings  # its group of the memory figure
        assert device["device"] in drawn.text  # the devices table
    assert list(report["loops"]) == ["fit"]
    for loop in report["loops"]:
        assert f"Loop {loop}:" in " ".join(p.title for p in drawn.plots)  # its step pictures
        assert re.search(rf"\b{loop} : gang", drawn.text)  # the header's line of how it ran
    loop_ops = {op.name for op in plan_file(ROOT / "examples" / "train.yaml").spec.ops if op.scope.loop}
    ran = [op["name"] for op in report["ops"] if op["start"] is not None and op["name"] not in loop_ops]
    assert ran
    for name in ran:
        assert name in timeline.strings  # a labelled bar
    windows = report["loops"]["fit"]["windows"]
    assert len(windows) == 3  # the loop's devices: a bar per window on each, steps a-b, across the run
    for device, spans in windows.items():
        assert short_device(device) in timeline.strings
        for _, _, first, last in spans:
            assert f"{first}–{last}" in timeline.strings, (device, first, last)
    _every_figure_has_ink(drawn)


@pytest.mark.cluster
def test_the_report_of_a_halving_sweep_draws_each_copy_and_its_metric_curve(chromium: Chromium,
                                                                           tmp_path: Path) -> None:
    spec = tmp_path / "halving.yaml"
    spec.write_text(spec_text(), encoding="utf-8")
    report_path = tmp_path / "run.json"
    run_file(spec, output_dir=str(tmp_path), report_path=str(report_path), echo=_quiet)
    report = json.loads(report_path.read_text())
    page = chromium.open(_page(report_path), 1400, 1000)
    drawn = bokeh_drawn(page)

    assert page.errors() == []
    copies = report["sweeps"]["hp"]["copies"]
    assert len(copies) == len(LRS)
    rows = drawn.plot("Sweep hp: each copy from its start to its stop")
    curves = drawn.plot("Sweep hp: loss per copy")
    for copy in copies:
        assert f"{short_device(copy['device'])} · copy {copy['index']}" in rows.strings  # its row
        assert f"curve:hp:loss:copy {copy['index']}" in curves.strings  # its line
        assert any(s.startswith(f"{copy['index']}: lr=") for s in curves.strings)  # its legend entry
    assert "train.loss" in drawn.text and "rung by rung" in drawn.text  # the decisions' table
    for rung in report["sweeps"]["hp"]["rungs"]:
        assert f"step {rung['step']}" in drawn.text
    for device in report["devices"]:
        assert short_device(device["device"]) in drawn.plot("Timeline").strings
    _every_figure_has_ink(drawn)


@pytest.mark.cluster
def test_dasks_status_page_of_a_live_run_shows_our_task_names(chromium: Chromium, tmp_path: Path) -> None:
    with GatedRun(tmp_path, args=["--task-names", "op"]) as run:
        page = chromium.open(run.dashboard, 1400, 1000)
        bokeh_drawn(page, lambda d: any(p.title == "Task Stream" for p in d.plots), "the task stream")
        run.release()  # the page is watching: let the run go on
        # the ops after the gate, a partition of their own each, and the loop's windows: a task per device
        names = ["gate", "b", "c", "d", "loop·GPU:0", "loop·GPU:1"]

        def streamed(drawn: Drawn) -> bool:
            return set(names) <= drawn.plot("Task Stream").strings

        drawn = bokeh_drawn(page, streamed, f"the task stream to show {names}")
        assert drawn.plot("Task Stream").ink > 0  # and its bars are painted
        # (its Progress bars are gone by now: Dask clears a group's bar once its tasks are done)
    assert run.stop() == 0, run.said
    assert (tmp_path / "w.npy").is_file()  # the run went through its gate to the end


ENDED = ("done", "stopped", "failed")


def _states(page: Page, selector: str, attribute: str) -> dict[str, str]:
    return dict(page.evaluate(f"[...document.querySelectorAll('{selector}')]"
                              f".map(e => [e.getAttribute('{attribute}'), e.dataset.state])"))


@pytest.mark.cluster
def test_the_run_page_draws_every_device_loop_metric_and_copy_during_the_run(chromium: Chromium,
                                                                              tmp_path: Path) -> None:
    """Our own page (/orchestrator/) of a live run, loaded while the run waits at its gate: every device's row
    at once; once the gate opens, the loop's step, its metric and evaluation curves, each copy of the sweep
    and its end (one diverges and fails), drawn by the page's script in a real browser."""
    from test_dashboard_page import FNS, SPEC

    (tmp_path / "page_fns.py").write_text(FNS, encoding="utf-8")
    gated = SPEC.replace("      - {name: w0, op: zeros, shape: [3]}\n",
                         "      - {name: w00, op: zeros, shape: [3]}\n"
                         "      - {name: w0, op: call, fn: 'gate_fns:wait', inputs: [w00], output: {shape: [3]}}\n")
    assert gated != SPEC
    with GatedRun(tmp_path, spec=gated) as run:
        page = chromium.open(run.url("/orchestrator/"), 1400, 1000)
        page.wait_for("document.querySelectorAll('[data-device]').length === 3", "a row per device")
        devices = page.evaluate("[...document.querySelectorAll('[data-device]')].map(e => e.dataset.device)")
        assert sorted(devices) == [f"/job:localhost/replica:0/task:0/device:{d}" for d in ("CPU:0", "GPU:0", "GPU:1")]
        assert _states(page, "[data-loop]", "data-loop")["fit"] in ("waiting", "running")  # held at the gate
        run.release()
        page.wait_for("(() => { const f = document.querySelector('[data-loop=\"fit\"]');"
                      " return !!f && ['done', 'stopped'].includes(f.dataset.state); })()", "the loop 'fit' to end")
        page.wait_for("[...document.querySelectorAll('[data-copy]')].length === 4 && [...document.querySelectorAll("
                      "'[data-copy]')].every(r => ['done', 'stopped', 'failed'].includes(r.dataset.state))",
                      "every copy of the sweep to end")
        curves = dict(page.evaluate("[...document.querySelectorAll('[data-loop=\"fit\"] [data-metric]')]"
                                    ".map(s => [s.dataset.metric, +s.dataset.points])"))
        assert curves.keys() == {"loss", "val"} and curves["loss"] >= 10 and curves["val"] >= 2, curves
        drawn = page.evaluate("[...document.querySelectorAll('[data-loop=\"fit\"] [data-metric] polyline, "
                              "[data-loop=\"fit\"] [data-metric] path')].length")
        assert drawn >= 2, "the metric charts hold no line"
        copies = _states(page, "[data-copy]", "data-copy")
        assert set(copies) == {"0", "1", "2", "3"} and copies["3"] == "failed", copies  # lr 0.2 diverges
        assert set(copies.values()) <= set(ENDED)
        assert page.errors() == []
    assert run.stop() == 0, run.said
