"""Constructs: the nested parts of the spec language, expanded into plain ops.

The graph a user writes nests; every later stage wants a flat list of
:class:`~orchestrator.spec.records.Op` in graph order. Each construct lives in its
own module and is registered here by the YAML key that marks it:

* ``scope``: a device block; names unchanged (:mod:`.scope`).
* ``replicate``: one copy of a body per device, split / broadcast / combine
  (:mod:`.replicate`).
* ``iterate``: a body run for ``steps`` with carried state (:mod:`.iterate`).
* ``sweep``: one copy per parameter value, with ``select`` (:mod:`.sweep`).

Inside a body, a name that the body defines refers to the copy's own op;
any other name refers to the enclosing graph. The expansion parses device
strings and checks only what it alone can see — names a construct must find
in its own body (``combine``, ``select``, ``update``) and device patterns that
match nothing; every other check belongs to ``validate``.

How to add a construct: a module here with an object following
:class:`~orchestrator.spec.constructs.base.Construct`, one line in
:data:`CONSTRUCTS`, and its ``$defs`` entry in ``schemas/spec.schema.json``
(docs/extending.md). A construct that expands into plain ops needs nothing
else; ``iterate`` is the one whose expansion the executor runs specially.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...devices import DeviceSpec
from ...errors import DeviceSpecError, Diagnostic, YamlPath
from ..records import Cluster, Document, Loop, Op, OpRef
from ..searches import Search
from ...ops import lookup
from .base import Construct, Expander, output_count
from .space import leftover_uses
from .iterate import ITERATE
from .replicate import REPLICATE
from .scope import SCOPE
from .sweep import SWEEP

CONSTRUCTS: Mapping[str, Construct] = {c.key: c for c in (SCOPE, REPLICATE, ITERATE, SWEEP)}
"""Every construct by the key that marks a graph item as it (checked in this order)."""

MAX_EXPANDED_OPS = 1_000_000
"""Bound on the values a graph expands to (ops, and the outputs of ``split``/``call``).

Constructs multiply: eight nested replicates over ten devices are 10^8 ops
from a 500-byte file, an expansion bomb like YAML's billion laughs. The size
is computed from the written graph before anything is expanded, in time
linear in the file, and a graph over the bound is refused.
"""


def construct_of(item: Mapping[str, Any]) -> Construct | None:
    """The construct a graph item is, or None for a plain op."""
    return next((c for key, c in CONSTRUCTS.items() if key in item), None)


@dataclass(frozen=True)
class Expansion:
    ops: tuple[Op, ...]
    loops: tuple[Loop, ...]
    diagnostics: tuple[Diagnostic, ...]
    complete: bool = True  # False: the graph was too big to expand, ``ops`` is empty
    cache_scopes: Mapping[str, bool] = field(default_factory=dict)  # construct name -> its ``cache:``
    searches: tuple[Search, ...] = ()
    copy_bodies: tuple[tuple[YamlPath, int, Any], ...] = ()  # sweep bodies with a copy's values in place


def expand(doc: Document, graph: Sequence[Any], cluster: Cluster | None) -> Expansion:
    """Flatten the (schema-valid) graph into plain ops in graph order."""
    too_big = _too_big(doc, graph, cluster)
    if too_big is not None:
        return Expansion((), (), (too_big,), complete=False)
    expander = Expander(doc, cluster, CONSTRUCTS)
    expander.items(graph, ("graph",), "", (), OpRef.parse, None)
    ops = _prune_unused_picks(expander.ops, expander.pick_candidates, doc)
    for op in ops:  # a ${copy.NAME} no enclosing sweep replaced
        for path, name in leftover_uses(dict(op.params), op.path):
            expander.diagnostics.append(doc.diagnostic(
                "copy-unknown", path, f"${{copy.{name}}} in op '{op.name}': no sweep around it gives its copies "
                f"a value '{name}'", "a body can use the values of the sweeps it is inside: ${copy.NAME} for "
                "each parameter of their space"))
    return Expansion(tuple(ops), tuple(expander.loops), tuple(expander.diagnostics), True,
                     dict(expander.cache_scopes), tuple(expander.searches), tuple(expander.copy_bodies))


def _prune_unused_picks(ops: list[Op], candidates: set[str], doc: Document) -> list[Op]:
    """``sweep.<op>`` values move every copy's value to one device: keep only those used."""
    if not candidates:
        return ops
    used = {ref.op for op in ops for ref in op.inputs} | {a for op in ops for a in op.after}
    used |= {OpRef.parse(str(k)).op for k in (doc.data.get("outputs") or {})}
    return [op for op in ops if op.name not in candidates or op.name in used]


_FEWER = {"num": "split into fewer pieces", "outputs": "return fewer values"}


class _Sizer:
    """The number of values each written item expands to (an upper bound), memoised per item."""

    def __init__(self, cluster: Cluster | None):
        self.cluster = cluster
        self.sizes: dict[int, int] = {}

    def items(self, items: Sequence[Any]) -> int:
        total = 0
        for item in items:  # plain ops inline: specs have 100k of them
            construct = construct_of(item)
            total += self.item(item) if construct is not None else output_count(item)
        return total

    def item(self, item: Any) -> int:
        size = self.sizes.get(id(item))
        if size is None:
            construct = construct_of(item)
            size = construct.size(item, self.items, self.devices) if construct else output_count(item)
            self.sizes[id(item)] = size
        return size

    def devices(self, spec: Any) -> int:
        if isinstance(spec, list):
            return len(spec)
        if self.cluster is None:
            return 0
        try:
            return len(self.cluster.matching(DeviceSpec.parse(str(spec))))
        except DeviceSpecError:
            return 0


def _too_big(doc: Document, graph: Sequence[Any], cluster: Cluster | None) -> Diagnostic | None:
    """A diagnostic at the innermost item that alone expands past the bound; None when the graph fits."""
    sizer = _Sizer(cluster)
    total = sizer.items(graph)
    if total <= MAX_EXPANDED_OPS:
        return None
    limit = f"at most {MAX_EXPANDED_OPS:,} are supported"
    items: Sequence[Any] = graph
    items_path: tuple[str | int, ...] = ("graph",)
    found, path = None, items_path
    while True:
        index = next((i for i, item in enumerate(items) if sizer.item(item) > MAX_EXPANDED_OPS), None)
        if index is None:
            break
        found, path = items[index], (*items_path, index)
        construct = construct_of(found)
        if construct is None:
            break
        inner, parts = construct.body(found)
        items, items_path = inner, (*path, *parts)
    if found is None:
        return doc.diagnostic("graph-size", ("graph",), f"the graph expands to {total:,} ops; {limit}",
                              "split the job into several specs")
    size = sizer.item(found)
    construct = construct_of(found)
    if construct is None:  # one op with too many outputs: point at the parameter that says how many
        definition = lookup(str(found.get("op")))
        key = definition.outputs_param if definition is not None and definition.outputs_param else "op"
        return doc.diagnostic("graph-size", (*path, key), f"op '{found['name']}' makes {size:,} outputs; {limit}",
                              _FEWER.get(key, "make fewer outputs"))
    kind = construct.key
    what = "the ops of this scope expand" if kind == "scope" else f"{kind} '{found['name']}' expands"
    return doc.diagnostic("graph-size", path if kind == "scope" else (*path, kind), f"{what} to {size:,} ops; {limit}",
                          "constructs multiply their bodies, and nested ones multiply again: "
                          "use fewer devices or values, or less nesting")


__all__ = ["CONSTRUCTS", "MAX_EXPANDED_OPS", "Construct", "Expansion", "construct_of", "expand"]
