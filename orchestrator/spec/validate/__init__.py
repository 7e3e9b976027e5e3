"""Validation: JSON Schema first, then semantic checks; every diagnostic is collected.

Semantic checks follow only on schema-valid documents, because they assume
the shapes the schema guarantees. They never import user code. Each concern
has its module:

* :mod:`.schema`: the JSON Schema check; :mod:`.schema_errors`: the hints for its complaints;
* :mod:`.spelling`: values and keys in diagnostics, written as the user wrote them;
* :mod:`.topology`: the cluster (jobs, tasks, GPUs, memory) and placement rules;
* :mod:`.graph`: ops, names, references, cycles, shapes, devices, rules;
* :mod:`.combine`: the weights of each replicate's ``combine: mean``;
* :mod:`.outputs`: files the run writes (checkpoint folders too);
* :mod:`.checkpoints`: what a checkpoint's ``best_only`` watches;
* :mod:`.names`: keys that must be text, and one report per mistake;
* :mod:`.numbers`: settings that are finite numbers (``.nan`` and ``.inf`` only as data).

Order of checks: cluster (sizes, GPUs), placement (default, rules), graph
expansion (constructs), then on the flat graph: op types and parameters,
unique names, references (with did-you-mean), cycles (shown as a path),
shapes, combine weights, devices against the cluster, outputs, and rules that
match nothing.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping
from dataclasses import replace
from typing import Any

from ..constructs import expand
from ...errors import Diagnostic
from ..records import ON_DEVICE_LOST, Document, RunOptions, Spec
from ..params import explain, resolve_params
from .checker import Checker
from .combine import settle_weights
from .graph import (
    check_devices,
    check_kernels,
    check_ops,
    check_refs,
    check_rules,
    infer_values,
)
from .order import topological_order
from .checkpoints import check_checkpoints
from .loops import check_loops
from .searches import settle_rules
from .training import settle_loops
from .names import check_name_keys, once_per_copy
from .numbers import check_finite_settings
from .outputs import check_outputs
from .schema import check_copy_items, check_schema, schema, schema_text
from .topology import build_cluster, build_placement, scheduler_problem

__all__ = ["schema", "schema_text", "scheduler_problem", "topological_order", "validate"]


def validate(doc: Document, overrides: Mapping[str, Any] | None = None,
             without: Collection[str] = ()) -> tuple[Spec | None, list[Diagnostic]]:
    """Check a loaded document; return the typed spec (``None`` if unusable) and all diagnostics.

    ``overrides``: ``--set NAME=VALUE`` values for the ``params:`` block, substituted first.
    ``without``: canonical names of devices lost, for a re-plan: the constructs expand on the devices left.
    """
    resolved = resolve_params(doc, overrides)
    if not resolved.ok:
        return None, sorted(resolved.diagnostics, key=lambda d: (d.severity != "error", d.line, d.column))
    spec, diags = _validate(resolved.document, without)
    diags = explain([*resolved.diagnostics, *diags], resolved.origins)
    diags.sort(key=lambda d: (d.severity != "error", d.line, d.column))
    return (replace(spec, params=resolved.params) if spec is not None else None), diags


def _run_options(c: Checker, raw_run: Mapping[str, Any]) -> RunOptions:
    """``run:`` as a record (its keys' types are the schema's to check: a wrong one is reported there)."""
    retry_on, codes = raw_run.get("retry_on"), raw_run.get("recover_on_exit_codes")
    return RunOptions(raw_run.get("output_dir"), bool(raw_run.get("allow_absolute_paths", False)),
                      int(raw_run.get("retries", 0)), c.seconds(raw_run.get("timeout"), ("run", "timeout")),
                      c.seconds(raw_run.get("no_workers_timeout", 5), ("run", "no_workers_timeout")) or 5.0,
                      str(raw_run.get("on_device_lost", ON_DEVICE_LOST[0])),
                      tensorboard=raw_run.get("tensorboard"), mlflow=raw_run.get("mlflow"),
                      replan_after=c.seconds(raw_run.get("replan_after", 20), ("run", "replan_after")) or 20.0,
                      retry_on=tuple(map(str, retry_on)) if isinstance(retry_on, list) else (),
                      recover_on_exit_codes=tuple(x for x in codes if type(x) is int) if isinstance(codes, list) else ())


def _validate(doc: Document, without: Collection[str] = ()) -> tuple[Spec | None, list[Diagnostic]]:
    schema_diags = check_schema(doc)
    if schema_diags:
        return None, schema_diags
    c = Checker(doc)
    data = doc.data
    check_name_keys(c, data)
    check_finite_settings(c, data)
    if c.diags:  # names that are not text (later checks build names by concatenation), settings that are NaN
        return None, sorted(c.diags, key=lambda d: (d.line, d.column))
    cluster = build_cluster(c, data.get("cluster") or {})
    if without:
        cluster = cluster.without(without)
    placement = build_placement(c, data.get("placement") or {}, cluster)
    run = _run_options(c, data.get("run") or {})
    if c.too_big:  # a cluster too big to build: nothing later can be checked against it
        return None, sorted(c.diags, key=lambda d: (d.severity != "error", d.line, d.column))
    expansion = expand(doc, data["graph"], cluster)
    c.diags.extend(expansion.diagnostics)
    c.diags.extend(check_copy_items(doc, expansion.copy_bodies))
    if not expansion.complete:  # a graph too big to expand: its ops are not all there to check
        return None, sorted(c.diags, key=lambda d: (d.severity != "error", d.line, d.column))
    by_name = check_ops(c, expansion.ops)
    # A duplicate is reported once above; the later checks see only the first
    # op of each name (else its inputs would be mixed up with the other's).
    ops = [op for op in expansion.ops if by_name[op.name] is op]
    check_refs(c, ops, by_name)
    check_kernels(c, ops)
    order, cycles = topological_order(ops, by_name)
    for cycle in cycles:
        c.error("cycle", by_name[cycle[0]].path, f"the graph has a cycle: {' -> '.join(cycle)}",
                "an op cannot depend on itself, directly or through others")
    values = infer_values(c, order, by_name) if not cycles else {}
    loops, searches = list(expansion.loops), list(expansion.searches)
    if not cycles:  # the first point where split lengths are known; the spec carries the weights from here
        loops, order, changed = settle_loops(c, loops, order, values)
        if changed:  # steps counted in epochs: the series and batches they size are known only now
            by_name = {op.name: op for op in order}
            values = infer_values(Checker(doc), order, by_name)
        order = settle_weights(c, order, values)
        loops, searches = settle_rules(c, loops, searches)
    check_loops(c, loops, values)
    check_devices(c, ops, cluster, placement)
    check_rules(c, ops, placement)
    check_checkpoints(c, loops)
    outputs = check_outputs(c, data, by_name, run, values, searches, loops)
    diags = sorted(once_per_copy(c.diags), key=lambda d: (d.severity != "error", d.line, d.column))
    if any(d.is_error for d in diags):
        return None, diags
    spec = Spec(doc, str(data.get("name") or os.path.splitext(os.path.basename(doc.file))[0]), cluster, placement,
                tuple(order), values, outputs, tuple(loops), run, bool(data.get("cache", False)),
                expansion.cache_scopes, sweeps=tuple(searches))
    return spec, diags
