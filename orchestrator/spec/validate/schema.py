"""The JSON Schema check: fast acceptance, then every violation with its path and a hint.

The schema check has a fast path: a compiled validator (fastjsonschema)
accepts a valid document in a small fraction of YAML parsing time; only when
it rejects do we run ``jsonschema`` (the only module importing it) to collect
*every* violation with its path, turned into diagnostics with hints by
:mod:`.schema_errors`.

Both validators read ``"type": "integer"`` strictly, as a Python ``int``.
JSON Schema (since draft 6) calls ``2.0`` an integer, but the stages after
validation hand counts and dimensions to ``range`` and NumPy, which refuse
floats: ``shape: [1e3]`` (a float in YAML 1.2) or ``tasks: 2.0`` used to pass
validation and fail at run time. Now they are schema errors saying to write
``1000`` or ``2``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from functools import lru_cache
from importlib import resources
from typing import Any

from ..constructs import CONSTRUCTS
from ...errors import Diagnostic, YamlPath
from ..records import Document
from .schema_errors import schema_diagnostic

# The other checks import these from here, where they were first written; they live in .spelling.
from .spelling import BOOL_KEYS, finite_problem, non_text_key, short, show, written

__all__ = [
    "BOOL_KEYS",
    "check_copy_items",
    "check_schema",
    "finite_problem",
    "non_text_key",
    "schema",
    "schema_text",
    "short",
    "show",
    "written",
]


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
            if _copy_use(leaf):  # checked once the sweep has put each copy's value there (check_copy_items)
                continue
            diag = schema_diagnostic(doc, leaf)
            if diag is not None:
                found.setdefault((diag.path, diag.message), diag)
    return sorted(found.values(), key=lambda d: (d.line, d.column, d.message))


_WHOLE_COPY_USE = re.compile(r"\s*\$\{\s*copy\.[A-Za-z0-9_]+\s*\}\s*\Z")


def _copy_use(error: Any) -> bool:
    """A complaint about a ``${copy.NAME}`` standing for a whole value inside a sweep's (or replicate's) body."""
    path = list(error.absolute_path)
    inside = any(a in ("sweep", "replicate") and b == "body" for a, b in zip(path, path[1:]))
    return inside and isinstance(error.instance, str) and _WHOLE_COPY_USE.match(error.instance) is not None


@lru_cache(maxsize=1)
def _item_validator() -> Any:
    return type(_full_validator())({"$defs": schema()["$defs"], "$ref": "#/$defs/item"})


def check_copy_items(doc: Document, bodies: Iterable[tuple[YamlPath, int, Any]]) -> list[Diagnostic]:
    """Each sweep body with its copy's values in place, against the schema (the first copy a value fails in)."""
    found: dict[YamlPath, Diagnostic] = {}
    for path, copy, body in bodies:
        for index, item in enumerate(body):
            for error in _item_validator().iter_errors(item):
                for leaf in _leaves(error):
                    where = (*path, index, *leaf.absolute_path)
                    diag = schema_diagnostic(doc, leaf)
                    if diag is not None and where not in found:
                        found[where] = doc.diagnostic(diag.code, where, f"in copy {copy}: {diag.message}", diag.hint)
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
        found = False
        for leaf in best:
            if len(leaf.absolute_path) == deepest and leaf.validator != "anyOf":
                found = True
                yield from _leaves(leaf)
        if not found:  # only alternatives deeper down (a list whose item fits none): say so there
            for leaf in best:
                if len(leaf.absolute_path) == deepest:
                    yield from _leaves(leaf)
        return
    yield error
