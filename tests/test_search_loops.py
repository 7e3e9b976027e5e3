"""A sweep's copies of a training loop: a failure in one copy's loop is that copy's alone, the copies run in
their planned waves with their real start and stop, and `report --html` draws the search (issue 26.4, 26.7)."""

from __future__ import annotations

import csv
import io
import json
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from orchestrator import plan_file, run_file
from orchestrator.cli import run_cli
from orchestrator.report.html import short_device
from orchestrator.runtime.exchange import RECEIVE_TIMEOUT
from test_halving import LRS, RUNGS, STEPS, numpy_descent, spec_text
from test_report_html import drawn, named

pytestmark = pytest.mark.cluster

FAILING = 7  # lr 0.16: the best copy at the first rung, then its loop fails


def failing_fns(tmp_path: Path) -> None:
    """``check`` passes a loss through, but copy FAILING's raises once its loss is below its value at step 8."""
    losses, _ = numpy_descent()
    (tmp_path / "halving_fns.py").write_text(textwrap.dedent(f"""\
        def check(loss, lr, xp):
            if float(lr) == {LRS[FAILING]} and float(loss) < {float(losses[FAILING, 7]) * 0.999!r}:
                raise ValueError("lr {LRS[FAILING]} diverged")
            return loss
        """), encoding="utf-8")


def failing_spec(tmp_path: Path, allow: bool) -> Path:
    failing_fns(tmp_path)
    text = spec_text().replace(
        "              - {name: loss, op: mean, inputs: [sq]}\n",
        "              - {name: loss, op: mean, inputs: [sq]}\n"
        "              - {name: checked, op: call, fn: \"halving_fns:check\", kernels: [cpu, gpu], inputs: [loss, lr],\n"
        "                 output: {shape: []}}\n").replace("            metrics: {loss: loss}",
                                                     "            metrics: {loss: checked}").replace(
        "      gather: {w: train.w, losses: train.loss}",
        f"      allow_failures: {str(allow).lower()}\n      gather: {{w: train.w, losses: train.loss}}\n"
        "      table: {path: results/table.csv, metrics: [lr]}")
    path = tmp_path / "spec.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def numpy_halving_without(failed: int, fails_at: int) -> dict[int, int]:
    """Each copy's last step when copy ``failed`` leaves the ranking after step ``fails_at``."""
    losses, _ = numpy_descent()
    running, stopped_at = list(range(len(LRS))), {}
    for rung in RUNGS:
        running = [i for i in running if not (i == failed and fails_at < rung)]
        ranked = sorted(running, key=lambda i: (losses[i, rung - 1], i))
        kept = ranked[:max(1, int(len(ranked) * 0.5))]
        stopped_at.update({i: rung for i in ranked[len(kept):]})
        running = kept
    return {**stopped_at, **{i: STEPS for i in running if i != failed}}


@pytest.fixture(scope="module")
def failed_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A halving sweep whose best copy's loop fails between the first two rungs, failures allowed."""
    where = tmp_path_factory.mktemp("failing")
    out = io.StringIO()
    code = run_cli(["run", str(failing_spec(where, True)), "--report", str(where / "run.json")], out=out)
    assert code == 0, out.getvalue()
    (where / "said.txt").write_text(out.getvalue(), encoding="utf-8")
    return where


def test_a_failure_in_one_copys_loop_fails_that_copy_and_the_others_go_on(failed_run: Path) -> None:
    report = json.loads((failed_run / "run.json").read_text())
    said = (failed_run / "said.txt").read_text()
    losses, weights = numpy_descent()
    stopped_at = numpy_halving_without(FAILING, 8)
    sweep = report["sweeps"]["hp"]
    failed = sweep["copies"][FAILING]
    assert failed["status"] == "failed" and "ValueError: lr 0.16 diverged" in failed["error"], failed
    assert "warning: sweep 'hp': 1 of 8 copies failed (allow_failures: true)" in said
    assert "sweep 'hp': 1 of 8 copies finished, 6 stopped early (halving), 1 failed" in said
    # the failed copy left the ranking: 3 copies at the second rung, not 4
    assert [len(r["copies"]) for r in sweep["rungs"]] == [8, 3, 1]
    assert FAILING in [row["copy"] for row in sweep["rungs"][0]["copies"] if row["kept"]]
    for copy in sweep["copies"]:
        if copy["index"] != FAILING:
            stop = stopped_at[copy["index"]]
            assert copy["status"] == ("finished" if stop == STEPS else "stopped"), copy
    w = np.load(failed_run / "results" / "losses.npy")
    for i in range(len(LRS)):
        if i == FAILING:
            assert np.isnan(w[i]).all()  # its gathered row: NaN, as any failed copy's
        else:
            np.testing.assert_allclose(w[i, :stopped_at[i]], losses[i, :stopped_at[i]], rtol=1e-10)
    rows = list(csv.DictReader(io.StringIO((failed_run / "results" / "table.csv").read_text())))
    assert [r["status"] for r in rows].count("failed") == 1 and rows[FAILING]["status"] == "failed"
    assert report["loops"][f"hp/{FAILING}/train"]["stop_reason"] == "failed"


def test_without_allow_failures_a_failed_copy_loop_ends_the_run_with_no_output(tmp_path: Path) -> None:
    out = io.StringIO()
    code = run_cli(["run", str(failing_spec(tmp_path, False))], out=out)
    said = out.getvalue()
    assert code == 1, said
    assert "error: sweep 'hp': 1 of 8 copies failed" in said and "ValueError: lr 0.16 diverged" in said
    assert "no output written" in said and not (tmp_path / "results").exists()


STEP_FNS = """\
import time


def step(w, lr, xp):
    time.sleep(0.005)  # a small model's step on a GPU: the host thread waits for its kernels
    if float(lr) == 0.3 and float(w.sum()) < 2.0:
        raise ValueError("lr 0.3 diverged")
    return w - lr * w


def probe(w, lr, xp):
    if float(lr) == 0.7 and float(w.sum()) < 1.0:
        return xp.ones(1 << 18)  # 2 MiB: over the GPU's 1 MiB cap
    return xp.zeros(1)
"""

LOOP_SPEC = """\
version: 1
cluster: {jobs: {localhost: {gpus: 1, gpu_threads: 2, gpu_memory: {limit: 1MiB}}}}
graph:
  - name: s
    sweep:
      grid: {lr: LRS}
      spread: /gpu:0
      allow_failures: true
      body:
        - {name: w0, op: ones, shape: [4]}
        - name: train
          iterate:
            steps: 12
            window: 4
            state: {w: w0}
            body:
              - {name: w_next, op: call, fn: "step_fns:step", kernels: [gpu], inputs: [w, lr], output: {shape: [4]}}
              - {name: loss, op: sum, inputs: [w_next], DEVICE}PROBE
            update: {w: w_next}
            metrics: {loss: loss}
      gather: {w: train.w}
      table: {path: table.csv, metrics: [lr]}
outputs:
  s.w: w.npy
"""


def loop_spec(tmp_path: Path, lrs: list[float], device: str = "", probe: bool = False) -> Path:
    (tmp_path / "step_fns.py").write_text(STEP_FNS, encoding="utf-8")
    path = tmp_path / "spec.yaml"
    text = LOOP_SPEC.replace("LRS", json.dumps(lrs)).replace(", DEVICE", f", device: {device}" if device else "")
    text = text.replace("PROBE", "\n              - {name: probe, op: call, fn: \"step_fns:probe\", kernels: [gpu], "
                                 "inputs: [w, lr]}" if probe else "")
    path.write_text(text, encoding="utf-8")
    return path


def test_the_plan_decides_which_copies_loops_step_side_by_side(tmp_path: Path) -> None:
    """The run's driver steps copies' loops side by side where the plan says so (SweepPacking.side_by_side); a
    copy's loop that holds a loop runs step by step, so those copies' loops run one after another."""
    plain = plan_file(str(loop_spec(tmp_path, [0.1, 0.2])))
    assert plain.packing_of("s") is not None and plain.packing_of("s").side_by_side == (0,)
    nested = LOOP_SPEC.replace("LRS", "[0.1, 0.2]").replace(", DEVICE", "").replace("PROBE", "").replace(
        "              - {name: loss, op: sum, inputs: [w_next]}", textwrap.indent(textwrap.dedent("""\
            - {name: loss, op: sum, inputs: [w_next]}
            - name: inner
              iterate:
                steps: 2
                state: {v: w_next}
                body:
                  - {name: v_next, op: mul, inputs: [v, v]}
                update: {v: v_next}"""), "              "))
    assert "inner" in nested
    (tmp_path / "nested.yaml").write_text(nested, encoding="utf-8")
    plan = plan_file(str(tmp_path / "nested.yaml"))
    assert plan.packing_of("s") is not None and plan.packing_of("s").side_by_side == ()


def test_packed_copies_run_in_their_waves_with_their_real_start_and_stop(tmp_path: Path) -> None:
    lrs = [0.1, 0.2, 0.4, 0.5, 0.6]
    result = run_file(loop_spec(tmp_path, lrs), echo=lambda _: None, output_dir=str(tmp_path))
    np.testing.assert_allclose(np.load(tmp_path / "w.npy"), np.ones((5, 4)) * ((1 - np.array(lrs)) ** 12)[:, None],
                               rtol=1e-12)
    sweep = result.report["sweeps"]["s"]
    device = next(iter(sweep["devices"].values()))
    assert device["at_once"] == 2 and device["waves"] == 3 and device["most_at_once_seen"] <= 2, device
    copies = sweep["copies"]
    assert [c["wave"] for c in copies] == [0, 0, 1, 1, 2]
    for wave in (1, 2):  # a wave starts once the wave before it has stopped, on the same device
        before = max(c["stop"] for c in copies if c["wave"] == wave - 1)
        assert all(c["start"] >= before for c in copies if c["wave"] == wave), copies
    rows = list(csv.DictReader(io.StringIO((tmp_path / "table.csv").read_text())))
    assert [int(r["wave"]) for r in rows] == [0, 0, 1, 1, 2]
    starts = [float(r["start_s"]) for r in rows]
    stops = [float(r["stop_s"]) for r in rows]
    assert starts[0] == 0.0 and max(stops[:2]) <= min(starts[2:4]) and max(stops[2:4]) <= starts[4]


def test_an_exception_and_a_memory_cap_in_copies_loops_fail_those_copies_alone(tmp_path: Path) -> None:
    lrs = [0.1, 0.3, 0.5, 0.7]
    result = run_file(loop_spec(tmp_path, lrs, probe=True), echo=lambda _: None, output_dir=str(tmp_path))
    copies = result.report["sweeps"]["s"]["copies"]
    assert [c["status"] for c in copies] == ["finished", "failed", "finished", "failed"]
    assert "ValueError: lr 0.3 diverged" in copies[1]["error"]
    assert "OOM when allocating 2.0 MiB for op 's/3/train/probe'" in copies[3]["error"], copies[3]
    w = np.load(tmp_path / "w.npy")
    np.testing.assert_allclose(w[[0, 2]], np.ones((2, 4)) * ((1 - np.array([0.1, 0.5])) ** 12)[:, None], rtol=1e-12)
    assert np.isnan(w[[1, 3]]).all()


def test_a_failed_copy_loop_on_two_devices_wakes_what_waited_for_it(tmp_path: Path) -> None:
    """Each copy's loop sends its values from the GPU to the CPU every step: when the GPU's op fails, the CPU's
    part of the window stops waiting at once (it used to wait for the values until the receive timeout)."""
    lrs = [0.1, 0.3, 0.5]
    result = run_file(loop_spec(tmp_path, lrs, "/cpu:0"), echo=lambda _: None, output_dir=str(tmp_path))
    assert [c["status"] for c in result.report["sweeps"]["s"]["copies"]] == ["finished", "failed", "finished"]
    assert result.report["elapsed_seconds"] < RECEIVE_TIMEOUT / 2
    np.testing.assert_allclose(np.load(tmp_path / "w.npy")[2], np.full(4, 0.5 ** 12), rtol=1e-12)


# --------------------------------------------------------------------------- the page


def _numbers(value: Any) -> list[float]:
    """A list bokeh wrote (its NaN as a tagged number)."""
    return [float("nan") if isinstance(v, dict) else float(v) for v in value]


def test_the_page_has_a_search_section(failed_run: Path) -> None:
    target = failed_run / "run.html"
    out = io.StringIO()
    assert run_cli(["report", str(failed_run / "run.json"), "--html", str(target)], out=out) == 0
    page = target.read_text(encoding="utf-8")
    report = json.loads((failed_run / "run.json").read_text())
    strings = drawn(page)
    assert "Sweep hp: each copy from its start to its stop, by device and wave" in strings
    for copy in report["sweeps"]["hp"]["copies"]:  # a row per copy, by device
        assert f"{short_device(copy['device'])} · copy {copy['index']}" in strings
    assert "stopped at step 5" in strings and "failed" in strings  # the halted copies' ticks, the failed bar
    # each copy's curve of the loss the rule watches, as its loop made it (NaN after a halted copy's rung)
    losses, _ = numpy_descent()
    curves = {name: data for name, data in named(page).items() if name.startswith("curve:hp:loss:copy ")}
    stopped_at = numpy_halving_without(FAILING, 8)
    assert len(curves) == len(LRS)  # a line per copy
    for i in range(len(LRS)):
        xs, values = _numbers(curves[f"curve:hp:loss:copy {i}"]["x"]), _numbers(curves[f"curve:hp:loss:copy {i}"]["y"])
        assert xs == list(range(1, len(values) + 1))
        if i == FAILING:
            continue
        np.testing.assert_allclose(values[:stopped_at[i]], losses[i, :stopped_at[i]], rtol=1e-10)
        assert np.isnan(values[stopped_at[i]:]).all()
    # the rung table: a row per copy, a column per rung, each copy's value and fate
    assert "<h2>Sweep <code>hp</code>: halving on <code>train.loss</code>, rung by rung</h2>" in page
    table = page.split('<table class="grid decisions">')[1].split("</table>")[0]
    assert table.count("<tr>") == len(LRS) + 1 and "<th>step 5</th><th>step 15</th><th>step 25</th>" in table
    first = report["sweeps"]["hp"]["rungs"][0]["copies"]
    for row in first:
        assert f"{row['value']:.4g} {'goes on' if row['kept'] else 'stopped'}" in table
