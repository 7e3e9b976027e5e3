"""Read a spec file into plain data, keeping a lazy way back to line and column.

This package is the only one that uses ``yaml`` (imported in :mod:`.pyyaml`
alone). It turns a file (or a string) into a :class:`~orchestrator.spec.records.Document`:
a plain, JSON-compatible ``dict`` plus ``locate_fn``, which maps a YAML path such
as ``("graph", 2, "inputs")`` back to the 1-based line and column the user wrote
it on. Every problem is raised as a :class:`~orchestrator.errors.LoadError`
carrying diagnostics, never as a raw ``yaml`` exception.

Its modules, in the order a file goes through them (each says why it works the
way it does):

* :mod:`.read`: bytes to text — the size bound, strict UTF-8, characters YAML forbids;
* :mod:`.compose`: our own iterative composer — safe tags, bounded nesting and aliases;
* :mod:`.constructor`: nodes to values — duplicate keys, JSON-compatible data, YAML 1.2 floats;
* :mod:`.locate`: the lazy ``locate_fn``, which walks the kept nodes only when a diagnostic asks;
* :mod:`.parse`: the entry points, and PyYAML's errors as diagnostics;
* :mod:`.problems`: positions, paths, and the problem raised before the file name is known.
"""

from __future__ import annotations

from .compose import MAX_EXPANDED_NODES, MAX_NESTING_DEPTH
from .constructor import SpecLoader
from .constructor import spec_loader as _loader_class  # tests build the pure-Python loader with it
from .parse import load_file, load_text, parse_value
from .parse import load_text_with as _load_text_with  # and load text with it
from .pyyaml import LOADER_BASE
from .read import MAX_SPEC_BYTES

__all__ = [
    "LOADER_BASE",
    "MAX_EXPANDED_NODES",
    "MAX_NESTING_DEPTH",
    "MAX_SPEC_BYTES",
    "SpecLoader",
    "load_file",
    "load_text",
    "parse_value",
]
