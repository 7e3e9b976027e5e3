"""PyYAML, imported here and nowhere else: the parts of it the loader uses, YAML's tags, the loader base.

The other modules of :mod:`orchestrator.spec.load` take PyYAML's events, nodes,
errors and constructor from here, so that one module is the library's home
(``.importlinter`` and tests/test_architecture.py hold the package to it).
"""

from __future__ import annotations

import yaml
from yaml import MarkedYAMLError, SafeLoader, YAMLError
from yaml.constructor import ConstructorError, SafeConstructor
from yaml.events import (
    AliasEvent,
    MappingEndEvent,
    MappingStartEvent,
    ScalarEvent,
    SequenceEndEvent,
    SequenceStartEvent,
    StreamEndEvent,
)
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

__all__ = [
    "FLOAT_TAG",
    "LOADER_BASE",
    "MAP_TAG",
    "MERGE_TAG",
    "SCALAR_TAGS",
    "SEQ_TAG",
    "STR_TAG",
    "TAG_PREFIX",
    "AliasEvent",
    "ConstructorError",
    "MappingEndEvent",
    "MappingNode",
    "MappingStartEvent",
    "MarkedYAMLError",
    "Node",
    "SafeConstructor",
    "SafeLoader",
    "ScalarEvent",
    "ScalarNode",
    "SequenceEndEvent",
    "SequenceNode",
    "SequenceStartEvent",
    "StreamEndEvent",
    "YAMLError",
    "is_libyaml",
]

LOADER_BASE: type = yaml.CSafeLoader if yaml.__with_libyaml__ else yaml.SafeLoader
"""The safe loader :data:`~orchestrator.spec.load.SpecLoader` derives from: libyaml's when installed."""

TAG_PREFIX = "tag:yaml.org,2002:"
STR_TAG = TAG_PREFIX + "str"
MERGE_TAG = TAG_PREFIX + "merge"
SEQ_TAG = TAG_PREFIX + "seq"
MAP_TAG = TAG_PREFIX + "map"
FLOAT_TAG = TAG_PREFIX + "float"
# The tags the resolver gives plain YAML scalars; explicit spellings of these
# (``!!str 12``) are harmless. ``value`` (a lone ``=``) and ``merge`` (``<<``)
# are resolver quirks of YAML 1.1 and are read as strings outside merge keys.
SCALAR_TAGS = frozenset(
    TAG_PREFIX + name
    for name in ("null", "bool", "int", "float", "str", "timestamp", "value", "merge")
)


def is_libyaml(loader_class: type) -> bool:
    """True for a loader built on libyaml's ``CSafeLoader`` (which exists only when libyaml is installed)."""
    return bool(yaml.__with_libyaml__) and issubclass(loader_class, yaml.CSafeLoader)
