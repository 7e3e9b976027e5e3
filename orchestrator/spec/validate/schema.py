"""The JSON Schema check: fast acceptance, then every violation with its path and a hint.

One schema, ``schemas/spec.schema.json``, judged two ways for two jobs.
Accepting a valid document must cost little beside parsing it (benchmark B2:
validate + place + plan + compile within 1.5x of libyaml's parse): code that
fastjsonschema generates from the schema accepts a 10k-op spec in about
0.05 s of CPU, where jsonschema takes 1.1 s even when each graph item is
given its kind's schema directly (3-4 s through the schema's if/then).
Explaining a rejected one needs every violation, with the alternatives
that failed inside ``anyOf``: only jsonschema gives those (through
:mod:`orchestrator.jsonschemas`, its one home), and :mod:`.schema_errors`
turns them into diagnostics with hints. So fastjsonschema answers "valid?",
and only a "no" runs jsonschema.

Both read ``"type": "integer"`` strictly, as a Python ``int``. JSON Schema
(since draft 6) calls ``2.0`` an integer, but the stages after validation
hand counts and dimensions to ``range`` and NumPy, which refuse floats:
``shape: [1e3]`` (a float in YAML 1.2) or ``tasks: 2.0`` used to pass
validation and fail at run time. Now they are schema errors saying to write
``1000`` or ``2``. jsonschema is given a strict integer type checker (its
extension point); fastjsonschema generates its code with draft 4's type test
(a generator class of its own, not an edit of the code it generated).
"""

from __future__ import annotations

import contextlib
import hashlib
import marshal
import os
import re
import sys
from collections.abc import Iterable
from functools import lru_cache
from types import CodeType
from typing import Any

from ... import jsonschemas
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


def schema_text() -> str:
    return jsonschemas.schema_text(jsonschemas.SPEC)


def schema() -> dict[str, Any]:
    return jsonschemas.schema(jsonschemas.SPEC)


@lru_cache(maxsize=1)
def _fast_validators() -> tuple[Any, dict[str, Any]]:
    """Compiled validators: the document without its graph items, and one per item kind.

    Dispatching items by kind here, as the schema's if/then does, avoids the
    exceptions fastjsonschema raises inside every failed ``if`` — 9 per op.
    The generated code (3.5 MB of Python) took 1.1 s to generate and compile,
    in every process, before any spec was checked: it is kept compiled in the
    user's cache (:func:`_cached_code`), keyed by the schema's text, the
    fastjsonschema release and the Python that compiled it.
    """
    import fastjsonschema

    key = hashlib.sha256("\0".join((schema_text(), str(fastjsonschema.VERSION), sys.version, _GENERATOR))
                         .encode("utf-8")).hexdigest()[:32]
    codes = _cached_code(key)
    if codes is None:
        codes = {kind: (compile(source, f"<spec schema: {kind}>", "exec"), name)
                 for kind, (source, name) in _generated().items()}
        _keep_code(key, codes)
    validators = {}
    for kind, (code, name) in codes.items():
        namespace: dict[str, Any] = {}
        exec(code, namespace)  # noqa: S102 - our own schema's generated code, as fastjsonschema.compile runs it
        validators[kind] = namespace[name]
    top = validators.pop("")
    return top, validators


_GENERATOR = "strict-integers-1"  # a change to _StrictIntegers changes this, and so the cached code's key


def _generated() -> dict[str, tuple[str, str]]:
    """Per item kind (``""``: the document without its items), the validator's source and its function's name."""
    import copy

    # fastjsonschema rewrites the $refs of the schema it compiles in place (to absolute URIs):
    # compile a copy, so that schema() stays the file's schema for every other reader.
    full = copy.deepcopy(schema())
    defs = full["$defs"]
    top = {**full, "properties": {**full["properties"], "graph": {"type": "array", "minItems": 1}}}
    # the kinds first, then the document: generating code for the document (it has an $id) rewrites the $refs
    # of the $defs the kinds share, which the kinds' generators would then look for at that address
    made = {kind: _source({"$schema": full["$schema"], "$defs": defs, **defs[kind]}) for kind in ("op", *CONSTRUCTS)}
    made[""] = _source(top)
    return made


def _cache_file(key: str) -> str:
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(root, "orchestrator", f"spec-validators-{key}.marshal")


def _cached_code(key: str) -> dict[str, tuple[CodeType, str]] | None:
    """The compiled validators kept by an earlier process, or None (none kept, or unreadable: made again)."""
    try:
        with open(_cache_file(key), "rb") as handle:
            codes = marshal.load(handle)
    except (OSError, EOFError, ValueError, TypeError):
        return None
    whole = isinstance(codes, dict) and "" in codes and all(
        isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[0], CodeType) and isinstance(entry[1], str)
        for entry in codes.values())
    return codes if whole else None


def _keep_code(key: str, codes: dict[str, tuple[CodeType, str]]) -> None:
    """Keep the compiled validators for the next process; a cache that cannot be written costs only time."""
    path = _cache_file(key)
    temporary = f"{path}.{os.getpid()}.tmp"
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(temporary, "wb") as handle:
            marshal.dump(codes, handle)
        os.replace(temporary, path)  # whole or not at all: another process may be reading it
    except OSError:
        with contextlib.suppress(OSError):  # a full disk: leave no half-written file behind
            os.remove(temporary)


def _source(definition: dict[str, Any]) -> tuple[str, str]:
    """fastjsonschema's validator of ``definition`` as source (and its function's name), generated with integers
    that are ints only (not ``2.0``).

    fastjsonschema picks its code generator by the schema's ``$schema``; for
    2020-12 that is its 2019-09 generator (draft 7's before 2.20), whose
    ``type`` test is draft 6's (``2.0`` is an integer). :class:`_StrictIntegers` is that generator with
    draft 4's test (an int, not a bool), the one jsonschema is given below.
    The source is what ``fastjsonschema.compile_to_code`` writes: its state, then its functions.
    """
    from fastjsonschema.ref_resolver import RefResolver

    resolver = RefResolver.from_schema(definition, handlers={}, store={})
    generator = _StrictIntegers.make(definition, resolver)
    return f"{generator.global_state_code}\n{generator.func_code}", str(resolver.get_scope_name())


class _StrictIntegers:
    """The generator class, made on first use (fastjsonschema is imported only when a spec is checked)."""

    _class: Any = None

    @classmethod
    def make(cls, definition: dict[str, Any], resolver: Any) -> Any:
        if cls._class is None:
            from fastjsonschema.draft04 import CodeGeneratorDraft04

            latest: Any
            try:  # the generator fastjsonschema.compile picks for a 2020-12 schema
                from fastjsonschema.draft2019 import CodeGeneratorDraft2019 as latest
            except ImportError:  # before 2.20 (the floor is 2.19): draft 7's, as compile picked there
                from fastjsonschema.draft07 import CodeGeneratorDraft07 as latest
            cls._class = type("CodeGeneratorStrictIntegers", (latest,),
                              {"generate_type": CodeGeneratorDraft04.generate_type})
        return cls._class(definition, resolver=resolver)


def _full_validator() -> Any:
    """jsonschema's 2020-12 validator of the spec schema, with strict integers (:mod:`orchestrator.jsonschemas`)."""
    return jsonschemas.validator(jsonschemas.SPEC)


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
    return jsonschemas.validator_of({"$defs": schema()["$defs"], "$ref": "#/$defs/item"})


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
