"""Diagnostics as SARIF 2.1.0, the format code-scanning dashboards read (``validate --format sarif``).

One run holds every file checked: the tool (``orchestrate``) with one rule
per diagnostic code met in this run, each checked file as an artifact, and
one result per diagnostic with its level (error or warning), its message and
hint, and where it is: the file as a URI relative to the working directory
(``uriBaseId`` ``SRCROOT``, which GitHub resolves against the checkout) or,
for a file outside it, an absolute ``file:`` URI; the line and column; and
the YAML path as a logical location. The output is checked against the
official schema in ``tests/test_sarif.py``.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, metadata, version
from pathlib import Path, PurePath
from typing import Any
from urllib.parse import quote

from ..errors import Diagnostic, format_path

SARIF_VERSION = "2.1.0"
SARIF_SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
TOOL_NAME = "orchestrate"
SRCROOT = "SRCROOT"

# A short description of each diagnostic code, shown by dashboards beside the rule id. A code
# missing here still works (its description is made from its name); tests/test_sarif.py checks
# that every code the invalid corpus produces is described.
RULES: dict[str, str] = {
    # loading (orchestrator.spec.load)
    "io": "The spec file cannot be read",
    "encoding": "The spec file is not valid UTF-8 or holds a character YAML does not allow",
    "too-large": "The spec file is larger than the loader accepts",
    "not-a-mapping": "The document is not a YAML mapping",
    "duplicate-key": "A mapping has the same key twice",
    "yaml-syntax": "The YAML does not parse",
    "yaml-value": "A YAML value cannot be read",
    "yaml-tag": "A YAML tag other than the safe standard ones",
    "yaml-alias": "A YAML alias that is not allowed here",
    "yaml-alias-bomb": "YAML aliases that expand to too many nodes",
    "yaml-recursive": "A YAML alias that refers to itself",
    "yaml-too-deep": "YAML nested deeper than the loader accepts",
    "yaml-multiple-documents": "More than one YAML document in the file",
    # parameters
    "params": "A parameter declaration is invalid",
    "param-unknown": "A reference or --set names a parameter that is not declared",
    "param-no-value": "A parameter has no default and no --set",
    "param-in-text": "A list parameter is used inside text",
    "param-syntax": "A parameter reference is not well formed",
    "param-in-params": "A parameter's default or choice refers to a parameter (defaults are plain values)",
    "loop-metric": "A loop's metric is not one number per step",
    "loop-steps": "A loop that says neither its steps nor its epochs, or runs too many steps",
    "batches-rows": "Minibatched data whose rows are unknown or differ between the datasets",
    "batches-size": "A minibatch larger than the data",
    "batches-steps": "A loop's steps that do not match its epochs of minibatches",
    "loop-training": "Checkpoints, evaluations or stopping on a loop that cannot have them",
    "loop-every": "A checkpoint or evaluation interval that never comes or cuts the windows",
    "loop-stopping": "A stopping rule without an evaluation, a metric or a bound",
    "checkpoint-path": "A checkpoint folder on a file the run reads or writes, or on a file that exists",
    "checkpoint-best": "A best_only checkpoint with no metric to watch, or between the evaluations",
    "param-value": "A parameter's value does not fit where it is used",
    "param-unused": "A parameter is declared but never used",
    # the schema
    "schema-unknown-key": "A key the spec language does not have",
    "schema-required": "A required key is missing",
    "schema-type": "A value of the wrong type",
    "schema-enum": "A value that is not one of the allowed ones",
    "schema-const": "A value other than the one allowed",
    "schema-range": "A number out of its allowed range",
    "schema-name": "A name that does not follow the naming rules",
    "schema-pattern": "A value not of the form it must have (a table's .csv path, a halving's LOOP.METRIC)",
    "schema-rule": "A placement rule that is not well formed",
    "schema-empty": "A list or mapping that must not be empty",
    "schema-select": "A select that names both min and max",
    "schema-size": "A mapping with more keys than allowed",
    "schema-unique": "A list that names an item twice",
    "key-type": "A key that YAML reads as something other than text",
    # the graph
    "duplicate-name": "Two ops with the same name",
    "unknown-op": "An op type that does not exist",
    "unknown-input": "An input that names no op",
    "unknown-after": "A control dependency that names no op",
    "unknown-output": "An output that names no value",
    "unknown-state": "A loop update that names no state variable",
    "combine-unknown": "A combine that names a value the body does not define",
    "select-unknown": "A select that names a value the body does not define",
    "combine-weights": "A combine: mean whose weights (the rows of each copy's piece) cannot be known",
    "sweep-space": "A sweep's search space has no copies, repeated copies, forms that do not go together, or too many copies",
    "sweep-distribution": "A random search draws from a distribution that does not exist, or an empty one",
    "sweep-glob": "A glob that matches no file in the spec's folder, or leaves it",
    "sweep-devices": "A sweep's devices: is now spread:",
    "copy-unknown": "A ${copy.NAME} that no enclosing sweep gives a value",
    "halving": "Successive halving on a metric, loop or rungs the sweep's body does not have, or rungs between "
               "the evaluations of the evaluation metric it watches",
    "median": "A median stopping rule on a metric or loop the sweep's body does not have, with no copy to judge, "
              "no decision before the loop ends, or decisions between the evaluations it reads, or beside halving",
    "table-metric": "A sweep's table names a metric that is not one number per copy",
    "replicate-values": "A replicate's per-copy values are not one per device",
    "multi-output": "A reference to an op with several outputs that does not say which",
    "cycle": "Ops that depend on each other in a cycle",
    "op-arity": "An op with the wrong number of inputs",
    "op-input-name": "An input name the op does not have",
    "op-param": "An op parameter that is missing, unknown or invalid",
    "call-fn": "A call function that is not of the form module:function",
    "kernels": "Kernels that are not cpu or gpu",
    "shape": "Shapes or dtypes that do not fit the op",
    "shape-expression": "A dimension written as an expression that does not give a whole number of zero or more",
    "loop-update": "A loop update whose shape or dtype differs from its state",
    "graph-size": "A graph that expands to too many ops",
    "output-format": "An output whose file format is not known",
    "output-path": "An output path that is not allowed",
    "load-format": "A load path whose file format is not known",
    # the cluster
    "cluster-size": "A cluster with too many tasks or devices",
    "gpus": "A GPU count or list that is invalid",
    "gpu-memory": "A GPU memory setting that is invalid",
    "gpu-fraction": "A GPU memory fraction out of range",
    "size": "A memory size that cannot be read",
    "duration": "A duration that cannot be read",
    "not-finite": "A setting that is .nan or .inf (only an op's data may be)",
    "scheduler": "A scheduler address that is not valid",
    "gpu-backend": "A GPU backend that is not registered",
    "task-address": "A task address that is not host:port",
    # devices and placement
    "device-syntax": "A device string that does not parse",
    "device-job": "A device names a job the cluster does not have",
    "device-replica": "A device names a replica the cluster does not have",
    "device-task": "A device names a task the job does not have",
    "device-type": "A device type the task or the op does not have",
    "device-pattern": "A device pattern that matches no device",
    "round-robin": "A round_robin rule that cannot be followed",
    "strategy": "A round_robin strategy that does not exist",
    "rule-unknown-op": "A placement rule that matches an op type that does not exist",
    "rule-unused": "A placement rule that matches no op",
    "placement": "An op that cannot be placed on its device",
    "no-kernel": "An op with no kernel on any device of the cluster",
    "memory": "A device's planned peak memory over its limit, or of unknown size",
}


def rule_description(code: str) -> str:
    """The rule's short description: from ``RULES``, else made from the code (``op-arity`` -> ``Op arity``)."""
    return RULES.get(code) or code.replace("-", " ").capitalize()


def _rule_name(code: str) -> str:
    """SARIF's rule ``name`` is an identifier-like word: ``unknown-input`` -> ``UnknownInput``."""
    return "".join(part.capitalize() for part in re.split(r"[^0-9A-Za-z]+", code) if part) or "Diagnostic"


def _information_uri() -> str | None:
    """The project's home page from the installed package's metadata (``[project.urls]``), when it has one.

    No address is written into the code: a wrong one would send dashboard users astray.
    """
    try:
        meta = metadata("orchestrator")
    except PackageNotFoundError:
        return None
    for entry in meta.get_all("Project-URL") or []:
        label, _, url = str(entry).partition(",")
        if label.strip().lower() in ("homepage", "home", "source", "repository", "documentation"):
            return url.strip()
    home = str((meta.get_all("Home-page") or [""])[0]).strip()  # the older field
    return home if home and home.lower() != "unknown" else None


def _version() -> str:
    try:
        return version("orchestrator")
    except PackageNotFoundError:
        return "unknown"


def artifact_location(file: str, root: str) -> dict[str, Any]:
    """Where a checked file is: relative to ``root`` (the working directory) when inside it, else absolute."""
    absolute = os.path.normpath(os.path.join(root, file))
    relative = os.path.relpath(absolute, root)
    if relative != os.pardir and not relative.startswith(os.pardir + os.sep):
        return {"uri": quote(PurePath(relative).as_posix(), safe="/"), "uriBaseId": SRCROOT}
    return {"uri": Path(absolute).as_uri()}


def _result(d: Diagnostic, rule_index: int, artifact_index: int, location: dict[str, Any]) -> dict[str, Any]:
    message = f"{d.message} ({d.hint})" if d.hint else d.message
    where: dict[str, Any] = {"physicalLocation": {
        "artifactLocation": {**location, "index": artifact_index},
        "region": {"startLine": max(d.line, 1), "startColumn": max(d.column, 1)},
    }}
    properties: dict[str, str] = {}
    if d.path:  # a problem of the whole file (YAML syntax, a missing key at the top) has no YAML path
        where["logicalLocations"] = [{"fullyQualifiedName": format_path(d.path)}]
        properties["yamlPath"] = format_path(d.path)
    if d.hint:
        properties["hint"] = d.hint
    result: dict[str, Any] = {
        "ruleId": d.code,
        "ruleIndex": rule_index,
        "level": d.severity,  # "error" | "warning": the same words in SARIF
        "message": {"text": message},
        "locations": [where],
    }
    if properties:
        result["properties"] = properties
    return result


def diagnostics_sarif(files: Sequence[tuple[str, Sequence[Diagnostic]]], strict: bool = False,
                      root: str | None = None) -> str:
    """A SARIF 2.1.0 log of one run: every checked file an artifact, every diagnostic a result.

    ``root`` is the directory relative URIs start from (default: the working directory, where CI runs).
    Levels are the diagnostics' own; ``--strict`` changes the exit code, so it is only noted in the run's
    properties.
    """
    base = os.path.abspath(root if root is not None else os.getcwd())
    locations: list[dict[str, Any]] = []  # one artifact per file, even when it was named twice (they are unique)
    artifact_of: list[int] = []
    for file, _ in files:
        location = artifact_location(file, base)
        if location not in locations:
            locations.append(location)
        artifact_of.append(locations.index(location))
    codes = sorted({d.code for _, diags in files for d in diags})
    rule_index = {code: i for i, code in enumerate(codes)}
    results = [_result(d, rule_index[d.code], artifact_of[i], locations[artifact_of[i]])
               for i, (_, diags) in enumerate(files) for d in diags]
    driver: dict[str, Any] = {"name": TOOL_NAME, "version": _version()}
    uri = _information_uri()
    if uri:
        driver["informationUri"] = uri
    driver["rules"] = [{"id": code, "name": _rule_name(code), "shortDescription": {"text": rule_description(code)}}
                       for code in codes]
    log = {
        "$schema": SARIF_SCHEMA,
        "version": SARIF_VERSION,
        "runs": [{
            "tool": {"driver": driver},
            "originalUriBaseIds": {SRCROOT: {"uri": Path(base).as_uri().rstrip("/") + "/"}},
            "artifacts": [{"location": location} for location in locations],
            "columnKind": "unicodeCodePoints",  # the loader counts columns in characters
            "results": results,
            "properties": {"strict": strict},
        }],
    }
    return json.dumps(log, indent=2) + "\n"
