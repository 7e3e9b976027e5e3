"""`orchestrate report RUN.json --html OUT.html`: the run report as one offline HTML page.

The main tests draw a real report: a small spec (values crossing three devices, then a
loop of 5 steps) runs once on an embedded Dask cluster, and its report goes through the
CLI. What the page draws is read back from the bokeh document embedded in it (its JSON),
so the tests need no browser; docs/render_report.py screenshots a page in Chromium.
"""

from __future__ import annotations

import ast
import html
import io
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest

from orchestrator import run_file
from orchestrator.cli import run_cli
from orchestrator.errors import format_bytes
from orchestrator.report import loop_step_lines, placement_summary
from orchestrator.report.html import (HOST_NOT_MEASURED, BadRunReport, micro, op_timing, parse_run_report,
                                      run_report_html, seconds, short_device)

ROOT = Path(__file__).resolve().parent.parent

SPEC = """\
version: 1
name: pictured
cluster:
  jobs:
    localhost: {gpus: 2, gpu_memory: {limit: 1MiB}}
graph:
  - {name: a, op: constant, value: [[1.0, 2.0], [3.0, 4.0]], device: /cpu:0}
  - {name: b, op: matmul, inputs: [a, a], device: /gpu:0}
  - {name: c, op: add, inputs: [b, a], device: /gpu:1}
  - name: loop
    iterate:
      steps: 5
      window: 5
      state: {w: c}
      body:
        - {name: h, op: mul, inputs: [w], scalar: 0.5, device: /gpu:1}
        - {name: w_next, op: add, inputs: [w, h], device: /cpu:0}
      update: {w: w_next}
outputs:
  loop.w: w.npy
"""


def _quiet(_: str) -> None:
    pass


@pytest.fixture(scope="module")
def real_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run report of SPEC, from one real run on an embedded cluster (simulated GPUs)."""
    where = tmp_path_factory.mktemp("pictured")
    spec = where / "pictured.yaml"
    spec.write_text(SPEC)
    run_file(spec, output_dir=str(where), report_path=str(where / "run.json"), echo=_quiet)
    return where / "run.json"


def _render(report: Path, target: Path) -> str:
    out = io.StringIO()
    assert run_cli(["report", str(report), "--html", str(target)], out=out) == 0
    assert out.getvalue() == f"wrote {target}\n"
    return target.read_text(encoding="utf-8")


def _strings(node: Any) -> Iterator[str]:
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for value in node.values():
            yield from _strings(value)
    elif isinstance(node, list):
        for value in node:
            yield from _strings(value)


def drawn(page: str) -> set[str]:
    """Every string of the bokeh documents embedded in the page: labels, hover texts, axis labels."""
    blocks = re.findall(r'<script type="application/json"[^>]*>(.*?)</script>', page, re.S)
    assert blocks, "no bokeh document in the page"
    # bokeh makes the JSON HTML-safe (html.escape, quote=False): a Div's markup reads back as it was written
    return {s for block in blocks for s in _strings(json.loads(html.unescape(block)))}


def renderers(page: str) -> list[tuple[str | None, dict[str, Any]]]:
    """Every glyph renderer of the page's bokeh documents: its ``name`` and its data source's columns."""
    objects: dict[str, Any] = {}

    def index(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("type") == "object" and "id" in node and "attributes" in node:
                objects[node["id"]] = node
            for value in node.values():
                index(value)
        elif isinstance(node, list):
            for value in node:
                index(value)

    for block in re.findall(r'<script type="application/json"[^>]*>(.*?)</script>', page, re.S):
        index(json.loads(html.unescape(block)))
    found = []
    for obj in objects.values():
        if obj.get("name") == "GlyphRenderer":
            source = objects.get(obj["attributes"].get("data_source", {}).get("id"), {})
            data = source.get("attributes", {}).get("data", {})
            found.append((obj["attributes"].get("name"), dict(data["entries"]) if data.get("type") == "map" else data))
    return found


def named(page: str) -> dict[str, dict[str, Any]]:
    """The renderers with a stable name (what a browser test finds): their data source's columns, by name."""
    return {name: data for name, data in renderers(page) if name}


def numbers(value: Any) -> list[float]:
    """A column bokeh wrote (its NaN as a tagged number)."""
    return [float("nan") if isinstance(v, dict) else float(v) for v in value]


@pytest.mark.cluster
def test_the_page_of_a_real_run_draws_every_device_op_transfer_and_memory_figure(real_report: Path,
                                                                                 tmp_path: Path) -> None:
    report = json.loads(real_report.read_text())
    page = _render(real_report, tmp_path / "run.html")
    strings = drawn(page)

    # self-contained: nothing is fetched from the network (bokeh's JS and CSS are inline)
    assert not re.search(r"<(script|link|img)\b[^>]*\b(src|href)\s*=\s*[\"']?(https?:)?//", page, re.I)
    assert "<script" in page and "Bokeh" in page

    devices = [d["device"] for d in report["devices"]]
    assert len(devices) == 3
    for device in devices:
        assert html.escape(device) in page  # the devices table
        assert short_device(device) in strings  # a timeline row and a memory group
    windows = report["loops"]["loop"].get("windows", {})
    for op in report["ops"]:
        assert html.escape(op["name"]) in page
        if op["start"] is not None and not ((op["runs"] or 0) > 1 and op["worker"] in windows):
            assert op["name"] in strings  # a bar, labelled (a loop op's windows draw its runs)

    # a value that crossed devices is an arrow whose hover names it with its bytes and route
    crossing = [t for t in report["transfers"] if t["from"] != t["to"]]
    assert any(t["value"] == "a" for t in crossing)
    for t in crossing:
        assert any(f"{t['value']} ({format_bytes(t['bytes'])})" in s for s in strings), t
        assert f"{short_device(t['from'])} → {short_device(t['to'])}" in strings

    # memory: planned beside seen, the limit, and "not measured" for the host device
    for d in report["devices"]:
        assert f"planned {format_bytes(d['planned_peak_bytes'])}" in strings
        if d["peak_bytes_seen"] is None:
            assert d["backend"] == "host"
            assert HOST_NOT_MEASURED in strings
        else:
            assert f"seen {format_bytes(d['peak_bytes_seen'])}" in strings
        limit = d["limit_bytes"]
        assert (f"limit {format_bytes(limit)}" if limit is not None else "no limit") in strings
    assert "limit 1.0 MiB" in strings  # the GPUs' gpu_memory

    # the header: spec, backend, granularity, elapsed time, totals, and how the loop ran
    assert "<h1>Run of <code>pictured</code></h1>" in page
    assert f"<th>backend</th><td>{report['backend']}</td>" in page
    assert f"<th>granularity</th><td>{report['granularity']}" in page
    assert (f"<th>elapsed</th><td>{html.escape(seconds(report['elapsed_seconds']))} (after "
            f"{html.escape(seconds(report['startup_seconds']))} of start-up: cluster and device workers)</td>") in page
    assert f"{report['totals']['ops']} ops in {report['totals']['tasks']} Dask tasks" in page
    assert html.escape(report["loops"]["loop"]["mode"]) in page and report["loops"]["loop"]["mode"]


@pytest.mark.cluster
def test_loop_ops_are_drawn_by_their_windows_not_summed_at_their_first_run(real_report: Path, tmp_path: Path) -> None:
    report = json.loads(real_report.read_text())
    page = _render(real_report, tmp_path / "run.html")
    looped = [op for op in report["ops"] if (op["runs"] or 0) > 1]
    assert {op["name"] for op in looped} == {"loop/h", "loop/w_next"}
    bars = next(data for name, data in renderers(page) if name is None and "runs" in data)
    assert not set(bars["name"]) & {op["name"] for op in looped}  # no bar of a loop op's summed runs
    windows = named(page)["windows:loop"]
    assert sorted(windows["device"]) == sorted(short_device(op["worker"]) for op in looped)
    assert not any(s.startswith("hatched") for s in drawn(page))


@pytest.mark.cluster
def test_the_default_page_is_beside_the_report(real_report: Path, tmp_path: Path) -> None:
    report = tmp_path / "copy.json"
    report.write_text(real_report.read_text())
    out = io.StringIO()
    assert run_cli(["report", str(report)], out=out) == 0
    assert (tmp_path / "copy.html").is_file() and out.getvalue() == f"wrote {tmp_path / 'copy.html'}\n"


@pytest.mark.parametrize("content, says", [
    ('{"format": 1, "name": ', "is not a run report: invalid JSON at line 1 column"),
    ("[1, 2]", "is not a run report: expected a JSON object, got an array"),
    ('{"format": 1, "devices": [], "ops": [], "totals": {}, "elapsed_seconds": 1}', "'name' is missing"),
    ('{"format": 2, "name": "x"}', "'format' is 2, this orchestrate reads run reports of format 1"),
    ('{"format": 1, "name": "x", "elapsed_seconds": 1, "totals": {}, "devices": [], "ops": [{"name": "a"}]}',
     "'ops[0].planned_device' is missing"),
    ('{"format": 1, "name": "x", "elapsed_seconds": "soon", "totals": {}, "devices": [], "ops": []}',
     "'elapsed_seconds' should be a number, got a string"),
])
def test_a_file_that_is_not_a_run_report_is_one_line_and_exit_1(content: str, says: str, tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    target = tmp_path / "bad.html"
    target.write_text("the old page")
    assert run_cli(["report", str(bad), "--html", str(target)], out=io.StringIO()) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: {bad} ") and says in err, err
    assert "Traceback" not in err
    assert target.read_text() == "the old page"  # nothing written over it


def test_a_missing_report_file_is_one_line_and_exit_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(["report", str(tmp_path / "nope.json")], out=io.StringIO()) == 1
    err = capsys.readouterr().err
    assert err == f"error: cannot read run report {tmp_path / 'nope.json'}: No such file or directory\n"
    assert not (tmp_path / "nope.html").exists()


def test_an_unwritable_page_is_one_line_and_exit_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = tmp_path / "run.json"
    report.write_text(json.dumps(_report()))
    target = tmp_path / "no-such-dir" / "run.html"
    assert run_cli(["report", str(report), "--html", str(target)], out=io.StringIO()) == 1
    assert capsys.readouterr().err == f"error: cannot write {target}: No such file or directory\n"


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(["report"], out=io.StringIO()) == 2
    assert "the following arguments are required: RUN.json" in capsys.readouterr().err
    assert run_cli(["report", "run.json", "--html"], out=io.StringIO()) == 2


# --------------------------------------------------------------------------- without a cluster


def _report(**overrides: Any) -> dict[str, Any]:
    """A hand-made run report of two devices: a host CPU (no peak measured) and a GPU with a loop op."""
    cpu, gpu = "/job:localhost/replica:0/task:0/device:CPU:0", "/job:localhost/replica:0/task:0/device:GPU:0"
    data: dict[str, Any] = {
        "format": 1, "name": "hand <made>", "file": "hand.yaml", "run": "abc", "backend": "simulated",
        "task_names": {"naming": "op", "why": "2 ops, at most 64"}, "elapsed_seconds": 2.5,
        "phases_seconds": {"compute": 2.4},
        "ops": [
            {"name": "x", "op": "constant", "planned_device": cpu, "worker": cpu, "start": 100.0, "duration": 0.001,
             "output_bytes": 80, "retries": 0, "runs": 1, "why": "device from op"},
            {"name": "train/y", "op": "matmul", "planned_device": gpu, "worker": gpu, "start": 100.5,
             "duration": 0.75, "output_bytes": 80, "retries": 0, "runs": 300, "why": "default"},
            {"name": "train.w", "op": "identity", "planned_device": cpu, "worker": None, "start": None,
             "duration": None, "output_bytes": None, "retries": 0, "runs": None, "why": "colocated",
             "note": "final state of loop 'train'"},
        ],
        "devices": [
            {"device": cpu, "ops": 2, "planned_peak_bytes": 160, "limit_bytes": None, "peak_bytes_seen": None,
             "backend": "host"},
            {"device": gpu, "ops": 1, "planned_peak_bytes": 160, "limit_bytes": 1 << 20, "peak_bytes_seen": 240,
             "backend": "simulated"},
        ],
        "totals": {"ops": 3, "tasks": 4, "bytes_moved": 1080, "moves": 1, "transfers_seen": 1,
                   "bytes_exchanged": 1000},
        "restarted_devices": [], "unverified": [], "granularity": "partition",
        "loops": {"train": "gang: one task per device per window of 100 steps (2 devices)"},
        "transfers": [{"value": "x", "from": cpu, "to": gpu, "bytes": 80, "start": 100.01, "stop": 100.02}],
    }
    data.update(overrides)
    return data


def test_a_hand_made_report_renders_with_escaped_names_and_honest_figures() -> None:
    page = run_report_html(_report(), "hand.json")
    strings = drawn(page)
    assert "<code>hand &lt;made&gt;</code>" in page and "hand <made>" not in page.split("<script", 1)[0]
    assert HOST_NOT_MEASURED in strings and "no limit" in strings and "limit 1.0 MiB" in strings
    assert "seen 240 B" in strings and "planned 160 B" in strings
    assert "300 runs, 750.0 ms in all (2.5 ms each on average), first at +500.0 ms; the bar is their summed " \
           "time drawn from the first run, not when they ran" in strings
    assert "x (80 B)" in strings and "/job:localhost/task:0/CPU:0 → /job:localhost/task:0/GPU:0" in strings
    assert "loop windows sent 1000 B worker to worker" in page
    assert "final state of loop &#x27;train&#x27;" in page  # an op with no timing is listed, not drawn
    assert "train.w" not in strings


def test_reports_with_nothing_to_draw_still_render() -> None:
    empty = run_report_html(_report(ops=[], devices=[], transfers=[]))
    assert "nothing to draw" in empty
    older = _report()
    del older["transfers"], older["phases_seconds"], older["loops"]  # reports from before these fields
    assert "x (80 B)" not in drawn(run_report_html(older))


def _steps(cpu: str, gpu: str) -> dict[str, Any]:
    """A hand-made step picture: a step of 1 ms whose path goes from the CPU to the GPU and back."""
    return {"train": {
        "sampled_steps": [2, 102],
        "devices": {gpu: {"step": 0.001, "compute": {"train/y": 0.0005}, "wait": 0.0003, "send": 0.0001,
                          "overhead": 0.0001}},
        "critical_path": {"step": 102, "seconds": 0.001, "segments": [
            {"device": gpu, "kind": "transit", "name": f"state:w from {cpu}", "seconds": 0.0003},
            {"device": gpu, "kind": "op", "name": "train/y", "seconds": 0.0005},
            {"device": gpu, "kind": "send", "name": f"train/y to {cpu}", "seconds": 0.0001},
            {"device": cpu, "kind": "overhead", "name": "", "seconds": 0.0001}]}}}


def test_a_step_picture_draws_its_path_end_to_end_and_prints_its_line() -> None:
    data = _report()
    cpu, gpu = data["devices"][0]["device"], data["devices"][1]["device"]
    data.update(loop_steps=_steps(cpu, gpu), transport="links", placement={})
    page = run_report_html(data)
    strings = drawn(page)
    line = ("train: a step 1.00 ms on the critical path (compute 0.50 ms, transit 0.30 ms, send 0.10 ms, "
            "overhead 0.10 ms; 2 steps sampled; values over direct links)")
    assert loop_step_lines(data) == [line]
    assert placement_summary(data).endswith(f"\n  {line}\n")
    words = next(s for s in strings if s.startswith("<h2>Loop <code>train</code>: one step</h2>"))
    assert f"<b>{html.escape(line)}</b>" in words and "Sampled steps: 2, 102 " in words
    # labels where they fit on an axis of 1020 µs, 840 px wide: "overhead 100 µs" does not, its duration does
    assert {"transit 300 µs", "train/y 500 µs", "send 100 µs", "100 µs"} <= strings
    assert f"transit: state:w from {cpu}" in strings and "+800 µs" in strings and "+900 µs" in strings
    assert {"compute: train/y", "50% of the median step", "median step 1000 µs", "30% of the median step"} <= strings
    assert "<th>loop transport</th>" in page


def test_reports_without_a_step_picture_have_no_step_section() -> None:
    cpu, gpu = (d["device"] for d in _report()["devices"])
    unsampled = {"train": {"sampled_steps": [], "devices": {},
                           "critical_path": {"step": None, "seconds": 0.0, "segments": []}}}
    for data in (_report(), _report(loop_steps={}, transport=""), _report(loop_steps=unsampled, transport="links")):
        strings = drawn(run_report_html(data))
        assert not any("one step" in s or "critical path" in s for s in strings)
        assert loop_step_lines(data) == []
    odd = _steps(cpu, gpu)
    odd["train"]["critical_path"]["segments"][3]["kind"] = "gc"  # a kind a newer run may record: drawn, grey
    assert "gc: " not in drawn(run_report_html(_report(loop_steps=odd)))
    assert "gc" in drawn(run_report_html(_report(loop_steps=odd)))
    odd["train"]["critical_path"]["segments"][0]["seconds"] = "soon"
    with pytest.raises(BadRunReport, match=r"'loop_steps.train.critical_path.segments\[0\].seconds' should be a "
                                           "number, got a string"):
        run_report_html(_report(loop_steps=odd))


def test_words() -> None:
    assert short_device("/job:worker/replica:0/task:1/device:GPU:3") == "/job:worker/task:1/GPU:3"
    assert short_device("/job:worker/replica:2/task:1/device:CPU:0") == "/job:worker/replica:2/task:1/CPU:0"
    assert [seconds(x) for x in (7e-5, 0.0123, 6.812)] == ["70 µs", "12.3 ms", "6.81 s"]
    view = parse_run_report(_report())
    assert op_timing(view.ops[0], 100.0) == "1.0 ms from +0 µs"
    assert op_timing(view.ops[2], 100.0) == "final state of loop 'train'"
    with pytest.raises(BadRunReport, match="'devices\\[0\\].ops' should be a whole number"):
        parse_run_report(_report(devices=[{"device": "/cpu:0", "ops": -1}]))


# --------------------------------------------------------------------------- bokeh's one home


def test_only_report_html_imports_bokeh_and_importing_the_cli_does_not() -> None:
    package = ROOT / "orchestrator"
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            if any(name.split(".")[0] == "bokeh" for name in names):
                assert path == package / "report" / "html" / "figures.py", f"{path} imports bokeh"
    code = "import sys, orchestrator.cli; print(sorted(m for m in sys.modules if m.split('.')[0] == 'bokeh'))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stderr


# --------------------------------------------------------------------------- the run over time (issue 28.3)

TRAINED = """\
version: 1
name: trained
cluster: {jobs: {localhost: {gpus: 2, gpu_threads: 4}}}
graph:
  - {name: X, op: random.normal, shape: [32, 3], seed: 1, device: /cpu:0}
  - {name: y, op: random.normal, shape: [32], seed: 2, device: /cpu:0}
  - {name: Xt, op: transpose, inputs: [X], device: /cpu:0}
  - {name: w0, op: zeros, shape: [3], device: /gpu:0}
  - name: train
    iterate:
      steps: 20
      window: 5
      state: {w: w0}
      body:
        - {name: pred, op: matmul, inputs: [X, w], device: /gpu:0}
        - {name: err, op: sub, inputs: [pred, y], device: /gpu:0}
        - {name: g0, op: matmul, inputs: [Xt, err], device: /gpu:1}
        - {name: g, op: mul, inputs: [g0], scalar: 0.01, device: /gpu:1}
        - {name: w_next, op: sub, inputs: [w, g], device: /gpu:0}
        - {name: sq, op: mul, inputs: [err, err], device: /gpu:0}
        - {name: loss, op: mean, inputs: [sq], device: /gpu:0}
      update: {w: w_next}
      metrics: {loss: loss}
      evaluate:
        every: 10
        body:
          - {name: vsq, op: mul, inputs: [w, w], device: /cpu:0}
          - {name: norm, op: sum, inputs: [vsq], device: /cpu:0}
        metrics: {norm: norm}
  - name: hp
    sweep:
      grid: {lr: [0.001, 0.01, 0.03, 0.3]}
      spread: /gpu:*
      body:
        - {name: v0, op: zeros, shape: [3]}
        - name: fit
          iterate:
            steps: 12
            window: 4
            state: {v: v0}
            body:
              - {name: p, op: matmul, inputs: [X, v]}
              - {name: e, op: sub, inputs: [p, y]}
              - {name: h0, op: matmul, inputs: [Xt, e]}
              - {name: h, op: mul, inputs: [h0, lr]}
              - {name: v_next, op: sub, inputs: [v, h]}
              - {name: se, op: mul, inputs: [e, e]}
              - {name: mse, op: mean, inputs: [se]}
            update: {v: v_next}
            metrics: {mse: mse}
        - {name: pv, op: matmul, inputs: [X, fit.v]}
        - {name: ev, op: sub, inputs: [pv, y]}
        - {name: sev, op: mul, inputs: [ev, ev]}
        - {name: final, op: mean, inputs: [sev]}
      halving: {metric: fit.mse, rungs: [4, 8], keep: 0.5}
      select: {min: final}
outputs:
  train.w: "-"
  hp.best: "-"
"""


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], str]:
    """A real run of a gang loop of 4 windows on two GPUs and a halving sweep of 4 copies, its report and page
    (through ``orchestrate report --html``)."""
    where = tmp_path_factory.mktemp("trained")
    (where / "trained.yaml").write_text(TRAINED)
    run_file(where / "trained.yaml", output_dir=str(where), report_path=str(where / "run.json"), echo=_quiet)
    return json.loads((where / "run.json").read_text()), _render(where / "run.json", where / "run.html")


@pytest.mark.cluster
def test_a_loop_is_its_windows_across_the_run_a_bar_per_window_per_device(trained: tuple[dict[str, Any], str]
                                                                         ) -> None:
    report, page = trained
    recorded = report["loops"]["train"]["windows"]
    assert len(recorded) == 2 and all(len(ran) == 4 for ran in recorded.values())  # 4 windows on each GPU
    bars = named(page)["windows:train"]
    assert len(bars["left"]) == 8  # a bar per window per device, not one per loop
    for device, ran in recorded.items():
        mine = sorted((left, right, steps) for left, right, steps, on in
                      zip(bars["left"], bars["right"], bars["steps"], bars["device"]) if on == short_device(device))
        assert [steps for _, _, steps in mine] == ["1–5", "6–10", "11–15", "16–20"]
        assert all(a < b <= c for (a, b, _), (c, _, _) in zip(mine, mine[1:]))  # one after another over the run
        assert [round(b - a, 9) for a, b, _ in mine] == [round(stop - start, 9) for start, stop, _, _ in ran]
    ops = next(data for name, data in renderers(page) if name is None and "runs" in data)
    assert not any(name.startswith("train/") and name != "train/eval/vsq" and name != "train/eval/norm"
                   for name in ops["name"])  # the loop's ops are its windows, not summed bars
    for loop in ("hp/0/fit", "hp/3/fit"):  # a copy's loop too
        assert named(page)[f"windows:{loop}"]["steps"][0] == "1–4"


@pytest.mark.cluster
def test_a_line_per_metric_of_a_loop_and_per_copy_of_a_sweep(trained: tuple[dict[str, Any], str]) -> None:
    report, page = trained
    lines = named(page)
    curves = {c["metric"]: c for c in report["loops"]["train"]["curves"]}
    assert set(curves) == {"loss", "norm"}  # its step metric and its evaluation's
    assert numbers(lines["curve:train:loss"]["x"]) == list(range(1, 21))
    np.testing.assert_allclose(numbers(lines["curve:train:loss"]["y"]), curves["loss"]["values"])
    assert numbers(lines["curve:train:norm"]["x"]) == [10.0, 20.0]
    copies = report["sweeps"]["hp"]["copies"]
    for copy in copies:
        line = lines[f"curve:hp:mse:copy {copy['index']}"]
        curve = copy["curves"][0]
        assert numbers(line["x"]) == curve["steps"] == list(range(1, 13))
        ys, stop = numbers(line["y"]), copy.get("stopped_at_step") or 12  # NaN after the rung it stopped at
        assert not np.isnan(ys[:stop]).any() and np.isnan(ys[stop:]).all()
    legend = drawn(page)
    assert {"0: lr=0.001, stopped", "1: lr=0.01, stopped"} <= legend  # the copies' values, how they ended


@pytest.mark.cluster
def test_the_search_section_shows_copies_rungs_and_the_selected_copy(trained: tuple[dict[str, Any], str]) -> None:
    report, page = trained
    sweep = report["sweeps"]["hp"]
    bars = named(page)["copies:hp"]
    for copy in sweep["copies"]:
        row = f"{short_device(copy['device'])} · copy {copy['index']}"
        assert row in bars["row"]
        assert any(what == f"copy {copy['index']}: lr={copy['params']['lr']}" for what in bars["what"])
    assert {c["status"] for c in sweep["copies"]} == {"stopped", "finished"}
    assert sweep["selected"] == 2  # the last copy left (lr 0.03; lr 0.3 diverges), its index
    chosen = named(page)["selected:hp"]
    assert chosen["row"] == [f"{short_device(sweep['copies'][2]['device'])} · copy 2"]
    assert '<section id="sweep-hp">' in page and "<td>copy 2 (selected)</td>" in page
    table = page.split('<table class="grid decisions">')[1].split("</table>")[0]
    assert "<th>step 4</th><th>step 8</th>" in table and table.count("<tr>") == 5


@pytest.mark.cluster
def test_the_step_picture_says_what_its_median_step_and_critical_path_measure(trained: tuple[dict[str, Any], str]
                                                                              ) -> None:
    report, page = trained
    picture = report["loop_steps"]["train"]
    lines = named(page)
    step, path = lines["median-step:train"], lines["critical-path:train"]
    assert len(step["x"]) == len(picture["devices"]) == 2  # each device's median step, the path beside it
    assert step["value"] == [f"median step {micro(d['step'])}" for d in picture["devices"].values()]
    assert set(path["value"]) == {f"critical path {micro(picture['critical_path']['seconds'])}"}
    assert "waits included" in step["why"][0] and "the loop's period" in step["why"][0]
    assert "walked back from the step's last event" in path["why"][0] and "shorter" in path["why"][0]
    strings = drawn(page)
    assert {"median step", "critical path", "hover: what each is"} <= strings  # in the legends
    segments = lines["path:train"]
    assert all(means for means in segments["means"])  # each segment's hover says what its kind is
