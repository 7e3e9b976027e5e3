"""The run report has one definition, the published ``schemas/run-report.schema.json``: every report the
example runs write validates against it, the records' writer fills every field it defines, and
``orchestrate report`` refuses a file that breaks it with one line naming the file."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from orchestrator.cli import run_cli
from orchestrator.execute.records import (RUN_REPORT_FORMAT, DeviceLoss, DeviceRecord, OpRecord, RunReport, RunTotals,
                                          TransferRecord)
from orchestrator.spec.records import Param

ROOT = Path(__file__).resolve().parent.parent
PUBLISHED = ROOT / "schemas" / "run-report.schema.json"
EXAMPLES = ROOT / "examples"


def _problems(report: Any) -> list[str]:
    schema = json.loads(PUBLISHED.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    return [f"{list(e.absolute_path)}: {e.message}" for e in jsonschema.Draft202012Validator(schema).iter_errors(report)]


@pytest.mark.cluster
@pytest.mark.parametrize("example, sets", [
    ("quickstart.yaml", []),
    ("sweep.yaml", []),
    ("search.yaml", []),
    ("polyfit.yaml", ["--set", "steps=200"]),  # a gang loop: loops, loop_steps, transport, params
])
def test_every_report_an_example_run_writes_fits_the_published_schema(example: str, sets: list[str],
                                                                      tmp_path: Path) -> None:
    written = tmp_path / "run.json"
    args = ["run", str(EXAMPLES / example), "--report", str(written), "--output-dir", str(tmp_path / "out"), *sets]
    assert run_cli(args, out=io.StringIO()) == 0
    report = json.loads(written.read_text(encoding="utf-8"))
    assert _problems(report) == []
    if example == "polyfit.yaml":
        assert report["loop_steps"] and report["loops"] and report["params"]
    if example in ("sweep.yaml", "search.yaml"):
        assert report["sweeps"]
    out = io.StringIO()
    assert run_cli(["report", str(written), "--html", str(tmp_path / "run.html")], out=out) == 0  # read back


def test_the_writer_fills_every_field_the_schema_defines_and_nothing_else() -> None:
    cpu = "/job:localhost/replica:0/task:0/device:CPU:0"
    report = RunReport(
        name="n", file="n.yaml", run="r", backend="simulated", task_names=("op", "few ops"), elapsed_seconds=1.5,
        ops=(OpRecord("a", "ones", cpu, cpu, 1.0, 0.1, 8, 0, 1, "default", end=1.1, note="n", cache="reused",
                      error="boom"),
             OpRecord("b", "ones", cpu, None, None, None, None, 0, None, "default")),
        devices=(DeviceRecord(cpu, 2, 16, None, None, "host"),), totals=RunTotals(2, 2, 0, 0, 0),
        restarted_devices=(cpu,), unverified=("a",), phases_seconds={"compute": 1.0},
        loops={"l": {"mode": "gang", "resumed_from_step": 0, "stopped_at_step": 4, "stop_reason": "steps",
                     "steps_run": 4, "spans": [[1.0, 2.0]]}},
        transfers=(TransferRecord("a", cpu, cpu, 8, 1.0, 1.1),), params=(Param("lr", "number", 0.1, "default"),),
        losses=(DeviceLoss(cpu, 0.5, ("a",), 1, 2, "l", (3, 4), "re-planned without it", 123,
                           {"without": [cpu], "diff": None, "resumed_from_step": {"l": 2}, "steps_redone": {"l": 1},
                            "seconds": 2.5, "back": {"step": 4, "seconds": 3.0}}),))
    data = report.as_dict()
    assert _problems(data) == []
    schema = json.loads(PUBLISHED.read_text(encoding="utf-8"))
    assert set(data) == set(schema["properties"])  # the writer and the schema name the same fields
    assert schema["properties"]["format"]["const"] == data["format"] == RUN_REPORT_FORMAT
    for record, name in ((data["ops"][0], "op"), (data["devices"][0], "device"), (data["totals"], "totals"),
                         (data["transfers"][0], "transfer"), (data["losses"][0], "loss"), (data["params"][0], "param"),
                         (data["losses"][0]["replan"], "replan")):
        assert set(record) == set(schema["$defs"][name]["properties"]), name


def _good() -> dict[str, Any]:
    cpu = "/job:localhost/replica:0/task:0/device:CPU:0"
    return {"format": 1, "name": "x", "elapsed_seconds": 1.0, "totals": {"ops": 1},
            "devices": [{"device": cpu, "ops": 1}],
            "ops": [{"name": "a", "op": "ones", "planned_device": cpu, "worker": cpu, "output_bytes": 8}]}


@pytest.mark.parametrize("change, says", [
    (lambda r: r["ops"][0].update(output_bytes="8"), "'ops[0].output_bytes' should be a whole number or null, got a string"),
    (lambda r: r["ops"][0].update(output_bytes=-8), "'ops[0].output_bytes' should be a whole number of at least 0, got -8"),
    (lambda r: r["totals"].update(ops=[1]), "'totals.ops' should be a whole number, got an array"),
    (lambda r: r.update(elapsed="1 s"), "'elapsed' is not a field of a run report"),
    (lambda r: r["devices"][0].pop("device"), "'devices[0].device' is missing"),
    (lambda r: r.update(loops={"train": 3}), "'loops.train' should be a string or an object, got a number"),
    (lambda r: r.update(granularity="task"), "'granularity': 'task' is not one of ['partition', 'op']"),
])
def test_a_report_that_breaks_the_schema_is_refused_in_one_line_naming_the_file(
        change: Any, says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = tmp_path / "good.json"
    good.write_text(json.dumps(_good()))
    assert _problems(_good()) == [] and run_cli(["report", str(good)], out=io.StringIO()) == 0
    data = _good()
    change(data)
    assert _problems(data)  # the published schema says no too
    bad = tmp_path / "run.json"
    bad.write_text(json.dumps(data))
    assert run_cli(["report", str(bad)], out=io.StringIO()) == 1
    err = capsys.readouterr().err
    assert err == f"error: {bad} is not a run report: {says}\n", err
    assert not (tmp_path / "run.html").exists()
