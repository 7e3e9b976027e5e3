"""The JSON Schema check: fast acceptance, then every violation with its path and a hint.

The schema check has a fast path: a compiled validator (fastjsonschema)
accepts a valid document in a small fraction of YAML parsing time; only when
it rejects do we run ``jsonschema`` (the only module importing it) to collect
*every* violation with its path, turned into diagnostics with hints.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from typing import Any, Iterable

from ..constructs import CONSTRUCTS
from ..errors import Diagnostic, YamlPath, did_you_mean
from ..model import Document


@lru_cache(maxsize=1)
def schema_text() -> str:
    return resources.files("orchestrator.schemas").joinpath("spec.schema.json").read_text(encoding="utf-8")


@lru_cache(maxsize=1)
def schema() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(schema_text())
    return loaded


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
             for kind in ("op", *CONSTRUCTS)}
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
            kind = next((k for k in CONSTRUCTS if k in item), "op")
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
        return doc.diagnostic("schema-enum", path, f"{show(error.instance)} is not one of: {options}", hint)
    if v == "const":
        return doc.diagnostic("schema-const", path, f"must be {show(value)}, not {show(error.instance)}",
                              "this tool reads version 1 specs" if path == ("version",) else "")
    if v == "type":
        return doc.diagnostic("schema-type", path, f"expected {_type_name(value)}, got {_type_name_of(error.instance)}",
                              _type_hint(path))
    if v == "pattern" and path and path[-1] == "name":
        return doc.diagnostic("schema-name", path, f"invalid op name {show(error.instance)}",
                              "names use letters, digits, _ . -; '/' and ':' are reserved")
    if v == "pattern":
        # Only job names have a pattern besides op names; propertyNames reports the
        # mapping's path, so point at the offending key itself.
        return doc.diagnostic("schema-name", (*path, str(error.instance)), f"invalid job name {show(error.instance)}",
                              "job names use letters, digits, _ and -, and start with a letter or _", key=True)
    if v == "minimum":
        return doc.diagnostic("schema-range", path, f"must be at least {value}, got {show(error.instance)}",
                              _RANGE_HINTS.get(last, ""))
    if v == "exclusiveMinimum":
        return doc.diagnostic("schema-range", path, f"must be greater than {value}, got {show(error.instance)}",
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


def show(value: Any) -> str:
    """A value as the user wrote it in YAML: 'text', 12, true, null, [1, 2]."""
    if isinstance(value, str):
        return f"'{value}'"
    return short(value)


def _alternatives(branches: Any) -> str:
    """``an integer or a list`` from anyOf branches (their ``type`` or ``const``)."""
    names: list[str] = []
    for branch in branches if isinstance(branches, list) else []:
        if isinstance(branch, dict) and "type" in branch:
            name = _type_name(branch["type"])
        elif isinstance(branch, dict) and "const" in branch:
            name = show(branch["const"])
        else:
            continue
        if name not in names:
            names.append(name)
    return " or ".join(names) or "another kind of value"


def short(value: Any) -> str:
    text = json.dumps(value, default=str, separators=(", ", ": "))
    return text if len(text) <= 40 else text[:37] + "..."


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
