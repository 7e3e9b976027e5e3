"""A gang loop's step picture, from a real run: `orchestrate run` prints its line, `orchestrate report` draws it.

examples/polyfit.yaml (a ps task and two simulated GPUs, 300 steps in windows of 100), each device in
a worker process of its own (``processes: device``: its values go over the links),
runs once through the CLI on an embedded Dask cluster; its printed summary and its
run report are checked against each other, and the report's page is read back
from the bokeh document inside it (see test_report_html).
"""

from __future__ import annotations

import html
import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
from spec_helpers import polyfit_in
from test_report_html import drawn

from orchestrator.cli import run_cli
from orchestrator.report.html import micro, short_device

KINDS = {"op", "wait", "send", "transit", "overhead"}


@pytest.fixture(scope="module")
def polyfit_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """What `orchestrate run` printed for a short polyfit, and its run report file."""
    where = polyfit_in(tmp_path_factory.mktemp("polyfit"), "device").parent  # a process per device: over links
    out = io.StringIO()
    code = run_cli(["run", str(where / "polyfit.yaml"), "--set", "steps=300", "--set", "window=100",
                    "--no-progress", "--output-dir", str(where), "--report", str(where / "run.json")], out=out)
    assert code == 0, out.getvalue()
    return out.getvalue(), where / "run.json"


def _picture(report_file: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    report = json.loads(report_file.read_text())
    assert report["transport"] == "links"
    return report, report["loop_steps"]["train"]


@pytest.mark.cluster
def test_the_run_prints_a_line_of_the_loop_step_whose_figures_are_the_reports(polyfit_run: tuple[str, Path]) -> None:
    printed, report_file = polyfit_run
    report, picture = _picture(report_file)
    lines = [line for line in printed.splitlines() if line.startswith("  train: a step ")]
    assert len(lines) == 1, printed
    line = lines[0]
    # it follows the summary's totals line
    assert printed.splitlines()[printed.splitlines().index(line) - 1].endswith("placement verified against the plan")
    found = re.fullmatch(r"  train: a step (\d+\.\d\d) ms on the critical path \((.*); (\d+) steps sampled; "
                         r"values over direct links\)", line)
    assert found, line
    path = picture["critical_path"]
    assert float(found.group(1)) == pytest.approx(path["seconds"] * 1e3, abs=0.005)
    assert int(found.group(3)) == len(picture["sampled_steps"]) == 3
    sums: dict[str, float] = {}
    for seg in path["segments"]:
        sums[seg["kind"]] = sums.get(seg["kind"], 0.0) + seg["seconds"]
    words = {"compute": "op", "transit": "transit", "wait": "wait", "send": "send", "overhead": "overhead"}
    named = {}
    for part in found.group(2).split(", "):
        each = re.fullmatch(r"(\w+) (<0\.01|\d+\.\d\d) ms", part)
        assert each, part
        named[words[each.group(1)]] = each.group(2)
    assert set(named) == set(sums)  # every kind on the path, and only those
    for kind, value in named.items():
        if value == "<0.01":
            assert 0 < sums[kind] < 5e-6
        else:
            assert float(value) == pytest.approx(sums[kind] * 1e3, abs=0.005), kind
    assert list(named) == [k for k in ("op", "transit", "wait", "send", "overhead") if k in sums]


@pytest.mark.cluster
def test_the_page_draws_the_critical_path_and_each_devices_step(polyfit_run: tuple[str, Path], tmp_path: Path) -> None:
    _, report_file = polyfit_run
    report, picture = _picture(report_file)
    out = io.StringIO()
    assert run_cli(["report", str(report_file), "--html", str(tmp_path / "run.html")], out=out) == 0
    page = (tmp_path / "run.html").read_text(encoding="utf-8")
    strings = drawn(page)
    # still one offline page
    assert not re.search(r"<(script|link|img)\b[^>]*\b(src|href)\s*=\s*[\"']?(https?:)?//", page, re.I)

    path = picture["critical_path"]
    words = next(s for s in strings if "<h2>Loop <code>train</code>: one step</h2>" in s)
    assert "Sampled steps: " + ", ".join(str(s) for s in picture["sampled_steps"]) in words
    assert f"The critical path is step {path['step']}&#x27;s" in words
    assert "over direct links" in words
    assert f"The critical path's {len(path['segments'])} segments, in time order" in words
    for seg in path["segments"]:
        assert seg["kind"] in KINDS
        # its table row: the device and the kind; its bar's hover: the device in full, the kind and name
        assert f"<td><code>{html.escape(short_device(seg['device']))}</code></td><td>{seg['kind']}</td>" in words
        assert seg["device"] in strings
        assert (f"{seg['kind']}: {seg['name']}" if seg["name"] else seg["kind"]) in strings
    assert any(s.startswith(f"Loop train: the critical path of step {path['step']} (") for s in strings)
    assert {"compute", "send", "overhead"} <= strings  # the legends' kinds
    # transit is drawn when the path has some: on a loaded machine a sampled step's path may have none
    assert any(seg["kind"] == "transit" for seg in path["segments"]) <= ("transit" in strings)

    # each device's median step: a bar per op it computed, and the median step marked
    assert any(s.startswith("Loop train: each device's step, median of each part over 3 sampled steps")
               for s in strings)
    for device, split in picture["devices"].items():
        assert short_device(device) in strings
        for op in split["compute"]:
            assert f"compute: {op}" in strings
        assert f"median step {micro(split['step'])}" in strings
    assert {"waiting for values", "sending (serialize + write)"} <= strings
    # the header says how values went
    assert "<th>loop transport</th><td>Values went between device workers over direct links" in page
    assert report["loops"]["train"]["mode"].startswith("gang")


@pytest.mark.cluster
def test_one_thread_running_every_device_is_one_chain_and_each_device_sees_the_others_time(tmp_path: Path) -> None:
    """The example as written (``processes: host``): one thread runs the ten ops of a step, so the critical path
    is all of them, one after another, whoever's they are; each device's step shows the time its thread ran
    the other devices (without it, their ops read as this device's overhead, and the path as the ps's alone)."""
    spec = polyfit_in(tmp_path / "spec")
    report_file = tmp_path / "run.json"
    out = io.StringIO()
    assert run_cli(["run", str(spec), "--set", "steps=300", "--set", "window=100", "--no-progress",
                    "--output-dir", str(tmp_path), "--report", str(report_file)], out=out) == 0, out.getvalue()
    report = json.loads(report_file.read_text())
    assert report["transport"] == "in-process"
    picture = report["loop_steps"]["train"]
    path = picture["critical_path"]
    ops = [(seg["device"], seg["name"]) for seg in path["segments"] if seg["kind"] == "op"]
    body = {entry["name"]: entry["worker"] for entry in report["ops"]
            if entry["name"].startswith("train/") and entry["worker"] is not None}  # (not the states' names)
    assert sorted(ops) == sorted((device, name) for name, device in body.items())  # every op of the step, on its device
    assert len(ops) == 10 and len({device for device, _ in ops}) == 3
    assert ops[-1][1] == "train/step"  # Adam ends the step
    assert path["seconds"] == pytest.approx(sum(seg["seconds"] for seg in path["segments"]))
    for device, split in picture["devices"].items():
        assert 0 < split["other_devices"] < split["step"], device
        assert split["overhead"] < split["other_devices"] + sum(split["compute"].values()), device
    assert run_cli(["report", str(report_file), "--html", str(tmp_path / "run.html")], out=io.StringIO()) == 0
    strings = drawn((tmp_path / "run.html").read_text(encoding="utf-8"))
    assert "other devices" in strings
