"""Settings are finite numbers: ``.nan`` and ``.inf`` are data, never settings.

YAML reads ``.nan`` and ``.inf`` as floats, and JSON Schema lets them through
``"type": "number"``: NaN compares false with every bound (``minimum: 0``
holds for it) and infinity passes every lower bound. As a setting either is a
slip with a silent consequence: ``min_delta: .nan`` makes no evaluation an
improvement, so early stopping stops at its patience and restores an early
state; ``keep: .nan`` or ``factor: .inf`` leave halving nothing to compute.

So every number of a spec outside an op's data is finite. Data are what an
op computes with: a constant's ``value``, an arithmetic ``scalar`` and a
``call``'s literal ``params`` (a NaN fill value, an infinite clip bound).
The cluster's sizes and the durations have checks of their own with hints
of their own (:mod:`.checker`, :mod:`.topology`, :mod:`.graph`), and a
parameter's default is checked where it is used (``--set`` values too: they
are substituted before validation).

State: none.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ...errors import YamlPath
from .checker import Checker
from .spelling import finite_problem

_DATA_FIELDS = frozenset({"value", "scalar", "params"})  # an op's data, as opposed to its settings
_CHECKED_ELSEWHERE = frozenset({"timeout", "no_workers_timeout", "replan_after"})  # durations: checker.seconds, graph
_SKIPPED_TOP = frozenset({"cluster", "params"})  # sizes (topology); parameters where they are used


def check_finite_settings(c: Checker, data: Mapping[str, Any]) -> None:
    """An error at each ``.nan`` or ``.inf`` that is a setting (see the module's policy)."""
    for key, value in data.items():
        if key not in _SKIPPED_TOP:
            _visit(c, value, (str(key),))


def _visit(c: Checker, node: Any, path: YamlPath) -> None:
    if isinstance(node, float):
        if not math.isfinite(node):
            c.error("not-finite", path, *finite_problem(str(path[-1]), node))
    elif isinstance(node, dict):
        is_op = "op" in node and "name" in node
        for key, value in node.items():
            if key in _CHECKED_ELSEWHERE or (is_op and key in _DATA_FIELDS):
                continue
            _visit(c, value, (*path, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            _visit(c, value, (*path, index))

