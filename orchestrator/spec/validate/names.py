"""Keys that are names must be text; and one report per mistake, not one per construct copy."""

from __future__ import annotations

import re
from typing import Any, Iterable, Mapping, Sequence

from ..constructs import construct_of
from ...errors import Diagnostic, YamlPath
from .checker import Checker
from .schema import non_text_key, show, written


def check_name_keys(c: Checker, data: Mapping[str, Any]) -> None:
    """Keys that are names (jobs, outputs, state variables, keyword parameters, ...) must be text.

    YAML reads ``1:``, ``null:`` and ``yes:`` as a number, null and a boolean;
    JSON Schema only ever sees text keys, so it cannot say so. Runs on
    schema-valid data, visiting only the mappings whose keys are names.
    """
    def keys(mapping: Any, path: YamlPath) -> None:
        if not isinstance(mapping, dict):
            return
        for key in mapping:
            if isinstance(key, bool):
                # 'on:' is True to YAML 1.1: name the key as written, with the hint the schema's check gives.
                spelled = written(c.doc, (*path, str(key)), key=True) or show(key)
                kind, hint = non_text_key(key, spelled)
                c.error("key-type", (*path, spelled), f"key '{spelled}' is read as {kind}; names are text", hint,
                        key=True)
            elif not isinstance(key, str):
                kind = "null" if key is None else "a number" if isinstance(key, (int, float)) else "not text"
                c.error("key-type", (*path, str(key)), f"key {show(key)} is {kind}; names are text",
                        f"quote it to make it a name: '{show(key)}'", key=True)

    def items(graph: Sequence[Any], path: YamlPath) -> None:
        for index, item in enumerate(graph):
            inputs, params = item.get("inputs"), item.get("params")
            if type(inputs) is dict:  # a list of inputs has no keys: the common case stays cheap
                keys(inputs, (*path, index, "inputs"))
            if params:
                keys(params, (*path, index, "params"))
            if "name" in item and "op" in item:
                continue
            construct = construct_of(item)
            if construct is None:
                continue
            spec = item[construct.key]
            for field in construct.name_fields:
                keys(spec.get(field), (*path, index, construct.key, field))
            body, parts = construct.body(item)
            items(body or [], (*path, index, *parts))

    keys((data.get("cluster") or {}).get("jobs"), ("cluster", "jobs"))
    keys(data.get("outputs"), ("outputs",))
    items(data["graph"], ("graph",))


_COPY_INDEX = re.compile(r"/\d+/")


def once_per_copy(diags: Iterable[Diagnostic]) -> list[Diagnostic]:
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
