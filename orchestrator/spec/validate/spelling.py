"""Values and keys in diagnostics, written the way the user wrote them in YAML.

Every check of :mod:`orchestrator.spec.validate` names values as YAML spells them
(``'text'``, ``true``, ``.inf``, not Python's or JSON's ``True`` or
``Infinity``) and keys as the file has them (``on``, which YAML 1.1 reads as
the boolean true).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from ...errors import YamlPath
from ..records import Document

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
    leave = f", or leave {field} out for its default" if field and not field.isdigit() else ""
    return (f"must be a finite number, got {show(value)}",
            f"write a finite number{leave}; YAML reads .nan and .inf as not-a-number and infinity, which only an "
            "op's data may hold")


_DURATIONS = {
    "timeout": "e.g. timeout: 600; leave timeout out for no time limit",
    "no_workers_timeout": "e.g. no_workers_timeout: 30; leave it out for the default of 5 seconds",
    "replan_after": "e.g. replan_after: 30; leave it out for the default of 20 seconds",
}


def _size_hint(field: str) -> str:
    return "e.g. 16GiB" if field == "total" else f"e.g. 2GiB; leave {field} out for no limit"


def show(value: Any) -> str:
    """A value as the user wrote it in YAML: 'text', 12, true, null, [1, 2], .inf."""
    if isinstance(value, str):
        return f"'{value}'"
    return short(value)


def short(value: Any) -> str:
    """A value as JSON writes it, but with YAML's ``.inf`` and ``.nan``, cut to 40 characters: ``[1, .inf]``."""
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
