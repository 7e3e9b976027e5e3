"""The order ops run in: Kahn's, stable in the graph's order, and the cycles that keep one from existing.

Most specs list each op after the ops it reads and waits for; then Kahn's
stable order is the graph's own, which one pass over a set can tell (at 100k
ops a third of Kahn's walk, whose dicts of every op grow slower per op the
larger they are). In any other order, or with a cycle, Kahn's walk decides.
State: none.
"""

from __future__ import annotations

import heapq
from typing import Mapping, Sequence

from ..records import Op


def topological_order(ops: Sequence[Op], by_name: Mapping[str, Op]) -> tuple[list[Op], list[list[str]]]:
    """Kahn's order, stable in graph order, and the cycles found (each as a closed path)."""
    if _in_graph_order(ops, by_name):  # (most specs: then Kahn's stable order is the graph's, at a third the cost)
        return list(ops), []
    return kahn_order(ops, by_name)


def kahn_order(ops: Sequence[Op], by_name: Mapping[str, Op]) -> tuple[list[Op], list[list[str]]]:
    """:func:`topological_order` the long way, for any graph."""
    deps = {op.name: [r.op for r in op.inputs if r.op in by_name] + [a for a in op.after if a in by_name]
            for op in ops}
    index = {op.name: i for i, op in enumerate(ops)}
    pending = {name: len(set(d)) for name, d in deps.items()}
    users: dict[str, list[str]] = {}
    for name, d in deps.items():
        for dep in set(d):
            users.setdefault(dep, []).append(name)

    ready = [index[n] for n, k in pending.items() if k == 0]
    heapq.heapify(ready)
    order: list[Op] = []
    while ready:
        op = ops[heapq.heappop(ready)]
        order.append(op)
        for user in users.get(op.name, ()):
            pending[user] -= 1
            if pending[user] == 0:
                heapq.heappush(ready, index[user])
    if len(order) == len(ops):
        return order, []
    return order, _cycles({n for n, k in pending.items() if k > 0}, deps, index)


def _in_graph_order(ops: Sequence[Op], by_name: Mapping[str, Op]) -> bool:
    """Does every op come after all the ops it reads and waits for? (An op that reads itself does not.)"""
    before: set[str] = set()
    for op in ops:
        for ref in op.inputs:
            if ref.op not in before and ref.op in by_name:
                return False
        for name in op.after:
            if name not in before and name in by_name:
                return False
        before.add(op.name)
    return True


def _cycles(stuck: set[str], deps: Mapping[str, list[str]], index: Mapping[str, int]) -> list[list[str]]:
    cycles: list[list[str]] = []
    seen: set[str] = set()
    for start in sorted(stuck, key=index.__getitem__):
        if start in seen:
            continue
        path: list[str] = []
        on_path: dict[str, int] = {}
        node = start
        while node not in on_path and node not in seen:
            on_path[node] = len(path)
            path.append(node)
            node = next(d for d in deps[node] if d in stuck)
        if node in on_path:
            # walked consumer -> producer; show it as data flows, from the earliest op
            loop = list(reversed(path[on_path[node]:]))
            first = min(range(len(loop)), key=lambda i: index[loop[i]])
            loop = loop[first:] + loop[:first]
            cycles.append(loop + [loop[0]])
        seen.update(path)
    return cycles
