"""Values the cache already holds, placed where the plan wants them before a staged run starts.

A separate module so that :mod:`.loops` stays the driver: this is what it does first with ``--resume``.
"""

from __future__ import annotations

from typing import Any, Protocol

from ..cache import ref_of
from ..compile.records import Located
from ..spec.records import Loop, OpRef
from ..plan.records import Plan
from .caching import CacheUse
from .submitter import Submitter


class Staged(Protocol):
    """What placing cache hits needs of the staged run (``execute.loops.StagedRun``)."""

    plan: Plan
    submitter: Submitter
    held: dict[str, Any]
    known: dict[str, Located]
    done: dict[str, Located]
    known_ops: set[str]
    notes: dict[str, str]
    client_values: dict[str, Any]


def recorded(loop: Loop) -> tuple[tuple[str, OpRef], ...]:
    """The series a loop records on the client: its metrics', then its evaluations' (a cache entry's order)."""
    return loop.metrics + (loop.evaluation.metrics if loop.evaluation is not None else ())

def place_hits(staged: Staged, cache: CacheUse) -> None:
    """Values from the cache go to their planned devices; their ops (and loops) do not run."""
    spec = staged.plan.spec
    for name, values in cache.hits.items():
        loop = next((lp for lp in spec.loops if lp.name == name), None)
        if loop is None:
            refs = [str(r) for r in ref_of(staged.plan, name)]
            device = staged.plan.placement(name).device
            for ref, value in zip(refs, values):
                future = staged.submitter.scatter(value, device)
                staged.held[future.key] = future
                staged.known[ref] = Located(future.key, device)
            staged.done[name] = staged.known[refs[0]]
            staged.known_ops.add(name)
            staged.notes[name] = cache.record(name)
            continue
        states, series = values[:len(loop.state)], values[len(loop.state):]
        for var, value in zip(loop.state, states):
            export = f"{loop.name}.{var.name}"
            device = staged.plan.placement(export).device
            future = staged.submitter.scatter(value, device)
            staged.held[future.key] = future
            staged.known[export] = staged.done[export] = Located(future.key, device)
        for (metric, _), value in zip(recorded(loop), series):
            export = f"{loop.name}.{metric}"
            staged.client_values[export] = value
            future = staged.submitter.scatter(value, staged.plan.placement(export).device)
            staged.held[future.key] = future
            staged.known[export] = staged.done[export] = Located(future.key, staged.plan.placement(export).device)
        finished = set(loop.body + loop.evaluated + spec.loop_exports(loop))
        staged.known_ops |= finished
        for op in finished:
            staged.notes[op] = f"loop '{loop.name}' {cache.record(loop.name)}"
