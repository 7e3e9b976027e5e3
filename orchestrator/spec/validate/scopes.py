"""The tree the constructs made, written onto the records: each op's scope, each loop's parent and children.

Names hold the tree (``fit/towers/0/grad``: copy 0 of replicate ``towers``
in loop ``fit``), and this is the one place that reads it from them, once,
with the constructs' own records beside (a loop's body, evaluation and
exports; a sweep's copies and their prefixes). Every later stage reads
``Op.scope`` and ``Loop.parent``/``children``/``scope`` instead: which loop
runs an op and as what, which sweep copy made it, the copy indices that key
its random stream. User names hold no ``/`` and are never all digits, so a
name part of digits is always a copy's index.

State: none.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from ..records import Loop, Op, Scope, Search, SweepCopy
from ..scopes import Role


def assign_scopes(ops: Sequence[Op], loops: Sequence[Loop], searches: Sequence[Search]) -> tuple[list[Op], list[Loop]]:
    """``ops`` and ``loops`` with their scopes, and the loops with their parents and children."""
    tree = _loop_tree(loops)
    where: dict[str, tuple[str | None, Role]] = {}
    for loop in sorted(loops, key=lambda lp: len(lp.name)):  # outer loops first: an inner loop's ops are its own
        placeholders = {var.placeholder for var in loop.state}
        for name in loop.body:
            where[name] = (loop.name, "state" if name in placeholders else "step")
        for name in loop.evaluated:
            where[name] = (loop.name, "evaluation")
        for name in loop.exports:
            where[name] = (loop.name, "export")
    copies = _CopyIndex(searches)
    gathering = {search.name for search in searches}
    shared: dict[Scope, Scope] = {}  # one record per distinct scope: 100k ops have a handful
    scoped = []
    for op in ops:
        owner, role = where.get(op.name, (None, "plain"))
        around = copies.around(op.name)
        found = around[-1] if around else None
        sweep, copy = (found[0].name, found[1].index) if found is not None else (None, None)
        if op.group in gathering and op.name.startswith(f"{op.group}.") and role == "plain":
            sweep, copy, role = op.group, None, "gathering"
        elif found is not None and op.kind == "constant" and op.name[len(found[1].prefix):] in found[0].params:
            role = "copy-value"
        scope = Scope(owner, role, sweep, copy, _indices(op.name), tuple((s.name, c.index) for s, c in around))
        scoped.append(replace(op, scope=shared.setdefault(scope, scope)))
    built = []
    for loop in loops:
        around = copies.around(loop.name)
        scope = Scope(tree[loop.name][0], "plain", around[-1][0].name if around else None,
                      around[-1][1].index if around else None, _indices(loop.name),
                      tuple((s.name, c.index) for s, c in around))
        built.append(replace(loop, parent=tree[loop.name][0], children=tree[loop.name][1], scope=scope))
    return scoped, built


def _loop_tree(loops: Sequence[Loop]) -> dict[str, tuple[str | None, tuple[str, ...]]]:
    """Per loop: the innermost loop holding it, and the loops it holds directly."""
    names = {loop.name for loop in loops}
    parent: dict[str, str | None] = {}
    for name in names:
        holders = [name[:i] for i in range(len(name)) if name[i] == "/" and name[:i] in names]
        parent[name] = max(holders, key=len) if holders else None
    children: dict[str, list[str]] = {}
    for name, holder in parent.items():
        if holder is not None:
            children.setdefault(holder, []).append(name)
    return {name: (parent[name], tuple(sorted(children.get(name, ())))) for name in names}


class _CopyIndex:
    """Every sweep copy by its prefix (``hp/3/``), to find the ones a name is made in."""

    def __init__(self, searches: Sequence[Search]):
        self.by_prefix: dict[str, tuple[Search, SweepCopy]] = {
            copy.prefix: (search, copy) for search in searches for copy in search.copies}

    def around(self, name: str) -> list[tuple[Search, SweepCopy]]:
        """The sweep copies ``name`` is made in, outermost first: each "/<digits>/" in it may end a copy's
        prefix."""
        found: list[tuple[Search, SweepCopy]] = []
        if not self.by_prefix:
            return found
        start = 0
        while True:
            slash = name.find("/", start)
            end = name.find("/", slash + 1) if slash >= 0 else -1
            if end < 0:
                return found
            if name[slash + 1:end].isdigit() and name[:end + 1] in self.by_prefix:
                found.append(self.by_prefix[name[:end + 1]])
            start = slash + 1


def _indices(name: str) -> tuple[int, ...]:
    """The copy index of every replicate and sweep around ``name``: its name parts that are digits."""
    if "/" not in name:
        return ()
    return tuple(int(part) for part in name.split("/") if part.isdigit())
