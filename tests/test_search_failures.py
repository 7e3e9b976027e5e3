"""A sweep's failed copies: recorded with their error, never selected, the others finish, --resume reruns them."""

from __future__ import annotations

import csv
import io
import json
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
    spec = write_spec(tmp_path)
    code, said = run(spec)
    assert code == 1, said
    assert "error: sweep 's': 2 of 4 copies failed" in said
    assert "copy 1 (lam=2.0, id " in said and "ValueError: lam 2 diverged" in said
    assert "copy 2 (lam=3.0, id " in said and "OOM when allocating 8.0 MiB for op 's/2/y'" in said
    out = tmp_path / "out"
    np.testing.assert_array_equal(np.load(out / "totals.npy"), [4.0, np.nan, np.nan, 2.0])
    # λ = 1 has the largest total of the copies that ran; λ = 3's is larger, but it failed: never chosen
    assert float(said.split("s.best =\n")[1].split("\n")[0]) == 1.0
    np.testing.assert_array_equal(np.load(out / "y.npy"), np.full(4, 0.75))  # the mean of the two that ran
    rows = list(csv.DictReader(io.StringIO((out / "table.csv").read_text())))
    assert [r["status"] for r in rows] == ["finished", "failed", "failed", "finished"]
    assert rows[1]["t"] == "nan"
    copies = json.loads((tmp_path / "run.json").read_text())["sweeps"]["s"]["copies"]
    assert copies[1]["status"] == "failed" and copies[1]["error"] == "ValueError: lam 2 diverged"
    assert copies[2]["error"].startswith("OOM when allocating 8.0 MiB for op 's/2/y'")


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
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "totals.npy"), [4.0, np.nan, np.nan, 2.0])


def test_reading_a_failed_copy_outside_the_sweep_fails_naming_it(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, outputs="  s/1/t: '-'\n")
    with pytest.raises(RunError, match=r"output 's/1/t' is a value of a sweep copy that failed \('s/1/y': "
                                       r"ValueError: lam 2 diverged\)"):
        run_file(spec, echo=lambda _: None, output_dir=str(tmp_path / "out"))
