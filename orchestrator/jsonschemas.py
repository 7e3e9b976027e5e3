"""The published JSON Schemas and the one validator that reads them (the only module importing jsonschema).

``schemas/`` holds two schemas, shipped in the wheel as ``orchestrator.schemas``:
``spec.schema.json``, the spec language (checked by ``spec.validate.schema``,
which turns every violation into a diagnostic), and
``run-report.schema.json``, the run report that ``run --report`` writes and
``orchestrate report`` reads (``report.html.view``). Editors, CI and other
tools read the same files.

Both are read by jsonschema's 2020-12 validator with one change, made
through its type checker: ``"type": "integer"`` is a Python ``int`` (not a
bool, not ``2.0``), as the stages that hand counts to ``range`` and NumPy
need. The files, parsed schemas and validators are made once per process,
on first use, so that importing this module costs nothing.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from typing import Any

SPEC = "spec.schema.json"
RUN_REPORT = "run-report.schema.json"


@lru_cache(maxsize=None)
def schema_text(name: str) -> str:
    """The text of ``schemas/NAME`` as installed."""
    return resources.files("orchestrator.schemas").joinpath(name).read_text(encoding="utf-8")


@lru_cache(maxsize=None)
def schema(name: str) -> dict[str, Any]:
    """``schemas/NAME``, parsed (shared: do not change it)."""
    loaded: dict[str, Any] = json.loads(schema_text(name))
    return loaded


def _strict_int(_checker: Any, instance: Any) -> bool:
    return type(instance) is int  # not bool, not 2.0


@lru_cache(maxsize=1)
def _validator_class() -> Any:
    import jsonschema

    base = jsonschema.Draft202012Validator
    extend: Any = jsonschema.validators.extend  # untyped in jsonschema's stubs
    return extend(base, type_checker=base.TYPE_CHECKER.redefine("integer", _strict_int))


@lru_cache(maxsize=None)
def validator(name: str) -> Any:
    """The validator of ``schemas/NAME``: ``iter_errors(data)`` yields every violation."""
    return _validator_class()(schema(name))


def validator_of(definition: dict[str, Any]) -> Any:
    """A validator of a part of a schema (``{"$defs": ..., "$ref": ...}``), with the same strict integers."""
    return _validator_class()(definition)
