"""jsonschema's complaints in the user's words: one diagnostic per leaf error, always with a hint.

The hint is the field's own when there is one (the tables below, by key),
else one for the kind of value expected (:func:`_kind_hint`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ...devices import gpu_id_problem
from ...errors import Diagnostic, YamlPath, did_you_mean
from ..records import Document
from .spelling import finite_problem, non_text_key, short, show, written

# The patterns a value (not a name) must match: what is wrong, and how to write it.
_PATTERN_PROBLEMS = {
    "\\.csv$": ("table path {} is not a .csv file", "a table is written as CSV: end its path in .csv, "
                                                     "e.g. results/search.csv"),
    "^.+\\..+$": ("{} is not LOOP.METRIC", "name a metric of the body's loop, e.g. train.loss"),
    "^[A-Za-z_][A-Za-z0-9_]*(\\.[A-Za-z_][A-Za-z0-9_]*)*$": (
        "{} is not an exception type's name", "name a class, e.g. ConnectionError, or module.Name, e.g. "
                                              "requests.exceptions.Timeout"),
}

# Entries of these mappings and lists take their hints from the key holding them.
_PARENTS_OF_ENTRIES = ("combine", "kernels", "shape", "visible_gpus")


def schema_diagnostic(doc: Document, error: Any) -> Diagnostic | None:
    """The diagnostic of one leaf error, always with a hint; None when another leaf says it better."""
    path: YamlPath = tuple(error.absolute_path)
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        return _unknown_key(doc, path, error.schema, error.instance)
    leaf = _Leaf(doc, error, path)
    if error.validator in ("anyOf", "oneOf"):
        return _alternatives_diagnostic(leaf)
    found = _value_diagnostic(leaf) or _bound_diagnostic(leaf)
    if found is None:
        found = leaf.make(f"schema-{error.validator}", error.message,
                          f"see 'orchestrate schema' for what {leaf.last or 'the spec'} accepts")
    return found


@dataclass(frozen=True)
class _Leaf:
    """One leaf error, where it is, and how its diagnostic is made."""

    doc: Document
    error: Any  # jsonschema's ValidationError (jsonschema is imported by .schema alone)
    path: YamlPath

    @property
    def last(self) -> str:
        """The key whose hints apply: the last of the path, or the parent of an entry of a mapping or list."""
        if len(self.path) >= 2 and self.path[-2] in _PARENTS_OF_ENTRIES:
            return str(self.path[-2])
        return str(self.path[-1]) if self.path else ""

    def make(self, code: str, message: str, hint: str = "", at: YamlPath | None = None,
             key: bool = False) -> Diagnostic:
        """A diagnostic at the error's path (or ``at``); without a hint of its own, the hint for the kind expected."""
        hint = hint or _kind_hint(self.doc, self.path, self.error.schema, self.error.instance)
        return self.doc.diagnostic(code, self.path if at is None else at, message, hint, key=key)


def _value_diagnostic(leaf: _Leaf) -> Diagnostic | None:
    """A value missing, not among those listed, not the constant, of another type, or not matching its pattern."""
    v, value, instance, path = leaf.error.validator, leaf.error.validator_value, leaf.error.instance, leaf.path
    if v == "required":
        message = leaf.error.message
        missing = message.split("'")[1] if "'" in message else str(value)
        return leaf.make("schema-required", f"missing required key '{missing}'", _required_hint(missing))
    if v == "enum":
        options = ", ".join(map(str, value))
        hint = did_you_mean(str(instance), [str(o) for o in value]) or _ENUM_HINTS.get(leaf.last, "") or \
            "values are case-sensitive: write one exactly as listed"
        return leaf.make("schema-enum", f"{show(instance)} is not one of: {options}", hint)
    if v == "const":
        quoted = isinstance(instance, str) and instance == str(value)  # version: "1"
        return leaf.make("schema-const", f"must be {show(value)}, not {show(instance)}",
                         f"write {show(value)} without quotes: quoted, it is text" if quoted else
                         "this tool reads version 1 specs" if path == ("version",) else f"write {show(value)}")
    if v == "type":
        return leaf.make("schema-type", f"expected {_type_name(value)}, got {_type_name_of(instance)}",
                         _integral_hint(value, instance) or _type_hint(path))
    if v == "pattern" and path and path[-1] == "name":
        return leaf.make("schema-name", f"invalid op name {show(instance)}",
                         "names use letters, digits, _ . -; '/' and ':' are reserved")
    if v == "pattern" and _parent(path) == "visible_gpus":
        message, hint = gpu_id_problem(str(instance)) or (f"{show(instance)} is not a GPU", "")
        return leaf.make("gpus", message, hint)
    if v == "pattern" and value in _PATTERN_PROBLEMS:  # a value's pattern (a table's suffix, LOOP.METRIC)
        message, hint = _PATTERN_PROBLEMS[value]
        return leaf.make("schema-pattern", message.format(show(instance)), hint)
    if v == "pattern":
        # Only job names have a pattern besides op names and GPU UUIDs; propertyNames reports the
        # mapping's path, so point at the offending key itself.
        return leaf.make("schema-name", f"invalid job name {show(instance)}",
                         "job names use letters, digits, _ and -, and start with a letter or _",
                         at=(*path, str(instance)), key=True)
    return None


def _bound_diagnostic(leaf: _Leaf) -> Diagnostic | None:
    """A number out of its range (or not finite), or a list or mapping too small, too big or repeating itself."""
    v, value, instance, last = leaf.error.validator, leaf.error.validator_value, leaf.error.instance, leaf.last
    if _not_finite(instance) and v in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"):
        return leaf.make("schema-range", *finite_problem(last, instance))
    if v == "minimum":
        return leaf.make("schema-range", f"must be at least {value}, got {show(instance)}",
                         _RANGE_HINTS.get(last, "") or f"use {value} or more")
    if v == "exclusiveMinimum":
        return leaf.make("schema-range", f"must be greater than {value}, got {show(instance)}",
                         _RANGE_HINTS.get(last, "") or f"use a number above {value}")
    if v in ("minItems", "minProperties", "minLength"):
        return leaf.make("schema-empty", "must not be empty",
                         _EMPTY_HINTS.get(last, "") or _EMPTY_ENTRY_HINTS.get(_parent(leaf.path), "") or
                         "give it a value, or leave the key out")
    if v == "maxProperties" and last == "select":
        return leaf.make("schema-select", "select takes one of min or max, not both", "e.g. select: {min: loss}")
    if v == "maxProperties":
        return leaf.make("schema-size", f"must have at most {value} key{'s' if value != 1 else ''}",
                         "remove the extra keys")
    if v == "uniqueItems":
        return leaf.make("schema-unique", "must not list an item twice",
                         "each GPU once" if last == "visible_gpus" else "remove the repeated item")
    return None


def _alternatives_diagnostic(leaf: _Leaf) -> Diagnostic | None:
    """anyOf/oneOf: exactly one of some keys, or a value of one of some types."""
    value, instance, path = leaf.error.validator_value, leaf.error.instance, leaf.path
    if _only_required(value):
        if not isinstance(instance, dict):
            return None  # not a mapping at all: the schema's "type" says so, with its own hint
        if path[:2] == ("placement", "rules"):
            return leaf.make("schema-rule", "a rule needs exactly one of 'device' or 'round_robin'",
                             "e.g. {match: {op: variable}, round_robin: /job:ps}")
        keys = " or ".join(f"'{b['required'][0]}'" for b in value)
        return leaf.make("schema-required", f"needs exactly one of {keys}")
    return leaf.make("schema-type", f"expected {_alternatives(value)}, got {_type_name_of(instance)}",
                     _integral_hint(_branch_types(value), instance) or _type_hint(path))


def _unknown_key(doc: Document, path: YamlPath, schema_: dict[str, Any], instance: dict[Any, Any]) -> Diagnostic:
    """``unknown key 'devise' (did you mean 'device'?)``; a key YAML did not read as text says so."""
    allowed = sorted((schema_.get("properties") or {}).keys())
    extra = [k for k in instance if k not in allowed]
    key = extra[0] if extra else ""
    if isinstance(key, str):
        hint = did_you_mean(key, allowed) or (f"allowed keys: {', '.join(allowed)}" if allowed else "remove it")
        return doc.diagnostic("schema-unknown-key", (*path, key), f"unknown key '{key}'", hint, key=True)
    spelled = written(doc, (*path, str(key)), key=True) or show(key)
    kind, hint = non_text_key(key, spelled)
    return doc.diagnostic("schema-unknown-key", (*path, spelled), f"unknown key '{spelled}', which YAML reads as {kind}",
                          hint, key=True)


def _not_finite(value: Any) -> bool:
    return isinstance(value, float) and not math.isfinite(value)


def _only_required(branches: Any) -> bool:
    """anyOf/oneOf branches that each only require a key: "exactly one of device or round_robin"."""
    return isinstance(branches, list) and bool(branches) and \
        all(isinstance(b, dict) and set(b) == {"required"} and len(b["required"]) == 1 for b in branches)


def _branch_types(branches: Any) -> list[str]:
    return [str(b["type"]) for b in branches if isinstance(b, dict) and "type" in b] if isinstance(branches, list) \
        else []


def _integral_hint(expected: Any, instance: Any) -> str:
    """For ``2.0`` or ``1e3`` where an integer is expected: YAML reads both as floats."""
    types = expected if isinstance(expected, list) else [expected]
    if "integer" in types and isinstance(instance, float) and instance.is_integer():
        return f"write {int(instance)}: a number with a decimal point or an exponent is a float in YAML"
    return ""


def _parent(path: YamlPath) -> str:
    """The key an entry belongs to: ``tasks`` for ``tasks[0]``, ``outputs`` for ``outputs.x``."""
    return str(path[-2]) if len(path) >= 2 else ""


_ENUM_HINTS = {
    "gpu_backend": "cupy runs on CUDA GPUs, simulated anywhere; auto picks one",
    "combine": "add_n sums the copies, mean averages them, concat joins them along axis 0",
    "by": "count takes tasks in turn, bytes balances inferred sizes",
    "init": "or give value: [...] instead",
    "format": "or leave it out to use the file's extension",
    "kernels": "cpu or gpu",
    "dtype": "NumPy's names, e.g. float32 or int64",
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
    "replan_after": "seconds, e.g. 20",
    "window": "steps per submitted graph: at least 1",
    "seed": "seeds are 0 or more",
    "header": "the number of lines to skip: 0 or more",
    "memory_limit": "e.g. 2GiB; leave memory_limit out for no limit",
    "limit": "e.g. 1GiB; leave limit out for no limit",
    "total": "e.g. 16GiB",
}


_EMPTY_HINTS = {
    "graph": "add at least one op", "body": "add at least one op", "ops": "add at least one op",
    "state": "e.g. state: {w: w0}", "update": "e.g. update: {w: w_next}", "match": "e.g. match: {op: variable}",
    "jobs": "e.g. jobs: {localhost: {gpus: 1}}, or leave cluster out", "devices": "e.g. devices: [/gpu:0, /gpu:1]",
    "values": "e.g. values: [0.1, 0.01]", "name": "e.g. name: a", "select": "e.g. select: {min: loss}",
    "tasks": "a count, e.g. 2, or a list of host:port", "visible_gpus": "e.g. visible_gpus: [0, 1], or leave it out",
    "kernels": "e.g. kernels: [cpu, gpu]", "tags": "e.g. tags: [heavy], or leave tags out",
    "op": "e.g. op: variable, or op: [variable, add]", "output": "e.g. output: {shape: [2], dtype: float64}",
    "memory_limit": "e.g. 2GiB; leave memory_limit out for no limit", "limit": "e.g. 1GiB", "total": "e.g. 16GiB",
}


# Empty entries of a list or mapping, by the key holding them.
_EMPTY_ENTRY_HINTS = {
    "tasks": "each task is host:port, e.g. worker0.example:2222", "outputs": "a file path, e.g. results/c.npy, or '-'",
    "inputs": "an op name, e.g. a, or a:0 for output 0", "after": "an op name, e.g. init",
}


def _alternatives(branches: Any) -> str:
    """``an integer or a list`` from anyOf branches (their ``type`` or ``const``)."""
    names: list[str] = []
    for branch in branches if isinstance(branches, list) else []:
        if isinstance(branch, dict) and "type" in branch:  # a branch's title says what it is for, if it has one
            name = str(branch["title"]) if "title" in branch else _type_name(branch["type"])
        elif isinstance(branch, dict) and "const" in branch:
            name = show(branch["const"])
        else:
            continue
        if name not in names:
            names.append(name)
    return " or ".join(names) or "another kind of value"


def _type_name(value: Any) -> str:
    names = {"object": "a mapping", "array": "a list", "string": "a string", "integer": "an integer",
             "number": "a number", "boolean": "true or false", "null": "null"}
    if isinstance(value, list):
        return " or ".join(names.get(str(v), str(v)) for v in value)
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
    return f"the number {short(value)}"


def _type_hint(path: YamlPath) -> str:
    last = path[-1] if path else ""
    if isinstance(last, int) and len(path) >= 2 and path[-2] in ("graph", "ops", "body"):
        return "an op is a mapping, e.g. {name: a, op: ones, shape: [2]}"
    if isinstance(last, int) and len(path) >= 2 and path[-2] == "visible_gpus":
        return ("a CUDA ordinal, e.g. 2, or a GPU UUID as nvidia-smi -L prints it, "
                "e.g. GPU-8932f937-d72c-4106-c12f-20bd9faed9f6")
    return {"inputs": "a list of op names, e.g. [a, b]", "after": "a list of op names, e.g. [init]",
            "tags": "a list, e.g. [heavy]", "tasks": "a count, e.g. 2, or a list of host:port",
            "visible_gpus": "a list of CUDA ordinals or GPU UUIDs, e.g. [2, 3]",
            "graph": "a list of ops, e.g. - {name: a, op: constant, value: 1}",
            "memory_limit": "e.g. 2GiB", "limit": "e.g. 1GiB", "shape": "e.g. [1000, 100]",
            "timeout": "seconds as a number, e.g. 30", "no_workers_timeout": "seconds as a number, e.g. 5",
            "replan_after": "seconds as a number, e.g. 20",
            "outputs": "a mapping from op names to files, e.g. outputs: {c: results/c.npy}",
            "values": "a list, e.g. values: [0.1, 1.0]", "devices": "a list, e.g. [/gpu:0, /gpu:1], or a pattern",
            "kernels": "a list, e.g. kernels: [cpu, gpu]", "axes": "a list of axes, e.g. [1, 0]",
            "body": "a list of ops", "ops": "a list of ops",
            "shuffle": "write true (a new order each epoch), once (one order for all) or false"}.get(str(last), "")


# What to write, by the kind of value the schema expects (the last resort of every hint).
_KIND_HINTS = {
    "object": "write key: value pairs, indented below the key or in braces {}",
    "array": "write a list: [a, b], or one '- item' per line",
    "integer": "write a whole number, e.g. 2",
    "number": "write a number, e.g. 0.5",
    "boolean": "write true or false",
    "string": "write text; quote it if it holds ': ' or starts with one of [ ] { } & * ! | > ' \" % @ `",
    "null": "leave it empty",
}


def _kind_hint(doc: Document, path: YamlPath, schema_: Any, instance: Any) -> str:
    """A hint from the kind of value expected: quote a number where text is expected, and so on."""
    expected = schema_.get("type") if isinstance(schema_, dict) else None
    if expected is None and isinstance(schema_, dict):
        expected = _branch_types(schema_.get("anyOf") or schema_.get("oneOf"))
    types = expected if isinstance(expected, list) else [expected]
    if instance is None and "null" not in types:
        return "give it a value: an empty value is null"
    if "string" in types and not isinstance(instance, (str, dict, list)):
        spelled = written(doc, path) or show(instance)
        return f"quote it to make it text: '{spelled}'"
    if "string" in types and isinstance(instance, dict) and len(instance) == 1:
        # [s: 0] is a list holding the mapping {s: 0}: the space after ':' makes a mapping.
        (key, value), = instance.items()
        return f"write '{key}:{short(value)}' with no space after ':', or quote it; ': ' makes a mapping"
    for kind in types:
        if kind in _KIND_HINTS:
            return _KIND_HINTS[str(kind)]
    return "see 'orchestrate schema' for what this key accepts"


def _required_hint(key: str) -> str:
    return {"version": "start the file with 'version: 1'", "graph": "add a 'graph:' list of ops",
            "name": "every op and construct needs a unique name", "op": "e.g. op: matmul",
            "match": "e.g. match: {op: variable}", "ops": "a scope lists its ops: ops: [{name: a, op: ones, ...}]",
            "scope": "e.g. scope: /job:worker/gpu:0", "devices": "e.g. devices: [/gpu:0, /gpu:1]",
            "body": "the ops of each copy or step: body: [{name: c, op: matmul, inputs: [x, w]}]",
            "steps": "e.g. steps: 100", "state": "the carried values and their initial ops, e.g. state: {w: w0}",
            "update": "the next step's state, e.g. update: {w: w_next}", "param": "e.g. param: lam",
            "values": "the parameter values, one copy each, e.g. values: [0.1, 1.0]",
            "shape": "e.g. output: {shape: [2], dtype: float64}",
            "ca_file": "TLS needs ca_file, cert and key (PEM files)", "cert": "TLS needs ca_file, cert and key (PEM files)",
            "key": "TLS needs ca_file, cert and key (PEM files)",
            "replicate": "e.g. replicate: {devices: [/gpu:0, /gpu:1], body: [...]}",
            "iterate": "e.g. iterate: {steps: 100, state: {w: w0}, body: [...], update: {w: w_next}}",
            "sweep": "e.g. sweep: {param: lam, values: [0.1, 1.0], body: [...]}",
            }.get(key, f"add '{key}:'")
