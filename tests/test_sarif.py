"""Tests of ``orchestrate validate --format sarif``: SARIF 2.1.0 for code-scanning dashboards.

Every log is checked against ``SARIF_SUBSET``: the constraints of the SARIF 2.1.0 schema on every
object and property this tool writes (required properties, enums, bounds), written here from the OASIS
specification. The official schema (sarif-schema-2.1.0.json, errata 01) is not shipped with the
repository; set ``SARIF_SCHEMA=/path/to/sarif-schema-2.1.0.json`` and the same logs are validated
against it too (it was, when this format was written: the whole corpus, no error). The CLI runs in-process.
"""

from __future__ import annotations

import email.message
import io
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from orchestrator.report import sarif as report_sarif
from orchestrator.cli import run_cli

ROOT = Path(__file__).resolve().parent.parent
_ID = {"type": "string", "minLength": 1}
_LOCATION = {"type": "object", "required": ["physicalLocation"], "properties": {
    "physicalLocation": {"type": "object", "required": ["artifactLocation", "region"], "properties": {
        "artifactLocation": {"type": "object", "required": ["uri"], "properties": {
            "uri": {"type": "string", "format": "uri-reference"}, "uriBaseId": _ID, "index": {"type": "integer",
                                                                                          "minimum": -1}}},
        "region": {"type": "object", "required": ["startLine", "startColumn"], "properties": {
            "startLine": {"type": "integer", "minimum": 1}, "startColumn": {"type": "integer", "minimum": 1}}}}},
    "logicalLocations": {"type": "array", "items": {"type": "object", "properties": {
        "fullyQualifiedName": {"type": "string"}, "kind": {"type": "string"}}}}}}
SARIF_SUBSET: dict[str, Any] = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "type": "object", "required": ["version", "runs"],
    "properties": {
        "version": {"const": "2.1.0"}, "$schema": {"type": "string", "format": "uri"},
        "runs": {"type": "array", "minItems": 1, "items": {
            "type": "object", "required": ["tool"], "properties": {
                "tool": {"type": "object", "required": ["driver"], "properties": {"driver": {
                    "type": "object", "required": ["name"], "properties": {
                        "name": _ID, "version": {"type": "string"}, "informationUri": {"type": "string",
                                                                                        "format": "uri"},
                        "rules": {"type": "array", "uniqueItems": True, "items": {
                            "type": "object", "required": ["id"], "properties": {
                                "id": _ID, "shortDescription": {"type": "object", "required": ["text"]},
                                "defaultConfiguration": {"type": "object", "properties": {
                                    "level": {"enum": ["none", "note", "warning", "error"]}}}}}}}}}},
                "artifacts": {"type": "array", "items": {"type": "object", "properties": {
                    "location": {"type": "object", "required": ["uri"]}}}},
                "results": {"type": "array", "items": {
                    "type": "object", "required": ["message"], "properties": {
                        "ruleId": _ID, "ruleIndex": {"type": "integer", "minimum": -1},
                        "level": {"enum": ["none", "note", "warning", "error"]},
                        "kind": {"enum": ["notApplicable", "pass", "fail", "review", "open", "informational"]},
                        "message": {"type": "object", "required": ["text"], "properties": {"text": _ID}},
                        "locations": {"type": "array", "minItems": 0, "items": _LOCATION}}}}}}}}}
_OFFICIAL = os.environ.get("SARIF_SCHEMA")
SCHEMA: dict[str, Any] = json.loads(Path(_OFFICIAL).read_text(encoding="utf-8")) if _OFFICIAL else SARIF_SUBSET
INVALID = sorted((ROOT / "specs" / "invalid").glob("*.yaml"))

# a warning only: a call of unknown output size on a device whose limit the user set
WARNING_ONLY = """\
    version: 1
    cluster:
      jobs:
        localhost: {memory_limit: 1GiB}
    graph:
      - {name: f, op: call, fn: mypkg.mod:f}
    """


def validate(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    code = run_cli(["validate", *args], out=out)
    return code, out.getvalue()


def sarif(*args: str) -> tuple[int, dict[str, Any]]:
    code, text = validate(*args, "--format", "sarif")
    log: dict[str, Any] = json.loads(text)
    return code, log


def check_against_schema(log: dict[str, Any]) -> None:
    validator_class = jsonschema.validators.validator_for(SCHEMA)
    validator_class.check_schema(SCHEMA)
    validator = validator_class(SCHEMA, format_checker=validator_class.FORMAT_CHECKER)
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(log)]
    assert not errors, errors[:5]


@pytest.mark.skipif(not _OFFICIAL, reason="set SARIF_SCHEMA to the official sarif-schema-2.1.0.json to check it")
def test_the_given_schema_is_the_official_one() -> None:
    assert SCHEMA["id"] == "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
    assert SCHEMA["properties"]["version"]["enum"] == ["2.1.0"]
    assert {"run", "result", "reportingDescriptor", "physicalLocation", "region"} <= set(SCHEMA["definitions"])


def test_many_files_are_one_run_that_validates_against_the_sarif_schema(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole invalid corpus, two valid specs and one with a warning: one run, every diagnostic a result."""
    monkeypatch.chdir(ROOT)
    warning = tmp_path / "warning.yaml"
    warning.write_text(textwrap.dedent(WARNING_ONLY), encoding="utf-8")
    files = [str(p.relative_to(ROOT)) for p in INVALID] + ["specs/valid/matmul.yaml", "examples/towers.yaml",
                                                           str(warning)]
    code, log = sarif(*files)
    assert code == 1
    check_against_schema(log)
    assert (log["version"], log["$schema"]) == ("2.1.0", report_sarif.SARIF_SCHEMA)
    (run,) = log["runs"]
    _, text = validate(*files, "--format", "json")
    diagnostics = [d for f in json.loads(text)["files"] for d in f["diagnostics"]]
    assert len(run["results"]) == len(diagnostics) > len(INVALID)
    assert len(run["artifacts"]) == len(files)
    levels = {r["level"] for r in run["results"]}
    assert levels == {"error", "warning"}


def test_each_result_is_its_diagnostic_with_a_rule_per_code(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    files = [str(p.relative_to(ROOT)) for p in INVALID[:60]]
    _, log = sarif(*files)
    _, text = validate(*files, "--format", "json")
    diagnostics = [d for f in json.loads(text)["files"] for d in f["diagnostics"]]
    (run,) = log["runs"]
    rules = run["tool"]["driver"]["rules"]
    assert [r["id"] for r in rules] == sorted({d["code"] for d in diagnostics})  # one rule per code, no more
    assert all(r["shortDescription"]["text"] and r["name"].isalnum() for r in rules)
    for result, d in zip(run["results"], diagnostics, strict=True):
        assert (result["ruleId"], result["level"]) == (d["code"], d["severity"])
        assert rules[result["ruleIndex"]]["id"] == d["code"]
        (where,) = result["locations"]
        location = where["physicalLocation"]
        assert location["artifactLocation"]["uri"] == d["file"]  # relative to the working directory
        assert run["artifacts"][location["artifactLocation"]["index"]]["location"]["uri"] == d["file"]
        assert location["region"] == {"startLine": d["line"], "startColumn": d["column"]}
        message = result["message"]["text"]
        assert message == (f"{d['message']} ({d['hint']})" if d["hint"] else d["message"])
        assert result.get("properties", {}).get("hint", "") == d["hint"]


def test_one_result_in_full(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = tmp_path / "bad.yaml"
    text = (ROOT / "specs" / "valid" / "matmul.yaml").read_text(encoding="utf-8")
    spec.write_text(text.replace("inputs: [a, b]", "inputs: [a, bb]"), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    code, log = sarif("bad.yaml")
    assert code == 1
    (run,) = log["runs"]
    assert run["tool"]["driver"]["rules"] == [
        {"id": "unknown-input", "name": "UnknownInput", "shortDescription": {"text": "An input that names no op"}}]
    assert run["originalUriBaseIds"] == {"SRCROOT": {"uri": tmp_path.as_uri() + "/"}}
    assert run["artifacts"] == [{"location": {"uri": "bad.yaml", "uriBaseId": "SRCROOT"}}]
    assert run["results"] == [{
        "ruleId": "unknown-input",
        "ruleIndex": 0,
        "level": "error",
        "message": {"text": "input 'bb' of op 'c' is not defined (did you mean 'b'?)"},
        "locations": [{
            "physicalLocation": {
                "artifactLocation": {"uri": "bad.yaml", "uriBaseId": "SRCROOT", "index": 0},
                "region": {"startLine": 12, "startColumn": 39},
            },
            "logicalLocations": [{"fullyQualifiedName": "graph[2].inputs[1]"}],
        }],
        "properties": {"yamlPath": "graph[2].inputs[1]", "hint": "did you mean 'b'?"},
    }]


def test_uris_are_relative_inside_the_working_directory_and_absolute_outside(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    inside, outside = tmp_path / "repo", tmp_path / "elsewhere"
    (inside / "my specs").mkdir(parents=True)
    outside.mkdir()
    for target in (inside / "my specs" / "a.yaml", outside / "b.yaml"):
        target.write_text(textwrap.dedent(WARNING_ONLY), encoding="utf-8")
    monkeypatch.chdir(inside)
    # the same file named twice (absolute and relative) is one artifact
    _, log = sarif(str(inside / "my specs" / "a.yaml"), "./my specs/a.yaml", str(outside / "b.yaml"))
    check_against_schema(log)
    (run,) = log["runs"]
    assert run["artifacts"] == [{"location": {"uri": "my%20specs/a.yaml", "uriBaseId": "SRCROOT"}},
                                {"location": {"uri": (outside / "b.yaml").as_uri()}}]
    assert [r["locations"][0]["physicalLocation"]["artifactLocation"]["index"] for r in run["results"]] == [0, 0, 1]


@pytest.mark.parametrize("spec, strict, expected", [
    ("specs/valid/matmul.yaml", False, 0),
    ("specs/invalid/20-cycle-2.yaml", False, 1),
    ("warning.yaml", False, 0),
    ("warning.yaml", True, 1),
])
def test_exit_codes_are_those_of_the_other_formats(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spec: str,
                                                   strict: bool, expected: int) -> None:
    (tmp_path / "warning.yaml").write_text(textwrap.dedent(WARNING_ONLY), encoding="utf-8")
    path = str(tmp_path / spec) if spec == "warning.yaml" else str(ROOT / spec)
    flags = ["--strict"] if strict else []
    codes = {fmt: validate(path, "--format", fmt, *flags)[0] for fmt in ("text", "json", "github", "sarif")}
    assert codes == dict.fromkeys(codes, expected)
    _, log = sarif(path, *flags)
    assert log["runs"][0]["properties"] == {"strict": strict}
    check_against_schema(log)


def test_every_code_of_the_invalid_corpus_has_a_short_description() -> None:
    """A new diagnostic code needs its line in RULES (orchestrator/report/sarif.py); the fallback is a stopgap."""
    _, text = validate(*map(str, INVALID), "--format", "json")
    codes = {d["code"] for f in json.loads(text)["files"] for d in f["diagnostics"]}
    assert len(codes) > 40
    assert sorted(codes - set(report_sarif.RULES)) == []
    assert report_sarif.rule_description("some-new-code") == "Some new code"


def test_information_uri_comes_from_the_package_metadata(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = ROOT / "specs" / "valid" / "matmul.yaml"
    with_urls = email.message.Message()
    with_urls["Name"] = "orchestrator"
    with_urls["Project-URL"] = "Homepage, https://example.org/orchestrator"
    monkeypatch.setattr(report_sarif, "metadata", lambda name: with_urls)
    _, log = sarif(str(spec))
    assert log["runs"][0]["tool"]["driver"]["informationUri"] == "https://example.org/orchestrator"
    check_against_schema(log)
    monkeypatch.setattr(report_sarif, "metadata", lambda name: email.message.Message())
    _, log = sarif(str(spec))
    assert "informationUri" not in log["runs"][0]["tool"]["driver"]  # never a made-up address


def test_sarif_imports_neither_distributed_nor_user_code(tmp_path: Path) -> None:
    for name in ("polyfit.yaml", "polyfit_fns.py"):
        shutil.copy(ROOT / "examples" / name, tmp_path / name)
    probe = ("import io, sys\nfrom orchestrator.cli import run_cli\n"
             "code = run_cli(['validate', 'polyfit.yaml', '--format', 'sarif'], out=io.StringIO())\n"
             "print(code, sorted({m.split('.')[0] for m in sys.modules} & {'distributed', 'tornado', 'polyfit_fns'}))")
    done = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "0 []"


def test_the_schema_check_refuses_a_wrong_level_and_a_line_of_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check above can fail: a log with a level SARIF does not have, or a line 0, is refused."""
    monkeypatch.chdir(ROOT)
    _, log = sarif(str(INVALID[0].relative_to(ROOT)))
    check_against_schema(log)
    for damage in ("level", "line"):
        broken = json.loads(json.dumps(log))
        result = broken["runs"][0]["results"][0]
        if damage == "level":
            result["level"] = "fatal"
        else:
            result["locations"][0]["physicalLocation"]["region"]["startLine"] = 0
        with pytest.raises(AssertionError):
            check_against_schema(broken)
