"""No command writes two things to one path, or over a file it reads (orchestrator.paths and its uses).

Once: ``run --report P`` with P an output overwrote the output with the
report, and ``report R.json --html R.json`` overwrote the report it rendered.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import time
from pathlib import Path

import numpy as np
import pytest

from orchestrator.cli import run_cli
from orchestrator.paths import PathUse, clashes

ROOT = Path(__file__).resolve().parent.parent
QUICKSTART = ROOT / "examples" / "quickstart.yaml"


def cli(*args: str) -> tuple[int, str, str]:
    import contextlib

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err):
        code = run_cli(list(args), out=out)
    return code, out.getvalue(), err.getvalue()


# --------------------------------------------------------------------------- clashes


def test_two_writes_to_one_path_clash_however_it_is_spelled(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    same = [PathUse(str(tmp_path / "a.json"), "the report"), PathUse(str(tmp_path / "sub" / ".." / "a.json"), "x")]
    assert clashes([], same) == [f"x and the report would both be written to {tmp_path}/sub/../a.json: "
                                 "give them different paths"]
    assert clashes([], [PathUse(str(tmp_path / "a"), "a"), PathUse(str(tmp_path / "b"), "b")]) == []


def test_a_write_over_a_file_read_clashes_through_links(tmp_path: Path) -> None:
    data = tmp_path / "data.npy"
    data.write_bytes(b"x")
    (tmp_path / "soft.npy").symlink_to(data)
    os.link(data, tmp_path / "hard.npy")
    reads = [PathUse(str(data), "the file op 'x' loads")]
    for name in ("data.npy", "soft.npy", "hard.npy"):
        problems = clashes(reads, [PathUse(str(tmp_path / name), "output 'y'")])
        assert problems == [f"output 'y' would be written over {tmp_path / name}, which is the file op 'x' loads: "
                            "write it somewhere else"], name


# --------------------------------------------------------------------------- run


def _quickstart(tmp_path: Path) -> Path:
    spec = tmp_path / "quickstart.yaml"
    shutil.copy(QUICKSTART, spec)
    return spec


def test_run_refuses_a_report_on_an_output_before_anything_runs(tmp_path: Path) -> None:
    spec = _quickstart(tmp_path)
    output = tmp_path / "results" / "quickstart.npy"  # the example's output
    output.parent.mkdir()
    np.save(output, np.arange(3.0))
    before = output.read_bytes()
    started = time.monotonic()
    code, out, err = cli("run", str(spec), "--report", str(output), "--no-progress")
    assert code == 1
    assert err == (f"error: the run report (--report) and output 'd' would both be written to {output}: "
                   "give them different paths\n")
    assert err.count("\n") == 1 and "running" not in out  # one line; no cluster was started
    assert time.monotonic() - started < 10
    assert output.read_bytes() == before


def test_run_refuses_a_report_over_the_spec_and_two_reports_on_one_path(tmp_path: Path) -> None:
    spec = _quickstart(tmp_path)
    text = spec.read_text()
    code, _, err = cli("run", str(spec), "--report", str(spec), "--no-progress")
    assert code == 1 and f"the run report (--report) would be written over {spec}, which is the spec itself" in err
    assert spec.read_text() == text
    both = tmp_path / "r.json"
    code, _, err = cli("run", str(spec), "--report", str(both), "--performance-report", str(both), "--no-progress")
    assert code == 1
    assert ("the performance report (--performance-report) and the run report (--report) would both be written "
            f"to {both}") in err
    assert not both.exists()


def test_a_relative_output_dir_is_taken_from_the_current_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As --report and --cache-dir are: it was taken from the spec's folder, so a run from elsewhere wrote its
    outputs beside the spec (the wheel check's ``--output-dir .`` wrote into examples/)."""
    (tmp_path / "specs").mkdir()
    spec = _quickstart(tmp_path / "specs")
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    code, out, err = cli("run", str(spec), "--output-dir", "out", "--no-progress")
    assert code == 0, err
    assert np.load(here / "out" / "results" / "quickstart.npy").size > 0
    assert not (tmp_path / "specs" / "out").exists()


# --------------------------------------------------------------------------- report and plan


def test_report_refuses_a_page_over_the_report_it_reads(tmp_path: Path) -> None:
    report = tmp_path / "run.json"
    report.write_text(json.dumps({"format": 1}))
    before = report.read_text()
    code, out, err = cli("report", str(report), "--html", str(report))
    assert code == 2
    assert err == (f"orchestrate report: the page (--html) would be written over {report}, "
                   "which is the run report it reads: write it somewhere else\n")
    assert report.read_text() == before and out == ""


def test_plan_refuses_a_graph_over_the_spec(tmp_path: Path) -> None:
    spec = _quickstart(tmp_path)
    text = spec.read_text()
    code, _, err = cli("plan", str(spec), "--dot", str(spec))
    assert code == 2 and "orchestrate plan: the graph (--dot) would be written over" in err
    assert spec.read_text() == text
    old = tmp_path / "old.yaml"
    shutil.copy(QUICKSTART, old)
    code, _, err = cli("plan", str(spec), "--diff", str(old), "--dot", str(old))
    assert code == 2 and "which is the spec it is compared with" in err
    assert old.read_text() == text
