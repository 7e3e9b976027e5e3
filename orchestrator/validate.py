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

import difflib
import json
import os
import re
from functools import lru_cache
from importlib import resources
from typing import Any, Iterable, Mapping, Sequence

from dask.utils import parse_bytes

from .devices import DeviceSpec
from .errors import DeviceSpecError, Diagnostic, YamlPath
from .expand import expand, parse_ref
from .model import (Cluster, Device, Document, GpuMemory, Job, Op, OpRef, Output, PlacementConfig,
                    Rule, RunOptions, Spec, Tls, ValueInfo)
from .ops import ShapeError, infer, kernels_of, lookup, user_op_names

FN_PATTERN = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*$")
OUTPUT_SUFFIXES = (".npy", ".npz", ".csv")


# --------------------------------------------------------------------------- schema


@lru_cache(maxsize=1)
def schema_text() -> str:
    return resources.files("orchestrator").joinpath("spec.schema.json").read_text(encoding="utf-8")


@lru_cache(maxsize=1)
def schema() -> dict[str, Any]:
    return json.loads(schema_text())


@lru_cache(maxsize=1)
def _fast_validator() -> Any:
    import fastjsonschema

    return fastjsonschema.compile(schema())


def check_schema(doc: Document) -> list[Diagnostic]:
    """Every schema violation, or ``[]``; fast when the document is valid."""
    import fastjsonschema

    try:
        _fast_validator()(doc.data)
        return []
    except fastjsonschema.JsonSchemaException:
        pass
    import jsonschema

    validator = jsonschema.Draft202012Validator(schema())
    found: dict[tuple[YamlPath, str], Diagnostic] = {}
    for error in validator.iter_errors(doc.data):
        for leaf in _leaves(error):
            diag = _schema_diagnostic(doc, leaf)
            found.setdefault((diag.path, diag.message), diag)
    return sorted(found.values(), key=lambda d: (d.line, d.column, d.message))


def _leaves(error: Any) -> Iterable[Any]:
    """The most specific errors: if/then and allOf wrap the one that matters."""
    if error.context and error.validator in ("anyOf", "oneOf") and error.validator_value and \
            not all(isinstance(v, dict) and set(v) == {"required"} for v in error.validator_value):
        best = [e for e in error.context if e.validator not in ("type",)] or list(error.context)
        deepest = max(len(e.absolute_path) for e in best)
        yield from (e for e in best if len(e.absolute_path) == deepest and e.validator != "anyOf")
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
    if v == "required":
        missing = error.message.split("'")[1] if "'" in error.message else str(value)
        return doc.diagnostic("schema-required", path, f"missing required key '{missing}'",
                              _required_hint(missing))
    if v == "enum":
        options = ", ".join(map(str, value))
        hint = did_you_mean(str(error.instance), [str(o) for o in value]) or f"expected one of: {options}"
        return doc.diagnostic("schema-enum", path, f"{error.instance!r} is not one of: {options}", hint)
    if v == "const":
        return doc.diagnostic("schema-const", path, f"must be {value!r}, not {error.instance!r}",
                              "this tool reads version 1 specs" if path == ("version",) else "")
    if v == "type":
        return doc.diagnostic("schema-type", path, f"expected {_type_name(value)}, got {_type_name_of(error.instance)}",
                              _type_hint(path))
    if v == "pattern" and path and path[-1] == "name":
        return doc.diagnostic("schema-name", path, f"invalid op name {error.instance!r}",
                              "names use letters, digits, _ . -; '/' and ':' are reserved")
    if v == "pattern":
        return doc.diagnostic("schema-name", path, f"invalid name {error.instance!r}",
                              "job names use letters, digits, _ and -, and start with a letter or _")
    if v in ("minimum", "exclusiveMinimum"):
        return doc.diagnostic("schema-range", path, f"{error.instance!r} is too small (minimum {value})", "")
    if v in ("minItems", "minProperties"):
        return doc.diagnostic("schema-empty", path, "must not be empty", "")
    if v == "oneOf" and isinstance(error.instance, dict) and "match" in error.instance:
        return doc.diagnostic("schema-rule", path, "a rule needs exactly one of 'device' or 'round_robin'",
                              "e.g. {match: {op: variable}, round_robin: /job:ps}")
    if v == "anyOf":
        return doc.diagnostic("schema-type", path, f"unexpected value {_short(error.instance)}",
                              _type_hint(path))
    return doc.diagnostic(f"schema-{v}", path, error.message, "")


def _short(value: Any) -> str:
    text = json.dumps(value, default=str)
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
        return f"the string {value!r}"
    return f"{type(value).__name__} {value!r}"


def _type_hint(path: YamlPath) -> str:
    last = path[-1] if path else ""
    return {"inputs": "a list of op names, e.g. [a, b]", "tasks": "a count, e.g. 2, or a list of host:port",
            "graph": "a list of ops, e.g. - {name: a, op: constant, value: 1}",
            "memory_limit": "e.g. 2GiB", "limit": "e.g. 1GiB", "shape": "e.g. [1000, 100]"}.get(str(last), "")


def _required_hint(key: str) -> str:
    return {"version": "start the file with 'version: 1'", "graph": "add a 'graph:' list of ops",
            "name": "every op and construct needs a unique name", "op": "e.g. op: matmul",
            "match": "e.g. match: {op: variable}"}.get(key, "")


def did_you_mean(word: str, candidates: Iterable[str]) -> str:
    close = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return f"did you mean '{close[0]}'?" if close else ""


# --------------------------------------------------------------------------- semantics


class _Checker:
    def __init__(self, doc: Document):
        self.doc = doc
        self.diags: list[Diagnostic] = []

    def error(self, code: str, path: YamlPath, message: str, hint: str = "", key: bool = False) -> None:
        self.diags.append(self.doc.diagnostic(code, path, message, hint, "error", key))

    def warn(self, code: str, path: YamlPath, message: str, hint: str = "", key: bool = False) -> None:
        self.diags.append(self.doc.diagnostic(code, path, message, hint, "warning", key))

    def size(self, value: Any, path: YamlPath) -> int | None:
        if value is None:
            return None
        if isinstance(value, int):
            return value
        try:
            size = int(parse_bytes(str(value)))
        except (ValueError, TypeError):
            self.error("size", path, f"cannot read size {value!r}", "write e.g. 512MB, 2GiB or a number of bytes")
            return None
        if size <= 0:
            self.error("size", path, f"size {value!r} must be positive", "e.g. 2GiB")
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
            self.error("gpus", (*path, "gpus"), f"gpus: {gpus} disagrees with visible_gpus (lists {len(visible)})",
                       "give one of gpus or visible_gpus")
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
        if gpu_memory.limit is not None and gpu_memory.limit * int(spec.get("virtual_gpus", 1)) > gpu_memory.total:
            self.error("gpu-memory", (*mpath, "limit"),
                       f"limit {mem.get('limit')} x {spec.get('virtual_gpus', 1)} virtual GPUs exceeds the GPU's "
                       f"total of {gpu_memory.total} bytes", "lower the limit or declare total:")
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


def _check_ops(c: _Checker, ops: Sequence[Op]) -> dict[str, Op]:
    by_name: dict[str, Op] = {}
    for op in ops:
        if op.name in by_name:
            first = c.doc.locate(by_name[op.name].path)[0]
            c.error("duplicate-name", (*op.path, "name") if op.group is None else op.path,
                    f"duplicate op name '{op.name}' (first defined on line {first})", "op names must be unique")
            continue
        by_name[op.name] = op
        definition = lookup(op.kind)
        if definition is None or (definition.internal and op.group is None):
            c.error("unknown-op", (*op.path, "op"), f"unknown op '{op.kind}'",
                    did_you_mean(op.kind, user_op_names()) or "see the op list: orchestrate schema")
            continue
        if op.group is not None and definition.internal:
            continue
        for key in sorted(definition.required - set(op.params)):
            c.error("op-param", op.path, f"op '{op.name}' ({op.kind}) needs parameter '{key}'", _param_hint(op.kind, key))
        for key in sorted(set(op.params) - definition.params):
            accepted = sorted(definition.params)
            c.error("op-param", (*op.path, key), f"parameter '{key}' does not apply to op '{op.kind}'",
                    did_you_mean(key, accepted) or (f"{op.kind} accepts: {', '.join(accepted)}" if accepted
                                                     else f"{op.kind} takes no parameters"), key=True)
        n = len(op.inputs)
        if n < definition.min_inputs or (definition.max_inputs is not None and n > definition.max_inputs):
            want = str(definition.min_inputs) if definition.min_inputs == definition.max_inputs else \
                f"{definition.min_inputs}..{definition.max_inputs}" if definition.max_inputs is not None else \
                f"at least {definition.min_inputs}"
            c.error("op-arity", (*op.path, "inputs") if op.inputs else op.path,
                    f"op '{op.name}' ({op.kind}) takes {want} input{'s' if want != '1' else ''}, got {n}", "")
        if op.input_keys is not None and op.kind != "call":
            bad = [k for k in op.input_keys if k not in definition.input_names]
            for key in bad:
                names = ", ".join(definition.input_names) or "none (use a list)"
                c.error("op-input-name", (*op.path, "inputs", key), f"op '{op.kind}' has no input named '{key}'",
                        did_you_mean(key, definition.input_names) or f"input names: {names}", key=True)
        if op.kind == "call":
            fn = str(op.params.get("fn", ""))
            if fn and not FN_PATTERN.match(fn):
                c.error("call-fn", (*op.path, "fn"), f"fn '{fn}' is not of the form package.module:function",
                        "e.g. fn: mypkg.losses:mse")
        if op.kind == "variable" and "value" not in op.params and "shape" not in op.params and not op.inputs:
            c.error("op-param", op.path, f"variable '{op.name}' needs a value, a shape, or an input",
                    "e.g. value: [0.0, 0.0] or shape: [3] with init: zeros")
    return by_name


def _param_hint(kind: str, key: str) -> str:
    return {"value": "e.g. value: [[1, 2], [3, 4]]", "shape": "e.g. shape: [1000, 100]", "num": "e.g. num: 2",
            "fn": "e.g. fn: mypkg.module:function", "path": "e.g. path: data/x.npy", "dtype": "e.g. dtype: float32"
            }.get(key, "")


def _check_refs(c: _Checker, ops: Sequence[Op], by_name: Mapping[str, Op]) -> None:
    names = list(by_name)
    for op in ops:
        keyed = op.input_keys or range(len(op.inputs))
        for key, ref in zip(keyed, op.inputs):
            _check_ref(c, ref, by_name, names, (*op.path, "inputs", key) if op.group is None else op.path,
                       f"input '{ref}' of op '{op.name}'")
        for i, name in enumerate(op.after):
            if name not in by_name:
                c.error("unknown-after", (*op.path, "after", i) if op.group is None else op.path,
                        f"op '{op.name}' runs after '{name}', which is not defined",
                        did_you_mean(name, names) or "after lists op names")


def _check_ref(c: _Checker, ref: OpRef, by_name: Mapping[str, Op], names: list[str], path: YamlPath,
               what: str) -> None:
    target = by_name.get(ref.op)
    if target is None:
        c.error("unknown-input", path, f"{what} is not defined", did_you_mean(ref.op, names) or
                "inputs name ops defined in graph")
    elif ref.output is not None and ref.output >= target.outputs:
        c.error("unknown-output", path, f"{what}: op '{ref.op}' has {target.outputs} output"
                f"{'s' if target.outputs != 1 else ''}", f"use {ref.op}:0 .. {ref.op}:{target.outputs - 1}"
                if target.outputs > 1 else f"use {ref.op}")
    elif ref.output is None and target.outputs > 1:
        c.error("multi-output", path, f"{what}: op '{ref.op}' has {target.outputs} outputs; say which",
                f"use {ref.op}:0 .. {ref.op}:{target.outputs - 1}")


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
        except ShapeError as exc:
            message = f"op '{op.name}' ({op.kind}): {exc}"
            if (op.path, str(exc)) not in reported:
                reported.add((op.path, str(exc)))
                c.error("shape", op.path, message, exc.hint)
            values[op.name] = tuple(unknown for _ in range(op.outputs))
        except (KeyError, TypeError, ValueError, IndexError):
            values[op.name] = tuple(unknown for _ in range(op.outputs))
    return values


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
        if not any(rule.matches(op) for op in ops):
            c.warn("rule-unused", (*rule.path, "match"), f"rule {rule.index + 1} matches no op in the graph",
                   "check its op type, name glob and tags")


def _check_kernels(c: _Checker, ops: Sequence[Op]) -> None:
    for op in ops:
        if op.kind == "call" and "kernels" not in op.params:
            continue
        if not kernels_of(op.kind, op.params):
            c.error("kernels", op.path, f"op '{op.name}' declares no kernels", "kernels: [cpu] or [cpu, gpu]")


def _outputs(c: _Checker, data: Mapping[str, Any], by_name: Mapping[str, Op], run: RunOptions) -> tuple[Output, ...]:
    out = []
    names = list(by_name)
    for key, target in (data.get("outputs") or {}).items():
        path = ("outputs", key)
        ref = parse_ref(str(key))
        _check_ref(c, ref, by_name, names, path, f"output '{key}'")
        if target != "-":
            if not str(target).endswith(OUTPUT_SUFFIXES):
                c.error("output-format", path, f"output path '{target}' has an unknown format",
                        "use .npy, .npz, .csv or '-' for stdout")
            elif os.path.isabs(target) and not run.allow_absolute_paths:
                c.error("output-path", path, f"output path '{target}' is absolute",
                        "use a path relative to the output directory, or set run.allow_absolute_paths: true")
            elif ".." in os.path.normpath(str(target)).split(os.sep) and not run.allow_absolute_paths:
                c.error("output-path", path, f"output path '{target}' escapes the output directory",
                        "remove '..' or set run.allow_absolute_paths: true")
        out.append(Output(ref, str(target), path))
    return tuple(out)


# --------------------------------------------------------------------------- entry point


def validate(doc: Document) -> tuple[Spec | None, list[Diagnostic]]:
    """Check a loaded document; return the typed spec (``None`` if unusable) and all diagnostics."""
    schema_diags = check_schema(doc)
    if schema_diags:
        return None, schema_diags
    c = _Checker(doc)
    data = doc.data
    cluster = c.cluster(data.get("cluster") or {})
    placement = c.placement(data.get("placement") or {}, cluster)
    raw_run = data.get("run") or {}
    run = RunOptions(raw_run.get("output_dir"), bool(raw_run.get("allow_absolute_paths", False)),
                     int(raw_run.get("retries", 0)), raw_run.get("timeout"), float(raw_run.get("no_workers_timeout", 5)))
    expansion = expand(doc, data["graph"], cluster)
    c.diags.extend(expansion.diagnostics)
    ops = expansion.ops
    by_name = _check_ops(c, ops)
    _check_refs(c, ops, by_name)
    _check_kernels(c, ops)
    order, cycles = topological_order(ops, by_name)
    for cycle in cycles:
        c.error("cycle", by_name[cycle[0]].path, f"the graph has a cycle: {' -> '.join(cycle)}",
                "an op cannot depend on itself, directly or through others")
    values = _infer_values(c, order, by_name) if not cycles else {}
    _check_devices(c, ops, cluster, placement)
    _check_rules(c, ops, placement)
    outputs = _outputs(c, data, by_name, run)
    diags = sorted(c.diags, key=lambda d: (d.severity != "error", d.line, d.column))
    if any(d.is_error for d in diags):
        return None, diags
    spec = Spec(doc, str(data.get("name") or os.path.splitext(os.path.basename(doc.file))[0]), cluster, placement,
                tuple(order), values, outputs, expansion.loops, run)
    return spec, diags
