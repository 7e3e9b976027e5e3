"""Validation: JSON Schema first, then semantic checks; every diagnostic is collected.

The schema check has a fast path: a compiled validator (fastjsonschema)
accepts a valid document in a small fraction of YAML parsing time; only when
it rejects do we run ``jsonschema`` to collect *every* violation with its
path. Semantic checks follow only on schema-valid documents, because they
assume the shapes the schema guarantees. They never import user code.

Order of checks: cluster (sizes, GPUs), placement (default, rules), graph
expansion (constructs), then on the flat graph: op types and parameters,
unique names, references (with did-you-mean), cycles (shown as a path),
shapes, devices against the cluster, outputs, and rules that match nothing.
"""

from __future__ import annotations

import json
import os
import re
from functools import lru_cache
from importlib import resources
from typing import Any, Iterable, Mapping, Sequence

from dask.utils import parse_bytes

from .devices import DeviceSpec
from .errors import DeviceSpecError, Diagnostic, YamlPath, format_bytes
from .expand import did_you_mean, expand, parse_ref
from .model import (Cluster, Device, Document, GpuMemory, Job, Op, OpRef, Output, PlacementConfig,
                    Rule, RunOptions, Spec, Tls, ValueInfo)
from .ops import ShapeError, infer, kernels_of, lookup, user_op_names

FN_PATTERN = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*$")
OUTPUT_SUFFIXES = (".npy", ".npz", ".csv")

MAX_DEVICES = 10_000
"""Bound on the devices a cluster may have (one Dask worker each); ``tasks: 10**9`` is a slip."""

_CLUSTER_SIZE_HINT = ("every device, a task's CPU:0 or one of its GPUs, is a Dask worker; "
                      "check tasks, gpus and virtual_gpus")

MAX_SIZE = 2**63 - 1
"""The largest memory size (and array size in bytes) anything downstream can hold: NumPy's and Dask's limit."""


# --------------------------------------------------------------------------- schema


@lru_cache(maxsize=1)
def schema_text() -> str:
    return resources.files("orchestrator.schemas").joinpath("spec.schema.json").read_text(encoding="utf-8")


@lru_cache(maxsize=1)
def schema() -> dict[str, Any]:
    return json.loads(schema_text())


@lru_cache(maxsize=1)
def _fast_validators() -> tuple[Any, dict[str, Any]]:
    """Compiled validators: the document without its graph items, and one per item kind.

    Dispatching items by kind here, as the schema's if/then does, avoids the
    exceptions fastjsonschema raises inside every failed ``if`` — 9 per op.
    """
    import copy

    import fastjsonschema

    # fastjsonschema rewrites the $refs of the schema it compiles in place (to absolute URIs):
    # compile a copy, so that schema() stays the file's schema for every other reader.
    full = copy.deepcopy(schema())
    defs = full["$defs"]
    top = {**full, "properties": {**full["properties"], "graph": {"type": "array", "minItems": 1}}}
    kinds = {kind: fastjsonschema.compile({"$schema": full["$schema"], "$defs": defs, **defs[kind]})
             for kind in ("op", "scope", "replicate", "iterate", "sweep")}
    return fastjsonschema.compile(top), kinds


def _fast_valid(data: Any) -> bool:
    """True only when the whole document is schema-valid (never a false yes)."""
    import fastjsonschema

    top, kinds = _fast_validators()
    try:
        top(data)
        for item in data["graph"]:
            if not isinstance(item, dict):
                return False
            kind = next((k for k in ("scope", "replicate", "iterate", "sweep") if k in item), "op")
            kinds[kind](item)
    except fastjsonschema.JsonSchemaException:
        return False
    return True


def check_schema(doc: Document) -> list[Diagnostic]:
    """Every schema violation, or ``[]``; fast when the document is valid."""
    if _fast_valid(doc.data):
        return []
    import jsonschema

    validator = jsonschema.Draft202012Validator(schema())
    found: dict[tuple[YamlPath, str], Diagnostic] = {}
    for error in validator.iter_errors(doc.data):
        for leaf in _leaves(error):
            diag = _schema_diagnostic(doc, leaf)
            found.setdefault((diag.path, diag.message), diag)
    return sorted(found.values(), key=lambda d: (d.line, d.column, d.message))


def _leaves(error: Any) -> Iterable[Any]:
    """The most specific errors: if/then and allOf wrap the one that matters.

    For ``anyOf``/``oneOf``, a branch whose *type* does not fit says nothing
    (``tasks: 0`` is an integer, so the list branch's complaint is noise);
    the deepest remaining complaints are kept. When every branch fails on
    type alone, the alternative itself is the one error ("expected an
    integer or a list"), not one error per branch.
    """
    if error.context and error.validator in ("anyOf", "oneOf") and error.validator_value and \
            not all(isinstance(v, dict) and set(v) == {"required"} for v in error.validator_value):
        depth = len(error.absolute_path)
        best = [e for e in error.context
                if not (e.validator in ("type", "const") and len(e.absolute_path) == depth)]
        if not best:
            yield error
            return
        deepest = max(len(e.absolute_path) for e in best)
        for leaf in best:
            if len(leaf.absolute_path) == deepest and leaf.validator != "anyOf":
                yield from _leaves(leaf)
        return
    yield error


def _schema_diagnostic(doc: Document, error: Any) -> Diagnostic:
    path = tuple(error.absolute_path)
    v, value = error.validator, error.validator_value
    if v == "additionalProperties" and isinstance(error.instance, dict):
        allowed = sorted((error.schema.get("properties") or {}).keys())
        extra = [k for k in error.instance if k not in allowed]
        key = extra[0] if extra else ""
        hint = did_you_mean(str(key), allowed) or (f"allowed keys: {', '.join(allowed)}" if allowed else "")
        return doc.diagnostic("schema-unknown-key", (*path, key), f"unknown key '{key}'", hint, key=True)
    last = str(path[-1]) if path else ""
    if len(path) >= 2 and path[-2] in ("combine", "kernels", "shape", "visible_gpus"):
        last = str(path[-2])  # an entry of a mapping or list: the hint belongs to its parent
    if v == "required":
        missing = error.message.split("'")[1] if "'" in error.message else str(value)
        return doc.diagnostic("schema-required", path, f"missing required key '{missing}'",
                              _required_hint(missing))
    if v == "enum":
        options = ", ".join(map(str, value))
        hint = did_you_mean(str(error.instance), [str(o) for o in value]) or _ENUM_HINTS.get(last, "")
        return doc.diagnostic("schema-enum", path, f"{_show(error.instance)} is not one of: {options}", hint)
    if v == "const":
        return doc.diagnostic("schema-const", path, f"must be {_show(value)}, not {_show(error.instance)}",
                              "this tool reads version 1 specs" if path == ("version",) else "")
    if v == "type":
        return doc.diagnostic("schema-type", path, f"expected {_type_name(value)}, got {_type_name_of(error.instance)}",
                              _type_hint(path))
    if v == "pattern" and path and path[-1] == "name":
        return doc.diagnostic("schema-name", path, f"invalid op name {_show(error.instance)}",
                              "names use letters, digits, _ . -; '/' and ':' are reserved")
    if v == "pattern":
        # Only job names have a pattern besides op names; propertyNames reports the
        # mapping's path, so point at the offending key itself.
        return doc.diagnostic("schema-name", (*path, str(error.instance)), f"invalid job name {_show(error.instance)}",
                              "job names use letters, digits, _ and -, and start with a letter or _", key=True)
    if v == "minimum":
        return doc.diagnostic("schema-range", path, f"must be at least {value}, got {_show(error.instance)}",
                              _RANGE_HINTS.get(last, ""))
    if v == "exclusiveMinimum":
        return doc.diagnostic("schema-range", path, f"must be greater than {value}, got {_show(error.instance)}",
                              _RANGE_HINTS.get(last, ""))
    if v in ("minItems", "minProperties", "minLength"):
        return doc.diagnostic("schema-empty", path, "must not be empty", _EMPTY_HINTS.get(last, ""))
    if v == "maxProperties" and last == "select":
        return doc.diagnostic("schema-select", path, "select takes one of min or max, not both",
                              "e.g. select: {min: loss}")
    if v == "maxProperties":
        return doc.diagnostic("schema-size", path, f"must have at most {value} key{'s' if value != 1 else ''}", "")
    if v == "uniqueItems":
        return doc.diagnostic("schema-unique", path, "must not list an item twice",
                              "each GPU ordinal once" if last == "visible_gpus" else "remove the repeated item")
    if v == "oneOf" and isinstance(error.instance, dict) and "match" in error.instance:
        return doc.diagnostic("schema-rule", path, "a rule needs exactly one of 'device' or 'round_robin'",
                              "e.g. {match: {op: variable}, round_robin: /job:ps}")
    if v in ("anyOf", "oneOf"):
        return doc.diagnostic("schema-type", path,
                              f"expected {_alternatives(value)}, got {_type_name_of(error.instance)}", _type_hint(path))
    return doc.diagnostic(f"schema-{v}", path, error.message, "")


# Hints for schema complaints, by the key at fault.
_ENUM_HINTS = {
    "gpu_backend": "cupy runs on CUDA GPUs, simulated anywhere; auto picks one",
    "combine": "add_n sums the copies, mean averages them, concat joins them along axis 0",
    "by": "count takes tasks in turn, bytes balances inferred sizes",
    "init": "or give value: [...] instead",
    "format": "or leave it out to use the file's extension",
    "kernels": "cpu or gpu",
}
_RANGE_HINTS = {
    "gpus": "a job without GPUs has gpus: 0, the default",
    "shape": "dimensions are counts: 0 or more",
    "visible_gpus": "CUDA ordinals start at 0",
    "tasks": "a job has at least one task",
    "virtual_gpus": "1 (the default) means no splitting",
    "cpu_threads": "at least 1 thread",
    "retries": "0 means no retries",
    "steps": "an iterate runs at least one step",
    "num": "split into at least one piece",
    "outputs": "a call returns at least one value",
    "timeout": "seconds, e.g. 30",
    "no_workers_timeout": "seconds, e.g. 5",
}
_EMPTY_HINTS = {
    "graph": "add at least one op", "body": "add at least one op", "ops": "add at least one op",
    "state": "e.g. state: {w: w0}", "update": "e.g. update: {w: w_next}", "match": "e.g. match: {op: variable}",
    "jobs": "e.g. jobs: {localhost: {gpus: 1}}, or leave cluster out", "devices": "e.g. devices: [/gpu:0, /gpu:1]",
    "values": "e.g. values: [0.1, 0.01]",
}


def _show(value: Any) -> str:
    """A value as the user wrote it in YAML: 'text', 12, true, null, [1, 2]."""
    if isinstance(value, str):
        return f"'{value}'"
    return _short(value)


def _alternatives(branches: Any) -> str:
    """``an integer or a list`` from anyOf branches (their ``type`` or ``const``)."""
    names: list[str] = []
    for branch in branches if isinstance(branches, list) else []:
        if isinstance(branch, dict) and "type" in branch:
            name = _type_name(branch["type"])
        elif isinstance(branch, dict) and "const" in branch:
            name = _show(branch["const"])
        else:
            continue
        if name not in names:
            names.append(name)
    return " or ".join(names) or "another kind of value"


def _short(value: Any) -> str:
    text = json.dumps(value, default=str, separators=(", ", ": "))
    return text if len(text) <= 40 else text[:37] + "..."


def _type_name(value: Any) -> str:
    names = {"object": "a mapping", "array": "a list", "string": "a string", "integer": "an integer",
             "number": "a number", "boolean": "true or false", "null": "null"}
    if isinstance(value, list):
        return " or ".join(names.get(v, v) for v in value)
    return names.get(value, str(value))


def _type_name_of(value: Any) -> str:
    if isinstance(value, bool):
        return f"{str(value).lower()}"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if value is None:
        return "null"
    if isinstance(value, str):
        return f"the string '{value}'"
    return f"the number {value!r}"


def _type_hint(path: YamlPath) -> str:
    last = path[-1] if path else ""
    return {"inputs": "a list of op names, e.g. [a, b]", "after": "a list of op names, e.g. [init]",
            "tags": "a list, e.g. [heavy]", "visible_gpus": "a list of CUDA ordinals, e.g. [2, 3]", "tasks": "a count, e.g. 2, or a list of host:port",
            "graph": "a list of ops, e.g. - {name: a, op: constant, value: 1}",
            "memory_limit": "e.g. 2GiB", "limit": "e.g. 1GiB", "shape": "e.g. [1000, 100]"}.get(str(last), "")


def _required_hint(key: str) -> str:
    return {"version": "start the file with 'version: 1'", "graph": "add a 'graph:' list of ops",
            "name": "every op and construct needs a unique name", "op": "e.g. op: matmul",
            "match": "e.g. match: {op: variable}"}.get(key, "")


# --------------------------------------------------------------------------- semantics


class _Checker:
    def __init__(self, doc: Document):
        self.doc = doc
        self.diags: list[Diagnostic] = []
        # Rules already warned about for naming an unknown op type: "matches no
        # op" would only repeat that warning less precisely.
        self.rules_with_unknown_ops: set[int] = set()
        # Set when the cluster or the graph is too big to build: later checks would take forever.
        self.too_big = False

    def error(self, code: str, path: YamlPath, message: str, hint: str = "", key: bool = False) -> None:
        self.diags.append(self.doc.diagnostic(code, path, message, hint, "error", key))

    def warn(self, code: str, path: YamlPath, message: str, hint: str = "", key: bool = False) -> None:
        self.diags.append(self.doc.diagnostic(code, path, message, hint, "warning", key))

    def size(self, value: Any, path: YamlPath) -> int | None:
        """Bytes of a size (an int, or text for dask's parse_bytes); None, with an error, when unusable."""
        if value is None:
            return None
        if isinstance(value, int) and not isinstance(value, bool):
            size = value
        else:
            try:
                size = int(parse_bytes(str(value)))
            except (ValueError, TypeError, OverflowError):  # OverflowError: '1e400' is infinite bytes
                self.error("size", path, f"cannot read {_show(value)} as a size",
                           "write e.g. 512MB, 2GiB or a number of bytes")
                return None
        if size > MAX_SIZE:
            self.error("size", path, f"{_short(value)} is larger than any memory (8 EiB at most)",
                       "write e.g. 512MB, 2GiB or a number of bytes")
            return None
        if size <= 0:
            # Dask reads memory_limit 0 as "no limit"; a user writing 0 or a
            # negative size more likely made a slip, and leaving it out says "no limit".
            self.error("size", path, f"must be a positive size, got {_show(value)}",
                       f"e.g. 2GiB; leave {path[-1]} out for no limit" if path[-1] != "total" else "e.g. 16GiB")
            return None
        return size

    def device(self, text: Any, path: YamlPath) -> DeviceSpec | None:
        try:
            return DeviceSpec.parse(str(text))
        except DeviceSpecError as exc:
            self.error("device-syntax", path, str(exc), "write /job:NAME/task:N/device:CPU:0, /gpu:1 or GPU:1")
            return None

    # ------------------------------------------------------------------ cluster

    def cluster(self, data: Mapping[str, Any]) -> Cluster:
        raw_jobs = data.get("jobs") or {"localhost": {}}
        jobs = tuple(self.job(str(name), spec or {}, ("cluster", "jobs", name)) for name, spec in raw_jobs.items())
        total = sum(job.tasks * (1 + job.logical_gpus) for job in jobs)
        if self.too_big or total > MAX_DEVICES:
            if not self.too_big:  # each job is small enough, together they are not
                self.too_big = True
                self.error("cluster-size", ("cluster", "jobs"),
                           f"the cluster would have {total:,} devices; at most {MAX_DEVICES:,} are supported",
                           _CLUSTER_SIZE_HINT)
            return Cluster(jobs, (), jobs[0].name)
        devices = tuple(d for job in jobs for d in job_devices(job))
        names = [j.name for j in jobs]
        default_job = names[0] if len(names) == 1 else next(
            (n for n in ("localhost", "worker") if n in names), names[0])
        tls = data.get("tls")
        dashboard = data.get("dashboard", ":0")
        return Cluster(jobs, devices, default_job, str(data.get("scheduler", "local")),
                       str(data.get("gpu_backend", "auto")), None if dashboard is False else str(dashboard),
                       Tls(**tls) if tls else None)

    def job(self, name: str, spec: Mapping[str, Any], path: YamlPath) -> Job:
        tasks = spec.get("tasks", 1)
        addresses = tuple(tasks) if isinstance(tasks, list) else ()
        visible = tuple(spec.get("visible_gpus") or ())
        gpus = spec.get("gpus")
        if visible and gpus is not None and gpus != len(visible):
            self.error("gpus", (*path, "gpus"),
                       f"gpus: {gpus} disagrees with visible_gpus, which lists {len(visible)} "
                       f"GPU{'s' if len(visible) != 1 else ''}",
                       "give one of gpus or visible_gpus; visible_gpus alone implies the count")
        tasks_count = len(addresses) or int(tasks)
        devices = tasks_count * (1 + (len(visible) or int(gpus or 0)) * int(spec.get("virtual_gpus", 1)))
        if devices > MAX_DEVICES:
            # Refused before any device is made: 'tasks: 1000000000' would take minutes and gigabytes.
            factors = {"tasks": tasks_count, "gpus": int(gpus or 0), "visible_gpus": len(visible),
                       "virtual_gpus": int(spec.get("virtual_gpus", 1))}
            field = max((k for k in factors if k in spec), key=lambda k: factors[k], default="tasks")
            self.too_big = True
            self.error("cluster-size", (*path, field),
                       f"job '{name}' would have {devices:,} devices; at most {MAX_DEVICES:,} are supported",
                       _CLUSTER_SIZE_HINT)
            return Job(name, tasks_count, addresses, 1, None, (), 1, GpuMemory(), path)
        physical = visible or tuple(range(int(gpus or 0)))
        mem = spec.get("gpu_memory") or {}
        mpath = (*path, "gpu_memory")
        fraction = mem.get("fraction")
        if fraction is not None and not 0 < fraction <= 1:
            self.error("gpu-fraction", (*mpath, "fraction"), f"fraction {fraction} is not in (0, 1]",
                       "e.g. fraction: 0.4 for 40% of each GPU")
            fraction = None
        if "limit" in mem and "fraction" in mem:
            self.error("gpu-memory", mpath, "give either limit or fraction, not both",
                       "limit is an absolute size, fraction a share of the GPU's total")
        if mem and not physical:
            self.warn("gpu-memory", mpath, f"job '{name}' has gpu_memory but no GPUs", "add gpus: N or remove it")
        gpu_memory = GpuMemory(self.size(mem.get("limit"), (*mpath, "limit")), fraction, bool(mem.get("growth", False)),
                               self.size(mem.get("total"), (*mpath, "total")) or GpuMemory().total)
        virtual = int(spec.get("virtual_gpus", 1))
        if gpu_memory.limit is not None and gpu_memory.limit * virtual > gpu_memory.total:
            needed = format_bytes(gpu_memory.limit * virtual)
            what = f"{virtual} virtual GPUs x {format_bytes(gpu_memory.limit)} = {needed}" if virtual > 1 \
                else f"limit {format_bytes(gpu_memory.limit)}"
            self.error("gpu-memory", (*mpath, "limit"),
                       f"{what} exceeds the GPU's total of {format_bytes(gpu_memory.total)}",
                       "lower the limit or virtual_gpus, or give the GPU's real size as total:")
        return Job(name, len(addresses) or int(tasks), addresses, int(spec.get("cpu_threads", 1)),
                   self.size(spec.get("memory_limit"), (*path, "memory_limit")), physical,
                   int(spec.get("virtual_gpus", 1)), gpu_memory, path)

    # ------------------------------------------------------------------ placement

    def placement(self, data: Mapping[str, Any], cluster: Cluster) -> PlacementConfig:
        default = None
        if "default" in data:
            default = self.device(data["default"], ("placement", "default"))
        rules = []
        for i, raw in enumerate(data.get("rules") or []):
            path = ("placement", "rules", i)
            match = raw["match"]
            ops = match.get("op", [])
            ops = (ops,) if isinstance(ops, str) else tuple(ops)
            for kind in ops:
                if lookup(kind) is None or lookup(kind).internal:  # type: ignore[union-attr]
                    self.warn("rule-unknown-op", (*path, "match", "op"), f"rule {i + 1} matches unknown op type '{kind}'",
                              did_you_mean(kind, user_op_names()) or "this rule can never match")
                    self.rules_with_unknown_ops.add(i)
            device = self.device(raw["device"], (*path, "device")) if "device" in raw else None
            rr = self.device(raw["round_robin"], (*path, "round_robin")) if "round_robin" in raw else None
            if rr is not None and rr.job is None:
                self.error("round-robin", (*path, "round_robin"), "round_robin needs a job, e.g. /job:ps",
                           "it spreads ops over that job's tasks")
            rules.append(Rule(i, ops, match.get("name"), tuple(match.get("tags") or ()), device, rr,
                              str(raw.get("by", "count")), path))
        return PlacementConfig(default, bool(data.get("soft", False)), bool(data.get("log", False)), tuple(rules))

    def device_exists(self, spec: DeviceSpec, path: YamlPath, cluster: Cluster, soft: bool) -> None:
        """Strict: the job, task and device type a string names must exist (index is the placer's)."""
        report = self.warn if soft else self.error
        suffix = "; soft placement will fall back" if soft else ""
        if spec.job is not None and cluster.job(spec.job) is None:
            hint = did_you_mean(spec.job, [j.name for j in cluster.jobs]) or \
                f"jobs: {', '.join(j.name for j in cluster.jobs)}"
            report("device-job", path, f"device '{spec}' names job '{spec.job}', which the cluster does not have{suffix}",
                   hint)
            return
        jobs = [cluster.job(spec.job)] if spec.job else list(cluster.jobs)
        if spec.task is not None and all(spec.task >= j.tasks for j in jobs if j):
            most = max(j.tasks for j in jobs if j)
            report("device-task", path, f"device '{spec}' names task {spec.task}, but the job has {most} "
                   f"task{'s' if most != 1 else ''}{suffix}", f"tasks are numbered 0..{most - 1}")
        if spec.device_type == "GPU" and all(j.logical_gpus == 0 for j in jobs if j):
            where = f"job '{spec.job}'" if spec.job else "the cluster"
            report("device-type", path, f"device '{spec}' names a GPU, but {where} has no GPUs{suffix}",
                   "add gpus: N to the job, or pin to /cpu:0")
        if spec.replica not in (None, 0):
            report("device-replica", path, f"device '{spec}' names replica {spec.replica}; only replica 0 exists"
                   f"{suffix}", "drop /replica:N")


def job_devices(job: Job) -> list[Device]:
    """CPU:0 and every logical GPU of every task, in canonical order."""
    from .devices import canonical_device

    out = []
    for task in range(job.tasks):
        out.append(Device(canonical_device(job.name, task, "CPU", 0), job.cpu_threads, job.memory_limit,
                          limit_declared=job.memory_limit is not None))
        declared = job.gpu_memory.limit is not None or job.gpu_memory.fraction is not None
        per_gpu = job.gpu_memory.per_logical_gpu(job.virtual_gpus)
        for i in range(job.logical_gpus):
            physical = job.physical_gpus[i // job.virtual_gpus]
            out.append(Device(canonical_device(job.name, task, "GPU", i), 1, per_gpu, physical,
                              job.gpu_memory.reserve_at_start, declared))
    return out


# --------------------------------------------------------------------------- graph checks


def _written(op: Op) -> bool:
    """True for an op the user wrote as a mapping (it has ``name``, ``inputs``, ... keys to point at).

    Ops that constructs make (splits, combines, loop state, sweep values) live
    at a key or list entry of the construct; diagnostics point at that node.
    """
    return len(op.path) >= 2 and isinstance(op.path[-1], int) and op.path[-2] in ("graph", "ops", "body")


# Internal op kinds, and what a user writes instead.
_INTERNAL_HINTS = {
    "state": "carried values are declared under iterate: state: {w: w0}",
    "mean_n": "replicate's combine: {c: mean} makes it; to average inputs use add_n then div with scalar",
    "select": "sweep's select: {min: loss} makes it",
    "pick": "sweep's select: {min: loss} makes it",
    "series": "iterate's metrics: {loss: loss} makes it",
}


def _check_ops(c: _Checker, ops: Sequence[Op]) -> dict[str, Op]:
    by_name: dict[str, Op] = {}
    for op in ops:
        if op.name in by_name:
            first = by_name[op.name]
            line = c.doc.locate(first.path)[0]
            origin = f"first defined on line {line}" if _written(first) else \
                f"'{first.group}' on line {line} already makes it"
            c.error("duplicate-name", (*op.path, "name") if _written(op) else op.path,
                    f"duplicate op name {_label(op)} ({origin})", "op names must be unique; rename one of them")
            continue
        by_name[op.name] = op
        definition = lookup(op.kind)
        if definition is not None and definition.internal and op.group is None:
            c.error("unknown-op", (*op.path, "op"), f"op '{op.kind}' is internal: constructs make it, users cannot",
                    _INTERNAL_HINTS.get(op.kind, "see the op list: orchestrate schema"))
            continue
        if definition is None:
            c.error("unknown-op", (*op.path, "op"), f"unknown op '{op.kind}'",
                    did_you_mean(op.kind, user_op_names()) or "see the op list: orchestrate schema")
            continue
        if op.group is not None and definition.internal:
            continue
        for key in sorted(definition.required - set(op.params)):
            c.error("op-param", op.path, f"op {_label(op)} ({op.kind}) needs parameter '{key}'", _param_hint(op.kind, key))
        for key in sorted(set(op.params) - definition.params):
            accepted = sorted(definition.params)
            c.error("op-param", (*op.path, key), f"parameter '{key}' does not apply to op '{op.kind}'",
                    did_you_mean(key, accepted) or (f"{op.kind} accepts: {', '.join(accepted)}" if accepted
                                                     else f"{op.kind} takes no parameters"), key=True)
        n = len(op.inputs)
        lo, hi = definition.min_inputs, definition.max_inputs
        if n < lo or (hi is not None and n > hi):
            want = str(lo) if lo == hi else f"{lo} or {hi}" if hi == lo + 1 else \
                f"{lo} to {hi}" if hi is not None else f"at least {lo}"
            c.error("op-arity", (*op.path, "inputs") if op.inputs else op.path,
                    f"op {_label(op)} ({op.kind}) takes {want} input{'s' if want != '1' else ''}, got {n}",
                    _arity_hint(op.kind, definition.input_names, n, hi))
        if op.input_keys is not None and op.kind != "call":
            bad = [k for k in op.input_keys if k not in definition.input_names]
            for key in bad:
                names = ", ".join(definition.input_names) or "none (use a list)"
                c.error("op-input-name", (*op.path, "inputs", key), f"op '{op.kind}' has no input named '{key}'",
                        did_you_mean(key, definition.input_names) or f"input names: {names}", key=True)
        if op.kind == "call":
            fn = str(op.params.get("fn", ""))
            if fn and not FN_PATTERN.match(fn):
                c.error("call-fn", (*op.path, "fn"), *_fn_problem(fn))
        if op.kind == "variable" and "value" not in op.params and "shape" not in op.params and not op.inputs:
            c.error("op-param", op.path, f"variable {_label(op)} needs a value, a shape, or an input",
                    "e.g. value: [0.0, 0.0] or shape: [3] with init: zeros")
    return by_name


def _arity_hint(kind: str, input_names: Sequence[str], n: int, hi: int | None) -> str:
    if kind in ("add", "sub", "mul", "div"):
        extra = "; add_n sums any number of inputs" if kind == "add" and hi is not None and n > hi else ""
        return f"{kind} takes inputs: [x, y], or inputs: [x] and scalar: N{extra}"
    if input_names:
        return f"e.g. inputs: [{', '.join(input_names)}]"
    return "e.g. inputs: [a, b]" if n == 0 else ""


def _fn_problem(fn: str) -> tuple[str, str]:
    """Message and hint for a ``call`` fn that is not ``package.module:function``."""
    module, colon, function = fn.rpartition(":")
    if not colon:
        head, dot, tail = fn.rpartition(".")
        hint = f"did you mean '{head}:{tail}'?" if dot and head and tail else "e.g. fn: mypkg.losses:mse"
        return f"fn '{fn}' has no ':' between the module and the function", hint
    if not module:
        return f"fn '{fn}' names no module before ':'", f"e.g. fn: mypkg.losses:{function or 'mse'}"
    if not function:
        return f"fn '{fn}' names no function after ':'", f"e.g. fn: {module}:mse"
    return f"fn '{fn}' is not of the form package.module:function", \
        "module and function are Python names: letters, digits and _, not starting with a digit"


def _param_hint(kind: str, key: str) -> str:
    return {"value": "e.g. value: [[1, 2], [3, 4]]", "shape": "e.g. shape: [1000, 100]", "num": "e.g. num: 2",
            "fn": "e.g. fn: mypkg.module:function", "path": "e.g. path: data/x.npy", "dtype": "e.g. dtype: float32"
            }.get(key, "")


def _label(op: Op) -> str:
    """An op as the user wrote it: ``'c'``, or ``'c' in 'towers'`` for an op of a construct's body.

    Copies are named ``towers/0/c``, ``towers/1/c``; the user wrote ``c`` once.
    """
    scope = _scope_of(op) if _written(op) else ""
    if scope and op.group is not None:
        return f"'{op.name[len(scope) + 1:]}' in '{op.group}'"
    return f"'{op.name}'"


def _ref_role(op: Op, ref: OpRef) -> str:
    """How the user wrote a reference, for messages: ``input 'b' of op 'c'``, ``state 'w' starts from ...``."""
    where = op.path[-2] if len(op.path) >= 2 else None
    var = op.path[-1]
    if not _written(op) and op.group is not None:
        if where == "state":
            return f"the initial value '{ref}' of state '{var}' in '{op.group}'"
        if where == "update":
            return f"the update '{ref}' of state '{var}' in '{op.group}'"
        if where == "metrics":
            return f"the metric '{ref}' of '{op.group}'"
        if where == "split":
            return f"the split input '{ref}' of '{op.group}'"
    return f"input '{ref}' of op {_label(op)}"


def _scope_of(op: Op) -> str:
    """The name prefix a reference inside ``op`` was resolved in ("" for the top level).

    A body op ``towers/0/c`` resolves in ``towers/0``; a loop's update and
    metrics in the loop's body ``train``; a state's initial value and a
    replicate's split input in the scope around the construct.
    """
    if _written(op) or op.group is None:
        return op.name.rpartition("/")[0]
    where = op.path[-2] if len(op.path) >= 2 else None
    if where in ("update", "metrics"):
        return op.group
    return op.group.rpartition("/")[0]


def _candidates(op: Op, names: Sequence[str]) -> list[str]:
    """Names to suggest for a reference made inside ``op``, as the user would write them there.

    Inside a replicate/sweep/iterate body users write local names (``c``),
    which expand to ``towers/0/c``; suggesting the expanded name would be
    wrong to write. Top-level names are visible everywhere.
    """
    scope = _scope_of(op)
    top = [n for n in names if "/" not in n]
    if not scope:
        return top
    prefix = scope + "/"
    return [n[len(prefix):] for n in names if n.startswith(prefix) and "/" not in n[len(prefix):]] + top


def _check_refs(c: _Checker, ops: Sequence[Op], by_name: Mapping[str, Op]) -> None:
    names = list(by_name)
    for op in ops:
        keyed = op.input_keys or range(len(op.inputs))
        for key, ref in zip(keyed, op.inputs):
            if not _ref_ok(ref, by_name):  # the common case stays a dict lookup: specs have 100k ops
                _check_ref(c, ref, by_name, _candidates(op, names),
                           (*op.path, "inputs", key) if _written(op) else op.path, _ref_role(op, ref))
        for i, name in enumerate(op.after):
            if name not in by_name:
                c.error("unknown-after", (*op.path, "after", i) if _written(op) else op.path,
                        f"op {_label(op)} runs after '{name}', which is not defined",
                        did_you_mean(name, _candidates(op, names)) or "after lists op names")


def _ref_ok(ref: OpRef, by_name: Mapping[str, Op]) -> bool:
    target = by_name.get(ref.op)
    if target is None:
        return False
    return ref.output < target.outputs if ref.output is not None else target.outputs == 1


def _check_ref(c: _Checker, ref: OpRef, by_name: Mapping[str, Op], names: Sequence[str], path: YamlPath,
               what: str, key: bool = False) -> None:
    target = by_name.get(ref.op)
    if target is None:
        c.error("unknown-input", path, f"{what} is not defined", did_you_mean(ref.op, names) or
                "name an op defined in the graph, or in the same body", key=key)
    elif ref.output is not None and ref.output >= target.outputs:
        c.error("unknown-output", path, f"{what}: op '{ref.op}' has {target.outputs} output"
                f"{'s' if target.outputs != 1 else ''}", f"use {ref.op}:0 .. {ref.op}:{target.outputs - 1}"
                if target.outputs > 1 else f"use {ref.op}", key=key)
    elif ref.output is None and target.outputs > 1:
        c.error("multi-output", path, f"{what}: op '{ref.op}' has {target.outputs} outputs; say which",
                f"use {ref.op}:0 .. {ref.op}:{target.outputs - 1}", key=key)


def topological_order(ops: Sequence[Op], by_name: Mapping[str, Op]) -> tuple[list[Op], list[list[str]]]:
    """Kahn's order, stable in graph order, and the cycles found (each as a closed path)."""
    deps = {op.name: [r.op for r in op.inputs if r.op in by_name] + [a for a in op.after if a in by_name]
            for op in ops}
    index = {op.name: i for i, op in enumerate(ops)}
    pending = {name: len(set(d)) for name, d in deps.items()}
    users: dict[str, list[str]] = {}
    for name, d in deps.items():
        for dep in set(d):
            users.setdefault(dep, []).append(name)
    import heapq

    ready = [index[n] for n, k in pending.items() if k == 0]
    heapq.heapify(ready)
    order: list[Op] = []
    while ready:
        op = ops[heapq.heappop(ready)]
        order.append(op)
        for user in users.get(op.name, ()):
            pending[user] -= 1
            if pending[user] == 0:
                heapq.heappush(ready, index[user])
    if len(order) == len(ops):
        return order, []
    return order, _cycles({n for n, k in pending.items() if k > 0}, deps, index)


def _cycles(stuck: set[str], deps: Mapping[str, list[str]], index: Mapping[str, int]) -> list[list[str]]:
    cycles: list[list[str]] = []
    seen: set[str] = set()
    for start in sorted(stuck, key=index.__getitem__):
        if start in seen:
            continue
        path, on_path, node = [], {}, start
        while node not in on_path and node not in seen:
            on_path[node] = len(path)
            path.append(node)
            node = next(d for d in deps[node] if d in stuck)
        if node in on_path:
            # walked consumer -> producer; show it as data flows, from the earliest op
            loop = list(reversed(path[on_path[node]:]))
            first = min(range(len(loop)), key=lambda i: index[loop[i]])
            loop = loop[first:] + loop[:first]
            cycles.append(loop + [loop[0]])
        seen.update(path)
    return cycles


def _infer_values(c: _Checker, order: Sequence[Op], by_name: Mapping[str, Op]) -> dict[str, tuple[ValueInfo, ...]]:
    values: dict[str, tuple[ValueInfo, ...]] = {}
    unknown = ValueInfo(None, None)
    reported: set[tuple[YamlPath, str]] = set()
    for op in order:
        infos = []
        for ref in op.inputs:
            outs = values.get(ref.op, ())
            i = ref.output or 0
            infos.append(outs[i] if i < len(outs) else unknown)
        try:
            values[op.name] = infer(op.kind, op.params, infos) if lookup(op.kind) else (unknown,)
            _check_array_size(op, values[op.name])
        except ShapeError as exc:
            message = f"op {_label(op)} ({op.kind}): {exc}"
            if (op.path, str(exc)) not in reported:
                reported.add((op.path, str(exc)))
                # Point at the field at fault when the user wrote it (value, shape,
                # axis), else at the inputs whose shapes do not fit.
                field = exc.key if exc.key in op.params else "inputs" if op.inputs and exc.key is None else None
                c.error("shape", (*op.path, field) if field and _written(op) else op.path, message, exc.hint)
            values[op.name] = tuple(unknown for _ in range(op.outputs))
        except (KeyError, TypeError, ValueError, IndexError, OverflowError):
            values[op.name] = tuple(unknown for _ in range(op.outputs))
    return values


def _check_array_size(op: Op, infos: Sequence[ValueInfo]) -> None:
    """NumPy (and CuPy) cannot make an array of more than 2^63 - 1 bytes: ``shape: [10**30]`` is a slip."""
    for info in infos:
        if info.shape is None:
            continue
        size = info.nbytes
        if size is None:  # dtype unknown: at least one byte per element
            size = 1
            for dim in info.shape:
                size *= dim
        if size > MAX_SIZE:
            raise ShapeError(f"its output of shape {_fmt_shape(info.shape)} would be larger than any array can be "
                             f"(8 EiB at most)", "check the dimensions",
                             key="shape" if "shape" in op.params else "value" if "value" in op.params else None)


def _fmt_shape(shape: tuple[int, ...]) -> str:
    def dim(d: int) -> str:  # 10**400 has no float: shorten by hand
        digits = str(d)
        return digits if len(digits) <= 12 else f"{digits[0]}.{digits[1:3]}e+{len(digits) - 1}"
    return "[" + ", ".join(dim(d) for d in shape) + "]"


def _check_devices(c: _Checker, ops: Sequence[Op], cluster: Cluster, placement: PlacementConfig) -> None:
    seen: set[YamlPath] = set()
    for op in ops:
        for req in op.device_chain:
            if req.path not in seen:
                seen.add(req.path)
                c.device_exists(req.spec, req.path, cluster, placement.soft)
    if placement.default is not None:
        c.device_exists(placement.default, ("placement", "default"), cluster, False)
    for rule in placement.rules:
        if rule.device is not None:
            c.device_exists(rule.device, (*rule.path, "device"), cluster, placement.soft)
        if rule.round_robin is not None:
            c.device_exists(rule.round_robin, (*rule.path, "round_robin"), cluster, False)


def _check_rules(c: _Checker, ops: Sequence[Op], placement: PlacementConfig) -> None:
    for rule in placement.rules:
        if rule.index in c.rules_with_unknown_ops:
            continue
        if not any(rule.matches(op) for op in ops):
            c.warn("rule-unused", (*rule.path, "match"), f"rule {rule.index + 1} matches no op in the graph",
                   "check its op type, name glob and tags")


def _check_kernels(c: _Checker, ops: Sequence[Op]) -> None:
    for op in ops:
        if op.kind == "call" and "kernels" not in op.params:
            continue
        if not kernels_of(op.kind, op.params):
            c.error("kernels", op.path, f"op {_label(op)} declares no kernels", "kernels: [cpu] or [cpu, gpu]")


def _check_target(c: _Checker, target: str, path: YamlPath, run: RunOptions, what: str,
                  suffixes: tuple[str, ...] = OUTPUT_SUFFIXES) -> bool:
    """A file the run writes: a known format, inside the output directory unless allowed out. True if fine."""
    if not target.endswith(suffixes):
        c.error("output-format", path, f"{what} '{target}' has an unknown format",
                f"use {', '.join(suffixes)}" + (" or '-' for stdout" if what == "output path" else ""))
    elif os.path.isabs(target) and not run.allow_absolute_paths:
        c.error("output-path", path, f"{what} '{target}' is absolute",
                "use a path relative to the output directory, or set run.allow_absolute_paths: true")
    elif ".." in os.path.normpath(target).split(os.sep) and not run.allow_absolute_paths:
        c.error("output-path", path, f"{what} '{target}' escapes the output directory",
                "remove '..' or set run.allow_absolute_paths: true")
    else:
        return True
    return False


def _info(values: Mapping[str, tuple[ValueInfo, ...]], ref: OpRef) -> ValueInfo | None:
    infos = values.get(ref.op, ())
    index = ref.output or 0
    return infos[index] if index < len(infos) else None


def _check_csv(c: _Checker, info: ValueInfo | None, path: YamlPath, what: str) -> None:
    """CSV holds a table: the run would fail after computing everything (np.savetxt takes 1-D or 2-D)."""
    if info is not None and info.shape is not None and len(info.shape) > 2:
        c.error("output-format", path, f"{what} shape {_fmt_shape(info.shape)}; a CSV file holds at most 2 dimensions",
                "write it to .npy, or reshape it to 2 dimensions first")


def _outputs(c: _Checker, data: Mapping[str, Any], by_name: Mapping[str, Op], run: RunOptions,
             values: Mapping[str, tuple[ValueInfo, ...]]) -> tuple[Output, ...]:
    out = []
    names = list(by_name)
    for key, target in (data.get("outputs") or {}).items():
        path = ("outputs", key)
        ref = parse_ref(str(key))
        _check_ref(c, ref, by_name, names, path, f"op '{ref}' named in outputs", key=True)
        if target != "-" and _check_target(c, str(target), path, run, "output path") and \
                str(target).endswith(".csv"):
            _check_csv(c, _info(values, ref), path, f"output '{ref}' has")
        out.append(Output(ref, str(target), path))
    seen: set[YamlPath] = set()
    for op in by_name.values():
        if op.kind == "save" and "path" in op.params and op.path not in seen:
            seen.add(op.path)  # a save in a replicated body is one line of YAML
            target = str(op.params["path"])
            if _check_target(c, target, (*op.path, "path"), run, "save path", (".npy", ".csv")) and \
                    op.params.get("format", "csv" if target.endswith(".csv") else "npy") == "csv" and op.inputs:
                _check_csv(c, _info(values, op.inputs[0]), (*op.path, "path"), f"op {_label(op)} saves")
    return tuple(out)


def _check_name_keys(c: _Checker, data: Mapping[str, Any]) -> None:
    """Keys that are names (jobs, outputs, state variables, keyword parameters, ...) must be text.

    YAML reads ``1:``, ``null:`` and ``yes:`` as a number, null and a boolean;
    JSON Schema only ever sees text keys, so it cannot say so. Runs on
    schema-valid data, visiting only the mappings whose keys are names.
    """
    def keys(mapping: Any, path: YamlPath) -> None:
        if not isinstance(mapping, dict):
            return
        for key in mapping:
            if not isinstance(key, str):
                kind = "null" if key is None else "a boolean" if isinstance(key, bool) else \
                    "a number" if isinstance(key, (int, float)) else "not text"
                hint = f"quote it to make it a name: '{_show(key)}'" + (
                    "; YAML reads yes, no, on and off as booleans" if isinstance(key, bool) else "")
                c.error("key-type", (*path, str(key)), f"key {_show(key)} is {kind}; names are text", hint, key=True)

    def items(graph: Sequence[Any], path: YamlPath) -> None:
        for index, item in enumerate(graph):
            inputs, params = item.get("inputs"), item.get("params")
            if type(inputs) is dict:  # a list of inputs has no keys: the common case stays cheap
                keys(inputs, (*path, index, "inputs"))
            if params:
                keys(params, (*path, index, "params"))
            if "name" in item and "op" in item:
                continue
            if "scope" in item:
                items(item.get("ops") or [], (*path, index, "ops"))
            for kind in ("replicate", "iterate", "sweep"):
                if kind in item:
                    spec = item[kind]
                    for field in ("split", "combine", "state", "update", "metrics"):
                        keys(spec.get(field), (*path, index, kind, field))
                    items(spec.get("body") or [], (*path, index, kind, "body"))

    keys((data.get("cluster") or {}).get("jobs"), ("cluster", "jobs"))
    keys(data.get("outputs"), ("outputs",))
    items(data["graph"], ("graph",))


# --------------------------------------------------------------------------- entry point


_COPY_INDEX = re.compile(r"/\d+/")


def _once_per_copy(diags: Iterable[Diagnostic]) -> list[Diagnostic]:
    """Drop repeats of a diagnostic that differ only in the copy a construct made.

    A mistake inside a replicate or sweep body is made once by the user but
    found in every copy (``towers/0/c``, ``towers/1/c``): report the first.
    User names cannot contain '/', so ``/<digits>/`` only occurs in copy names.
    """
    seen: set[tuple[object, ...]] = set()
    out = []
    for d in diags:
        key = (d.severity, d.code, d.line, d.column, d.path, _COPY_INDEX.sub("/*/", d.message),
               _COPY_INDEX.sub("/*/", d.hint))
        if key not in seen:
            seen.add(key)
            out.append(d)
    return out


def validate(doc: Document) -> tuple[Spec | None, list[Diagnostic]]:
    """Check a loaded document; return the typed spec (``None`` if unusable) and all diagnostics."""
    schema_diags = check_schema(doc)
    if schema_diags:
        return None, schema_diags
    c = _Checker(doc)
    data = doc.data
    _check_name_keys(c, data)
    if c.diags:  # names that are not text: later checks build names by concatenation
        return None, sorted(c.diags, key=lambda d: (d.line, d.column))
    cluster = c.cluster(data.get("cluster") or {})
    placement = c.placement(data.get("placement") or {}, cluster)
    raw_run = data.get("run") or {}
    run = RunOptions(raw_run.get("output_dir"), bool(raw_run.get("allow_absolute_paths", False)),
                     int(raw_run.get("retries", 0)), raw_run.get("timeout"), float(raw_run.get("no_workers_timeout", 5)))
    if c.too_big:  # a cluster too big to build: nothing later can be checked against it
        return None, sorted(c.diags, key=lambda d: (d.severity != "error", d.line, d.column))
    expansion = expand(doc, data["graph"], cluster)
    c.diags.extend(expansion.diagnostics)
    if not expansion.complete:  # a graph too big to expand: its ops are not all there to check
        return None, sorted(c.diags, key=lambda d: (d.severity != "error", d.line, d.column))
    by_name = _check_ops(c, expansion.ops)
    # A duplicate is reported once above; the later checks see only the first
    # op of each name (else its inputs would be mixed up with the other's).
    ops = [op for op in expansion.ops if by_name[op.name] is op]
    _check_refs(c, ops, by_name)
    _check_kernels(c, ops)
    order, cycles = topological_order(ops, by_name)
    for cycle in cycles:
        c.error("cycle", by_name[cycle[0]].path, f"the graph has a cycle: {' -> '.join(cycle)}",
                "an op cannot depend on itself, directly or through others")
    values = _infer_values(c, order, by_name) if not cycles else {}
    _check_devices(c, ops, cluster, placement)
    _check_rules(c, ops, placement)
    outputs = _outputs(c, data, by_name, run, values)
    diags = sorted(_once_per_copy(c.diags), key=lambda d: (d.severity != "error", d.line, d.column))
    if any(d.is_error for d in diags):
        return None, diags
    spec = Spec(doc, str(data.get("name") or os.path.splitext(os.path.basename(doc.file))[0]), cluster, placement,
                tuple(order), values, outputs, expansion.loops, run)
    return spec, diags
