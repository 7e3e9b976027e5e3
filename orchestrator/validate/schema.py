"""The JSON Schema check: fast acceptance, then every violation with its path and a hint.

The schema check has a fast path: a compiled validator (fastjsonschema)
accepts a valid document in a small fraction of YAML parsing time; only when
it rejects do we run ``jsonschema`` (the only module importing it) to collect
*every* violation with its path, turned into diagnostics with hints.

Both validators read ``"type": "integer"`` strictly, as a Python ``int``.
JSON Schema (since draft 6) calls ``2.0`` an integer, but the stages after
validation hand counts and dimensions to ``range`` and NumPy, which refuse
floats: ``shape: [1e3]`` (a float in YAML 1.2) or ``tasks: 2.0`` used to pass
validation and fail at run time. Now they are schema errors saying to write
``1000`` or ``2``.

Every diagnostic made here has a hint: a field's own when there is one, else
one for the kind of value expected.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable
from functools import lru_cache
from importlib import resources
from typing import Any

from ..constructs import CONSTRUCTS
from ..devices import gpu_id_problem
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


    # fastjsonschema rewrites the $refs of the schema it compiles in place (to absolute URIs):
    # compile a copy, so that schema() stays the file's schema for every other reader.
    full = copy.deepcopy(schema())
    defs = full["$defs"]
    top = {**full, "properties": {**full["properties"], "graph": {"type": "array", "minItems": 1}}}
    kinds = {kind: _compile_strict({"$schema": full["$schema"], "$defs": defs, **defs[kind]})
             for kind in ("op", *CONSTRUCTS)}
    return _compile_strict(top), kinds


# fastjsonschema writes its integer test as "not isinstance(x, (int)) and not
# (isinstance(x, float) and x.is_integer()) or isinstance(x, bool)": dropping
# the middle clause leaves exactly the strict test jsonschema is given below.
_INTEGRAL_FLOAT_CLAUSE = re.compile(r" and not \(isinstance\((\w+), float\) and \1\.is_integer\(\)\)")


def _compile_strict(definition: dict[str, Any]) -> Callable[[Any], Any]:
    """A fastjsonschema validator of ``definition`` whose integers are ints only (not ``2.0``).

    When the generated code does not have the expected form (another
    fastjsonschema version), the validator accepts nothing, so every document
    goes to the (strict, slower) jsonschema check: never a false yes.
    """
    import fastjsonschema

    code = fastjsonschema.compile_to_code(definition)
    strict = _INTEGRAL_FLOAT_CLAUSE.sub("", code)
    entry = _ENTRY.search(strict)  # the schema's own function comes first; its name follows the $id
    namespace: dict[str, Any] = {}
    if entry is not None and "is_integer()" not in strict:
        exec(compile(strict, "<spec schema>", "exec"), namespace)  # what fastjsonschema.compile does
    validator = namespace.get(entry.group(1)) if entry is not None else None
    return validator if callable(validator) else _reject_all


_ENTRY = re.compile(r"^def (\w+)\(data\b", re.MULTILINE)


def _reject_all(data: Any) -> Any:
    import fastjsonschema

    raise fastjsonschema.JsonSchemaValueException("the fast validator is not available")


def _strict_int(_checker: Any, instance: Any) -> bool:
    return type(instance) is int  # not bool, not 2.0


@lru_cache(maxsize=1)
def _full_validator() -> Any:
    """jsonschema's 2020-12 validator of the spec schema, with strict integers."""
    import jsonschema

    base = jsonschema.Draft202012Validator
    extend: Any = jsonschema.validators.extend  # untyped in jsonschema's stubs
    return extend(base, type_checker=base.TYPE_CHECKER.redefine("integer", _strict_int))(schema())


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
    found: dict[tuple[YamlPath, str], Diagnostic] = {}
    for error in _full_validator().iter_errors(doc.data):
        for leaf in _leaves(error):
            diag = _schema_diagnostic(doc, leaf)
            if diag is not None:
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


def _schema_diagnostic(doc: Document, error: Any) -> Diagnostic | None:
    """The diagnostic of one leaf error, always with a hint; None when another leaf says it better."""
    path: YamlPath = tuple(error.absolute_path)
    v, value, instance = error.validator, error.validator_value, error.instance
    if v == "additionalProperties" and isinstance(instance, dict):
        return _unknown_key(doc, path, error.schema, instance)
    last = str(path[-1]) if path else ""
    if len(path) >= 2 and path[-2] in ("combine", "kernels", "shape", "visible_gpus"):
        last = str(path[-2])  # an entry of a mapping or list: the hint belongs to its parent

    def make(code: str, message: str, hint: str = "", at: YamlPath = path, key: bool = False) -> Diagnostic:
        return doc.diagnostic(code, at, message, hint or _kind_hint(doc, path, error.schema, instance), key=key)

    if v == "required":
        missing = error.message.split("'")[1] if "'" in error.message else str(value)
        return make("schema-required", f"missing required key '{missing}'", _required_hint(missing))
    if v == "enum":
        options = ", ".join(map(str, value))
        hint = did_you_mean(str(instance), [str(o) for o in value]) or _ENUM_HINTS.get(last, "") or \
            "values are case-sensitive: write one exactly as listed"
        return make("schema-enum", f"{show(instance)} is not one of: {options}", hint)
    if v == "const":
        quoted = isinstance(instance, str) and instance == str(value)  # version: "1"
        return make("schema-const", f"must be {show(value)}, not {show(instance)}",
                    f"write {show(value)} without quotes: quoted, it is text" if quoted else
                    "this tool reads version 1 specs" if path == ("version",) else f"write {show(value)}")
    if _not_finite(instance) and v in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"):
        return make("schema-range", *finite_problem(last, instance))
    if v == "type":
        return make("schema-type", f"expected {_type_name(value)}, got {_type_name_of(instance)}",
                    _integral_hint(value, instance) or _type_hint(path))
    if v == "pattern" and path and path[-1] == "name":
        return make("schema-name", f"invalid op name {show(instance)}",
                    "names use letters, digits, _ . -; '/' and ':' are reserved")
    if v == "pattern" and _parent(path) == "visible_gpus":
        message, hint = gpu_id_problem(str(instance)) or (f"{show(instance)} is not a GPU", "")
        return make("gpus", message, hint)
    if v == "pattern":
        # Only job names have a pattern besides op names and GPU UUIDs; propertyNames reports the
        # mapping's path, so point at the offending key itself.
        return make("schema-name", f"invalid job name {show(instance)}",
                    "job names use letters, digits, _ and -, and start with a letter or _",
                    at=(*path, str(instance)), key=True)
    if v == "minimum":
        return make("schema-range", f"must be at least {value}, got {show(instance)}",
                    _RANGE_HINTS.get(last, "") or f"use {value} or more")
    if v == "exclusiveMinimum":
        return make("schema-range", f"must be greater than {value}, got {show(instance)}",
                    _RANGE_HINTS.get(last, "") or f"use a number above {value}")
    if v in ("minItems", "minProperties", "minLength"):
        return make("schema-empty", "must not be empty",
                    _EMPTY_HINTS.get(last, "") or _EMPTY_ENTRY_HINTS.get(_parent(path), "") or
                    "give it a value, or leave the key out")
    if v == "maxProperties" and last == "select":
        return make("schema-select", "select takes one of min or max, not both", "e.g. select: {min: loss}")
    if v == "maxProperties":
        return make("schema-size", f"must have at most {value} key{'s' if value != 1 else ''}", "remove the extra keys")
    if v == "uniqueItems":
        return make("schema-unique", "must not list an item twice",
                    "each GPU once" if last == "visible_gpus" else "remove the repeated item")
    if v in ("anyOf", "oneOf") and _only_required(value):
        if not isinstance(instance, dict):
            return None  # not a mapping at all: the schema's "type" says so, with its own hint
        if path[:2] == ("placement", "rules"):
            return make("schema-rule", "a rule needs exactly one of 'device' or 'round_robin'",
                        "e.g. {match: {op: variable}, round_robin: /job:ps}")
        keys = " or ".join(f"'{b['required'][0]}'" for b in value)
        return make("schema-required", f"needs exactly one of {keys}")
    if v in ("anyOf", "oneOf"):
        return make("schema-type", f"expected {_alternatives(value)}, got {_type_name_of(instance)}",
                    _integral_hint(_branch_types(value), instance) or _type_hint(path))
    return make(f"schema-{v}", error.message, f"see 'orchestrate schema' for what {last or 'the spec'} accepts")


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


BOOL_KEYS = "YAML 1.1 reads yes/no, on/off and true/false as booleans"


def non_text_key(key: Any, spelled: str) -> tuple[str, str]:
    """What YAML made of a key that is not text, and the hint to quote it (``on:`` is the boolean true)."""
    if isinstance(key, bool):
        return f"the boolean {str(key).lower()}", f"quote it to make it text: '{spelled}'; {BOOL_KEYS}"
    kind = "null" if key is None else "a number" if isinstance(key, (int, float)) else "not text"
    return kind, f"quote it to make it text: '{spelled}'"


def written(doc: Document, path: YamlPath, key: bool = False) -> str | None:
    """The text the file has at ``path`` (its key's, with ``key``); None when it cannot be told.

    Only the loader's locator can tell (``Document.locate_fn``): the data has
    ``True`` where the file says ``on``.
    """
    spelling = getattr(doc.locate_fn, "written", None)
    if not callable(spelling):
        return None
    text = spelling(tuple(path), key)
    return text if isinstance(text, str) else None


def finite_problem(field: str, value: Any) -> tuple[str, str]:
    """Message and hint for ``.inf`` or ``.nan`` where a duration, a size or another number is expected."""
    if field in _DURATIONS:
        return f"must be a finite number of seconds, got {show(value)}", _DURATIONS[field]
    if field in ("memory_limit", "limit", "total"):
        return f"must be a finite size, got {show(value)}", _size_hint(field)
    return f"must be a finite number, got {show(value)}", "YAML reads .inf and .nan as infinity and not-a-number"


_DURATIONS = {
    "timeout": "e.g. timeout: 600; leave timeout out for no time limit",
    "no_workers_timeout": "e.g. no_workers_timeout: 30; leave it out for the default of 5 seconds",
}


def _size_hint(field: str) -> str:
    return "e.g. 16GiB" if field == "total" else f"e.g. 2GiB; leave {field} out for no limit"


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


def show(value: Any) -> str:
    """A value as the user wrote it in YAML: 'text', 12, true, null, [1, 2], .inf."""
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
    text = json.dumps(_yaml_numbers(value), default=_marked, separators=(", ", ": "))
    text = _MARKED.sub(lambda m: m.group(1), text)
    return text if len(text) <= 40 else text[:37] + "..."


class _YamlNumber:
    """A non-finite float, to be written as YAML writes it (``.inf``, ``-.inf``, ``.nan``), not as JSON's ``Infinity``."""

    __slots__ = ("text",)

    def __init__(self, value: float):
        self.text = ".nan" if math.isnan(value) else ".inf" if value > 0 else "-.inf"


def _marked(value: Any) -> str:
    # json.dumps calls this for what it cannot write; the marks are replaced after it.
    return f"\0{value.text}\0" if isinstance(value, _YamlNumber) else str(value)


_MARKED = re.compile(r'"\\u0000([^"\\]*)\\u0000"')


def _yaml_numbers(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return _YamlNumber(value)
    if isinstance(value, list):
        return [_yaml_numbers(v) for v in value[:20]]  # short() shows 40 characters: 20 items are plenty
    if isinstance(value, dict):
        return {k: _yaml_numbers(v) for k, v in list(value.items())[:20]}
    return value


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
            "outputs": "a mapping from op names to files, e.g. outputs: {c: results/c.npy}",
            "values": "a list, e.g. values: [0.1, 1.0]", "devices": "a list, e.g. [/gpu:0, /gpu:1], or a pattern",
            "kernels": "a list, e.g. kernels: [cpu, gpu]", "axes": "a list of axes, e.g. [1, 0]",
            "body": "a list of ops", "ops": "a list of ops"}.get(str(last), "")


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
