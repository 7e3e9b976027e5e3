"""How nodes become values: safe tags only, duplicate keys found, JSON-compatible data, YAML 1.2 numbers.

*Safe YAML only.* Documents are parsed with ``yaml.CSafeLoader`` (libyaml) when
it is available, else ``yaml.SafeLoader``. Any tag outside plain YAML (Python
tags such as ``!!python/object``, ``!!binary``, ``!!set``, local ``!foo`` tags) is
refused by the composer before anything is constructed, so no tag can run code
or produce data that is not JSON-compatible.

*Duplicate keys are errors.* YAML loaders silently keep the last of two equal
keys, so a copy-pasted op silently loses half its settings. Every key written
twice in the same mapping is recorded here and reported (all of them, in one
error). Keys that come from a merge (``<<: *base``) and are then overridden are
the point of merging and are not duplicates.

*Numbers as YAML 1.2 reads them.* PyYAML follows YAML 1.1, where a float
needs a dot and a signed exponent: ``1e-3``, ``1e5`` and ``-2E4`` are strings
there, so ``scalar: 1e-3`` would be refused as text and ``params: {lr: 1e-3}``
would hand user code a string. The loader adds YAML 1.2's (core schema)
float forms to the resolver of both loader bases: an exponent with or without
a sign or a dot, and a signed ``-.5``. Integers stay integers (``09`` and
``1_000`` resolve as before); ``.inf`` and ``.nan`` stay floats (validation
refuses them where a duration or a size is expected).
"""

from __future__ import annotations

import datetime
import re
from typing import Any, Callable

from .problems import Problem, show_tag
from .pyyaml import (
    FLOAT_TAG,
    LOADER_BASE,
    MERGE_TAG,
    STR_TAG,
    TAG_PREFIX,
    MappingNode,
    Node,
    SafeConstructor,
    ScalarNode,
)

# YAML 1.2 core schema floats that YAML 1.1 (PyYAML) reads as strings: an
# exponent (1e5, 1e-3, -2E4, 1.0e3, .5e3), or a sign before a leading dot
# (-.5). Forms both versions read as floats already stay with PyYAML's own
# resolver; forms that are integers in either version never match here.
_YAML12_FLOAT = re.compile(r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)[eE][-+]?[0-9]+|[-+]\.[0-9]+)$")


class SpecConstructor(SafeConstructor):
    """SafeConstructor that reports duplicate keys and yields JSON-compatible values.

    Usable standalone (``SpecConstructor()``) to construct single scalar keys
    for the locator, and as the first base of :data:`SpecLoader`.
    """

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)  # cooperative: the loader base takes the stream
        # (key, first key node, second key node, mapping node) per duplicate.
        self.duplicates: list[tuple[Any, Node, Node, Node]] = []
        self._checked: set[int] = set()

    def flatten_mapping(self, node: MappingNode) -> None:
        # flatten_mapping is the first thing to touch a mapping (construct_mapping
        # calls it, and it recurses into merge sources before they are built),
        # and it rewrites node.value with the merged pairs. Checking here, once
        # per node, sees exactly the pairs the user wrote; merged-in keys are
        # never compared with the keys that override them.
        if id(node) not in self._checked:
            self._checked.add(id(node))
            self._check_duplicates(node)
        super().flatten_mapping(node)

    def _check_duplicates(self, node: MappingNode) -> None:
        seen: dict[Any, Node] = {}
        for key_node, _ in node.value:
            tag = key_node.tag
            if tag == STR_TAG:
                key: Any = key_node.value  # fast path: nearly every key is a plain string
            elif tag == MERGE_TAG:
                continue
            else:
                key = self.construct_object(key_node)
                try:
                    hash(key)
                except TypeError:
                    continue  # construct_mapping reports unhashable keys itself
            first = seen.get(key, _MISSING)
            if first is _MISSING:
                seen[key] = key_node
            else:
                self.duplicates.append((key, first, key_node, node))

    def construct_iso_timestamp(self, node: ScalarNode) -> str:
        # Keep YAML 1.1 timestamp resolution but hand on ISO strings: the data
        # must stay JSON-compatible for schema validation. A value that looks
        # like a date but is not one (2024-13-01) stays the text it was.
        try:
            value = SafeConstructor.construct_yaml_timestamp(self, node)
        except (ValueError, TypeError, AttributeError):
            return str(self.construct_scalar(node))
        assert isinstance(value, (datetime.date, datetime.datetime))
        return value.isoformat()

    def construct_checked_int(self, node: ScalarNode) -> Any:
        return self._checked_scalar(SafeConstructor.construct_yaml_int, node)

    def construct_checked_float(self, node: ScalarNode) -> Any:
        return self._checked_scalar(SafeConstructor.construct_yaml_float, node)

    def construct_checked_bool(self, node: ScalarNode) -> Any:
        return self._checked_scalar(SafeConstructor.construct_yaml_bool, node)

    def _checked_scalar(self, construct: Callable[[Any, ScalarNode], Any], node: ScalarNode) -> Any:
        # PyYAML raises bare ValueError/KeyError for '!!int abc', '!!bool maybe'
        # or the odd implicit '0b_'; turn them into a positioned diagnostic.
        try:
            return construct(self, node)
        except (ValueError, KeyError, TypeError, AttributeError, IndexError):
            message = f"'{node.value}' is not a valid {show_tag(node.tag)}"
            raise Problem("yaml-value", message, "fix the value or remove the tag", node=node) from None


_MISSING: Any = object()

SpecConstructor.add_constructor(
    TAG_PREFIX + "timestamp", SpecConstructor.construct_iso_timestamp  # type: ignore[type-var]
)
SpecConstructor.add_constructor(TAG_PREFIX + "int", SpecConstructor.construct_checked_int)  # type: ignore[type-var]
SpecConstructor.add_constructor(TAG_PREFIX + "float", SpecConstructor.construct_checked_float)  # type: ignore[type-var]
SpecConstructor.add_constructor(TAG_PREFIX + "bool", SpecConstructor.construct_checked_bool)  # type: ignore[type-var]
# A lone '=' or '<<' outside a merge key has no SafeConstructor at all (PyYAML
# fails on 'x: ='); they are just strings.
SpecConstructor.add_constructor(TAG_PREFIX + "value", SafeConstructor.construct_yaml_str)  # type: ignore[type-var]
SpecConstructor.add_constructor(MERGE_TAG, SafeConstructor.construct_yaml_str)  # type: ignore[type-var]


def spec_loader(base: type) -> type:
    """The spec loader for a safe loader base (CSafeLoader or SafeLoader).

    Both bases resolve plain scalars with PyYAML's Python resolver (libyaml
    only parses), which is where the YAML 1.2 float forms are added: the
    class method copies the resolver table into the new class, so the shared
    ``yaml.SafeLoader`` is left as it is. It is appended after PyYAML's own
    resolvers, which win for every form they know (ints stay ints).
    """
    loader: Any = type("SpecLoader", (SpecConstructor, base), {"__module__": __name__})
    loader.add_implicit_resolver(FLOAT_TAG, _YAML12_FLOAT, list("-+.0123456789"))
    return loader  # type: ignore[no-any-return]


SpecLoader: type = spec_loader(LOADER_BASE)
"""The loader used: ``SpecConstructor`` behaviour on top of :data:`LOADER_BASE`."""
