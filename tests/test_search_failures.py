"""A sweep's failed copies: recorded with their error, never selected, the others finish, --resume reruns them."""

from __future__ import annotations

import csv
import io
import json
import os
import textwrap
from pathlib import Path

import numpy as np
import pytest

from orchestrator import run_file
from orchestrator.cli import run_cli
from orchestrator.errors import RunError

pytestmark = pytest.mark.cluster

FNS = """\
import os

import numpy as np


def fit(x, lam, xp):
    broken = os.path.join(os.path.dirname(__file__), "broken")
    if float(lam) == 2.0 and os.path.exists(broken):
        raise ValueError("lam 2 diverged")
    if float(lam) == 3.0 and os.path.exists(broken):
        return xp.ones(1 << 20)  # 8 MiB: over the GPU's 1 MiB cap
    return x * lam
"""


def write_spec(tmp_path: Path, extra: str = "", outputs: str = "") -> Path:
    (tmp_path / "fail_fns.py").write_text(FNS, encoding="utf-8")
    (tmp_path / "broken").touch()
    spec = tmp_path / "spec.yaml"
    spec.write_text(textwrap.dedent("""\
        version: 1
        cluster: {jobs: {localhost: {gpus: 2, gpu_memory: {limit: 1MiB}}}}
        graph:
          - {name: x, op: ones, shape: [4], device: /cpu:0}
          - name: s
            cache: true
            sweep:
              grid: {lam: [1.0, 2.0, 3.0, 0.5]}
              spread: /gpu:*
              EXTRA
              body:
                - {name: y, op: call, fn: "fail_fns:fit", kernels: [cpu, gpu], inputs: [x, lam]}
                - {name: t, op: sum, inputs: [y]}
              select: {max: t}
              gather: {totals: t}
              combine: {y: mean}
              table: {path: table.csv, metrics: [t]}
        outputs:
          s.totals: totals.npy
          s.best: "-"
          s.y: y.npy
        OUTPUTS""").replace("EXTRA", extra).replace("OUTPUTS", outputs), encoding="utf-8")
    return spec


def run(spec: Path, *flags: str) -> tuple[int, str]:
    out = io.StringIO()
    code = run_cli(["run", str(spec), "--output-dir", str(spec.parent / "out"), "--report",
                    str(spec.parent / "run.json"), *flags], out=out)
    return code, out.getvalue()


def test_failed_copies_are_recorded_never_selected_and_the_run_exits_1(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, "allow_failures: ALLOWED")
    out = tmp_path / "out"
    out.mkdir()
    (out / "totals.npy").write_bytes(b"yesterday's totals")
    spec.write_text(spec.read_text().replace("ALLOWED", "false"))
    code, said = run(spec)
    assert code == 1, said
    assert "error: sweep 's': 2 of 4 copies failed" in said
    assert "copy 1 (lam=2.0, id " in said and "ValueError: lam 2 diverged" in said
    assert "copy 2 (lam=3.0, id " in said and "OOM when allocating 8.0 MiB for op 's/2/y'" in said
    # λ = 1 has the largest total of the copies that ran; λ = 3's is larger, but it failed: never chosen
    assert float(said.split("s.best =\n")[1].split("\n")[0]) == 1.0
    # a failed run writes none of its outputs (the gathered values, the combined mean, the table): issue 31.2
    assert f"no output written: sweep 's' had copies that failed; the files already there are as they were " \
           f"({os.path.relpath(out / 'totals.npy')})" in said.splitlines()
    assert [p.name for p in out.iterdir()] == ["totals.npy"] and (out / "totals.npy").read_bytes() == b"yesterday's totals"
    copies = json.loads((tmp_path / "run.json").read_text())["sweeps"]["s"]["copies"]  # the report says what failed
    assert copies[1]["status"] == "failed" and copies[1]["error"] == "ValueError: lam 2 diverged"
    assert copies[2]["error"].startswith("OOM when allocating 8.0 MiB for op 's/2/y'")

    spec.write_text(spec.read_text().replace("allow_failures: false", "allow_failures: true"))
    code, said = run(spec)  # allowed: every output written, the failed copies' rows NaN
    assert code == 0, said
    np.testing.assert_array_equal(np.load(out / "totals.npy"), [4.0, np.nan, np.nan, 2.0])
    np.testing.assert_array_equal(np.load(out / "y.npy"), np.full(4, 0.75))  # the mean of the two that ran
    rows = list(csv.DictReader(io.StringIO((out / "table.csv").read_text())))
    assert [r["status"] for r in rows] == ["reused", "failed", "failed", "reused"]  # the sweep's cache is on
    assert rows[1]["t"] == "nan"


def test_a_copy_that_fails_after_its_gathered_metric_has_a_nan_row(tmp_path: Path) -> None:
    """The gathered op ran before a later op of the copy failed: its row is NaN all the same (issue 31.7)."""
    (tmp_path / "late_fns.py").write_text(
        "def check(y, lam, xp):\n"
        "    if float(lam) == 2.0:\n"
        "        raise ValueError('lam 2 diverged after its total')\n"
        "    return y\n", encoding="utf-8")
    spec = tmp_path / "late.yaml"
    spec.write_text(textwrap.dedent("""\
        version: 1
        graph:
          - {name: x, op: ones, shape: [4]}
          - name: s
            sweep:
              grid: {lam: [1.0, 2.0, 3.0]}
              allow_failures: true
              body:
                - {name: y, op: mul, inputs: [x, lam]}
                - {name: t, op: sum, inputs: [y]}
                - {name: z, op: call, fn: "late_fns:check", inputs: [y, lam], output: {shape: [4]}}
              gather: {totals: t, ys: y}
              table: {path: table.csv, metrics: [t]}
        outputs:
          s.totals: totals.npy
          s.ys: ys.npy
        """), encoding="utf-8")
    code, said = run(spec, "--sync")
    assert code == 0 and "warning: sweep 's': 1 of 3 copies failed" in said, said
    out = tmp_path / "out"
    np.testing.assert_array_equal(np.load(out / "totals.npy"), [4.0, np.nan, 12.0])
    np.testing.assert_array_equal(np.load(out / "ys.npy"), [np.ones(4), np.full(4, np.nan), np.full(4, 3.0)])
    rows = list(csv.DictReader(io.StringIO((out / "table.csv").read_text())))
    assert [(r["t"], r["status"]) for r in rows] == [("4.0", "finished"), ("nan", "failed"), ("12.0", "finished")]


def test_resume_reruns_exactly_the_copies_that_did_not_finish(tmp_path: Path) -> None:
    spec = write_spec(tmp_path)
    assert run(spec)[0] == 1
    (tmp_path / "broken").unlink()
    code, said = run(spec, "--resume")
    assert code == 0, said
    ops = {o["name"]: o for o in json.loads((tmp_path / "run.json").read_text())["ops"]}
    for copy in (0, 3):  # finished the first time: reused
        assert ops[f"s/{copy}/y"]["cache"].startswith("reused"), ops[f"s/{copy}/y"]
    for copy in (1, 2):  # failed the first time: run again
        assert ops[f"s/{copy}/y"]["worker"] is not None and not ops[f"s/{copy}/y"].get("cache", "").startswith("reused")
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "totals.npy"), [4.0, 8.0, 12.0, 2.0])


def test_a_sweep_that_allows_failures_succeeds_and_warns(tmp_path: Path) -> None:
    code, said = run(write_spec(tmp_path, "allow_failures: true"))
    assert code == 0, said
    assert "warning: sweep 's': 2 of 4 copies failed (allow_failures: true)" in said


def test_in_one_process_the_copies_fail_the_same_way(tmp_path: Path) -> None:
    code, said = run(write_spec(tmp_path), "--sync")
    assert code == 1 and "error: sweep 's': 2 of 4 copies failed" in said, said
    assert "no output written: sweep 's' had copies that failed" in said and not (tmp_path / "out").exists()
    code, said = run(write_spec(tmp_path, "allow_failures: true"), "--sync")
    assert code == 0, said
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "totals.npy"), [4.0, np.nan, np.nan, 2.0])


def test_reading_a_failed_copy_outside_the_sweep_fails_naming_it(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, outputs="  s/1/t: '-'\n")
    with pytest.raises(RunError, match=r"output 's/1/t' is a value of a sweep copy that failed \('s/1/y': "
                                       r"ValueError: lam 2 diverged\)"):
        run_file(spec, echo=lambda _: None, output_dir=str(tmp_path / "out"))


@pytest.mark.parametrize("flags", [(), ("--sync",), ("--granularity", "op")])
def test_a_copy_that_fails_after_its_metric_is_never_selected_nor_combined(tmp_path: Path,
                                                                          flags: tuple[str, ...]) -> None:
    """The copy's metric 't' was made, then its op 'z' failed: select, pick, combine and gather wait for every
    copy's last op and leave it out (it used to be selected: s.best = 3 with the run saying otherwise)."""
    (tmp_path / "late_fns.py").write_text(
        "def check(y, lam, xp):\n"
        "    if float(lam) == 3.0:\n"
        "        raise ValueError('lam 3 diverged after its total')\n"
        "    return y\n", encoding="utf-8")
    spec = tmp_path / "late.yaml"
    spec.write_text(textwrap.dedent("""\
        version: 1
        graph:
          - {name: x, op: ones, shape: [4]}
          - name: s
            sweep:
              grid: {lam: [1.0, 2.0, 3.0]}
              allow_failures: true
              body:
                - {name: y, op: mul, inputs: [x, lam]}
                - {name: t, op: sum, inputs: [y]}
                - {name: z, op: call, fn: "late_fns:check", inputs: [y, lam], output: {shape: [4]}}
              select: {max: t}
              gather: {totals: t}
              combine: {y: mean}
        outputs:
          s.best: best.npy
          s.t: t.npy
          s.y: y.npy
          s.totals: totals.npy
        """), encoding="utf-8")
    code, said = run(spec, *flags)
    assert code == 0 and "1 of 3 copies failed" in said and "no failed copy was selected" in said, said
    out = tmp_path / "out"
    assert float(np.load(out / "best.npy")) == 2.0  # λ = 3 has the largest total, but failed after making it
    assert float(np.load(out / "t.npy")) == 8.0
    np.testing.assert_array_equal(np.load(out / "y.npy"), np.full(4, 1.5))  # the mean of the copies that did not fail
    np.testing.assert_array_equal(np.load(out / "totals.npy"), [4.0, 8.0, np.nan])
