"""The checked view of a run report: the JSON ``run --report`` writes, read into the fields the page draws.

The run report has one definition, the published JSON Schema
``schemas/run-report.schema.json`` (docs/run-report.md): ``RunReport.as_dict``
writes it (the tests validate every report their example runs write), and
this reader checks a file against it before reading a field, so that a file
that is not a run report is one clear :class:`BadRunReport` naming the file
and the first field that breaks the schema, never a traceback. Once checked,
the views below read fields without checking them again.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from typing import Any, Mapping

from ... import jsonschemas
from ...errors import OrchestratorError
from ...execute.records import RUN_REPORT_FORMAT
from .loops import LoopCurvesView, WindowView, loose as _loose, read_curve, read_loops


class BadRunReport(OrchestratorError):
    """A run report file that cannot be read, is not JSON, or is not a run report."""


@dataclass(frozen=True)
class OpView:
    """One op of the report, as the page draws it."""

    name: str
    kind: str
    device: str  # where it ran (its worker), else where it was planned
    planned_device: str
    start: float | None
    duration: float | None
    output_bytes: int | None
    runs: int | None
    why: str
    note: str

    @property
    def looped(self) -> bool:
        """A loop op: its record sums ``runs`` steps, and ``start`` is the first step's."""
        return (self.runs or 0) > 1


@dataclass(frozen=True)
class DeviceView:
    device: str
    ops: int
    planned_peak_bytes: int | None
    limit_bytes: int | None
    peak_bytes_seen: int | None
    backend: str | None


@dataclass(frozen=True)
class TransferView:
    value: str
    source: str
    target: str
    nbytes: int
    start: float
    stop: float


@dataclass(frozen=True)
class SegmentView:
    """A piece of a loop step's critical path, in time order: an op, a wait, a send, a transit or overhead."""

    device: str  # a transit's device is the receiver's
    kind: str
    name: str
    seconds: float


@dataclass(frozen=True)
class StepSplitView:
    """Where one device's step went: medians over the sampled steps of each part (so they need not add up)."""

    device: str
    step: float
    compute: tuple[tuple[str, float], ...]  # per op, in the report's order
    wait: float
    send: float
    overhead: float
    other_devices: float = 0.0  # its thread running the other devices of its process (processes: host)


@dataclass(frozen=True)
class LoopStepsView:
    """A loop's step picture (``loop_steps``): the sampled steps, each device's split, one step's critical path."""

    loop: str
    sampled_steps: tuple[int, ...]
    devices: tuple[StepSplitView, ...]
    path_step: int | None
    path_seconds: float
    segments: tuple[SegmentView, ...]


@dataclass(frozen=True)
class CopyView:
    """One copy of a sweep: where, in which wave and when it ran, how it ended, its metric curves."""

    index: int
    values: str  # its parameters in words: "lr=0.1, width=16"
    device: str
    wave: int
    start: float | None
    stop: float | None
    status: str  # finished, stopped (by the sweep's rule), failed, reused, not run
    stopped_at_step: int | None
    curves: tuple[tuple[str, tuple[float, ...], tuple[float, ...]], ...]  # (metric, steps, values: NaN for none)
    spans: tuple[tuple[float, float], ...] = ()  # when it ran, when its sweep's rule paused it between


@dataclass(frozen=True)
class DecisionView:
    """A decision of a sweep's rule: per copy (index, value at the step, best so far or NaN, kept, reference)."""

    number: int
    step: int
    median: float | None
    rows: tuple[tuple[int, float, float, bool, bool], ...]


@dataclass(frozen=True)
class SweepView:
    name: str
    rule: str  # halving, median, or "" (no rule)
    loop: str  # the body's loop its rule watches ("" without a rule)
    metric: str  # the metric of that loop it watches
    copies: tuple[CopyView, ...]
    decisions: tuple[DecisionView, ...]
    selected: int | None = None  # the copy its select chose


@dataclass(frozen=True)
class RunView:
    """The fields of a run report the page shows, checked."""

    name: str
    file: str
    run: str
    backend: str
    granularity: str
    naming: str
    naming_why: str
    elapsed: float
    startup: float  # before elapsed: the cluster's start (or connecting) until its workers were ready
    phases: tuple[tuple[str, float], ...]
    totals: Mapping[str, int]
    loops: tuple[tuple[str, str], ...]
    ops: tuple[OpView, ...]
    devices: tuple[DeviceView, ...]
    transfers: tuple[TransferView, ...]
    restarted: tuple[str, ...]
    unverified: tuple[str, ...]
    transport: str = ""  # how loop windows' values went between workers; "" in reports without gang loops
    loop_steps: tuple[LoopStepsView, ...] = ()  # none in older reports and runs without gang loops
    sweeps: tuple[SweepView, ...] = ()  # none in runs without sweeps
    windows: tuple[WindowView, ...] = ()  # gang loops' windows, per device (none in older reports)
    loop_curves: tuple[LoopCurvesView, ...] = ()  # loops' metrics outside sweep copies (none in older reports)

    def device_order(self) -> list[str]:
        """The report's devices in its order, then any device only an op or a transfer names."""
        order = [d.device for d in self.devices]
        for name in [o.device for o in self.ops] + [e for t in self.transfers for e in (t.source, t.target)]:
            if name not in order:
                order.append(name)
        return order


def read_run_report(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The JSON of a run report file; :class:`BadRunReport` when it cannot be read or parsed."""
    name = os.fspath(path)
    try:
        with open(name, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as exc:
        raise BadRunReport(f"cannot read run report {name}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise BadRunReport(f"{name} is not a run report: not UTF-8 text ({exc.reason})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadRunReport(f"{name} is not a run report: invalid JSON at line {exc.lineno} column {exc.colno}: "
                           f"{exc.msg}") from None
    if not isinstance(data, dict):
        raise BadRunReport(f"{name} is not a run report: expected a JSON object, got {_json_type(data)}")
    return data


def _json_type(value: object) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number")


class _Fields:
    """One JSON object of a report already checked against the schema: its fields, with defaults."""

    def __init__(self, data: object, where: str):
        self.data: dict[str, Any] = data if isinstance(data, dict) else {}
        self.where = where

    def text(self, key: str, default: str | None = None) -> str:
        value = self.data.get(key)
        return value if isinstance(value, str) else (default or "")

    def number(self, key: str, optional: bool = False) -> float | None:  # (every field that may be missing is)
        return None if self.data.get(key) is None else float(self.data[key])

    def count(self, key: str, optional: bool = False) -> int | None:
        return None if self.data.get(key) is None else int(self.data[key])

    def items(self, key: str, optional: bool = False) -> list[Any]:
        value = self.data.get(key)
        return value if isinstance(value, list) else []

    def mapping(self, key: str) -> _Fields:
        return _Fields(self.data.get(key), f"{self.where}.{key}" if self.where else key)


def parse_run_report(data: Mapping[str, Any], source: str = "the run report") -> RunView:
    """Check a run report's JSON against its schema and return the view the page draws; :class:`BadRunReport`
    (one line: ``source``, then the first field that breaks the schema) if it is not one."""
    problem = run_report_problem(data)
    if problem:
        raise BadRunReport(f"{source} is not a run report: {problem}")
    return _parse(_Fields(dict(data), ""))


def run_report_problem(data: object) -> str:
    """What makes ``data`` not a run report (the first violation of its schema, in words), or ``""``."""
    if not isinstance(data, Mapping):
        return f"expected a JSON object, got {_json_type(data)}"
    version = data.get("format")
    if version != RUN_REPORT_FORMAT:
        return f"'format' is {version!r}, this orchestrate reads run reports of format {RUN_REPORT_FORMAT}"
    error = next(iter(jsonschemas.validator(jsonschemas.RUN_REPORT).iter_errors(dict(data))), None)
    return "" if error is None else _in_words(error)


_KINDS: dict[str, str] = {"number": "a number", "string": "a string", "array": "an array", "object": "an object",
                          "integer": "a whole number", "boolean": "true or false", "null": "null"}


def _in_words(error: Any) -> str:
    """One violation of the run report's schema: the field's path and what it should be."""
    path = _path(error.absolute_path)
    where = f"'{path}'" if path else "the report"
    if error.validator == "required":
        missing = next(key for key in error.validator_value if key not in error.instance)
        return f"'{_path([*error.absolute_path, missing])}' is missing"
    if error.validator == "additionalProperties":
        extra = sorted(set(error.instance) - set(error.schema.get("properties", {})))
        return f"'{_path([*error.absolute_path, extra[0]])}' is not a field of a run report"
    if error.validator == "minimum":
        return f"{where} should be a whole number of at least {error.validator_value}, got {error.instance!r}"
    alternatives = list(error.context or ()) if error.validator in ("oneOf", "anyOf") else [error]
    if alternatives and all(e.validator == "type" for e in alternatives):  # of no type it may have: say them all
        kinds = [k for e in alternatives for k in (e.validator_value if isinstance(e.validator_value, list)
                                                   else [e.validator_value])]
        return f"{where} should be {' or '.join(_KINDS[k] for k in kinds)}, got {_json_type(error.instance)}"
    if alternatives and error.validator in ("oneOf", "anyOf"):  # of a type it may have, but wrong: say why
        return _in_words(next(e for e in alternatives if e.validator != "type"))
    return f"{where}: {error.message}"


def _path(parts: Any) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _loop_words(loops: _Fields, key: str) -> str:
    """How a loop ran: its mode, and where it began and ended when that was not its first and last step."""
    if isinstance(loops.data.get(key), str):  # reports written before loops carried where they began and ended
        return loops.text(key)
    loop = loops.mapping(key)
    words = [loop.text("mode")]
    resumed = loop.count("resumed_from_step") if "resumed_from_step" in loop.data else 0
    if resumed:
        words.append(f"resumed from step {resumed}")
    if loop.data.get("stop_reason", "steps") != "steps":
        words.append(f"stopped at step {loop.count('stopped_at_step')} ({loop.text('stop_reason')})")
    return "; ".join(words)


def _parse(top: _Fields) -> RunView:
    naming = top.mapping("task_names")
    totals = top.mapping("totals")
    phases = top.mapping("phases_seconds")
    loops = top.mapping("loops")
    steps = top.mapping("loop_steps")
    windows, curves = read_loops(loops.data)
    return RunView(
        name=top.text("name"), file=top.text("file", ""), run=top.text("run", ""),
        backend=top.text("backend", "unknown"), granularity=top.text("granularity", "partition"),
        naming=naming.text("naming", ""), naming_why=naming.text("why", ""),
        elapsed=top.number("elapsed_seconds") or 0.0, startup=top.number("startup_seconds", optional=True) or 0.0,
        phases=tuple((key, phases.number(key) or 0.0) for key in phases.data),
        totals={key: totals.count(key) or 0 for key in totals.data},
        loops=tuple((key, _loop_words(loops, key)) for key in loops.data),
        ops=tuple(_op(_Fields(item, f"ops[{i}]")) for i, item in enumerate(top.items("ops"))),
        devices=tuple(_device(_Fields(item, f"devices[{i}]")) for i, item in enumerate(top.items("devices"))),
        transfers=tuple(_transfer(_Fields(item, f"transfers[{i}]"))
                        for i, item in enumerate(top.items("transfers", optional=True))),
        restarted=tuple(str(d) for d in top.items("restarted_devices", optional=True)),
        unverified=tuple(str(d) for d in top.items("unverified", optional=True)),
        transport=top.text("transport", ""),
        loop_steps=tuple(_loop_steps(key, steps.mapping(key)) for key in steps.data),
        sweeps=tuple(_sweep(key, top.mapping("sweeps").mapping(key)) for key in top.mapping("sweeps").data),
        windows=windows, loop_curves=curves)


def _sweep(name: str, f: _Fields) -> SweepView:
    rule = f.mapping("rule")
    decisions = f.items("rungs" if rule.data.get("kind") == "halving" else "median", optional=True)
    return SweepView(name, rule.text("kind", ""), rule.text("loop", ""), rule.text("metric", ""),
                     tuple(_copy(_Fields(item, f"{f.where}.copies[{i}]")) for i, item in enumerate(f.items("copies"))),
                     tuple(_decision(_Fields(item, f"{f.where}.decisions[{i}]")) for i, item in enumerate(decisions)),
                     f.count("selected", optional=True))


def _copy(f: _Fields) -> CopyView:
    curves = [read_curve(item) for item in f.items("curves", optional=True)]
    values = f.mapping("params")
    return CopyView(f.count("index") or 0, ", ".join(f"{k}={v}" for k, v in values.data.items()), f.text("device"),
                    f.count("wave", optional=True) or 0, f.number("start", optional=True),
                    f.number("stop", optional=True), f.text("status", ""),
                    f.count("stopped_at_step", optional=True), tuple(curves),
                    tuple((_loose(a), _loose(b)) for a, b in f.items("spans", optional=True)))


def _decision(f: _Fields) -> DecisionView:
    rows = []
    for i, item in enumerate(f.items("copies")):
        row = _Fields(item, f"{f.where}.copies[{i}]")
        rows.append((row.count("copy") or 0, _loose(row.data.get("value")), _loose(row.data.get("best")),
                     bool(row.data.get("kept")), bool(row.data.get("reference"))))
    median = _loose(f.data.get("median"))
    return DecisionView(f.count("rung", optional=True) or f.count("decision", optional=True) or 0,
                        f.count("step") or 0, None if math.isnan(median) else median, tuple(rows))


def _op(f: _Fields) -> OpView:
    planned = f.text("planned_device")
    worker = f.data.get("worker")
    device = f.text("worker") if worker is not None else planned
    return OpView(name=f.text("name"), kind=f.text("op"), device=device, planned_device=planned,
                  start=f.number("start", optional=True), duration=f.number("duration", optional=True),
                  output_bytes=f.count("output_bytes", optional=True), runs=f.count("runs", optional=True),
                  why=f.text("why", ""), note=f.text("note", ""))


def _device(f: _Fields) -> DeviceView:
    return DeviceView(device=f.text("device"), ops=f.count("ops", optional=True) or 0,
                      planned_peak_bytes=f.count("planned_peak_bytes", optional=True),
                      limit_bytes=f.count("limit_bytes", optional=True),
                      peak_bytes_seen=f.count("peak_bytes_seen", optional=True),
                      backend=f.text("backend", "") or None)


def _transfer(f: _Fields) -> TransferView:
    return TransferView(value=f.text("value"), source=f.text("from"), target=f.text("to"),
                        nbytes=f.count("bytes") or 0, start=f.number("start") or 0.0, stop=f.number("stop") or 0.0)


def _loop_steps(loop: str, f: _Fields) -> LoopStepsView:
    path = f.mapping("critical_path")
    splits = f.mapping("devices")
    return LoopStepsView(
        loop=loop, sampled_steps=tuple(int(step) for step in f.items("sampled_steps", optional=True)),
        devices=tuple(_split(key, splits.mapping(key)) for key in splits.data),
        path_step=path.count("step", optional=True), path_seconds=path.number("seconds", optional=True) or 0.0,
        segments=tuple(_segment(_Fields(item, f"{path.where}.segments[{i}]"))
                       for i, item in enumerate(path.items("segments", optional=True))))


def _split(device: str, f: _Fields) -> StepSplitView:
    compute = f.mapping("compute")
    return StepSplitView(device=device, step=f.number("step") or 0.0,
                         compute=tuple((op, compute.number(op) or 0.0) for op in compute.data),
                         wait=f.number("wait") or 0.0, send=f.number("send") or 0.0,
                         overhead=f.number("overhead") or 0.0,
                         other_devices=f.number("other_devices", optional=True) or 0.0)


def _segment(f: _Fields) -> SegmentView:
    return SegmentView(device=f.text("device"), kind=f.text("kind"), name=f.text("name", ""),
                       seconds=f.number("seconds") or 0.0)
