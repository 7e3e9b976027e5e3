"""Values the cache already holds, placed where the plan wants them before a staged run starts.

A separate module so that :mod:`.loops` stays the driver: this is what it does first with ``--resume``.
It changes no run state itself: it returns what it placed (:class:`Hits`), and the staged run, the one
owner of its state, takes that in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from ..cache import ref_of
from ..compile.records import Located
from ..devices import DeviceSpec
from ..spec.records import Loop, OpRef
from ..plan.records import Plan
from .caching import CacheUse
from .submitter import Submitter


@dataclass(frozen=True)
class Hits:
    """What the cache's values placed, for the staged run to take in."""

    held: Mapping[str, Any] = field(default_factory=dict)  # Dask key -> the future that holds the value
    known: Mapping[str, Located] = field(default_factory=dict)  # value (``op`` or ``op:i``) -> where it is
    done: Mapping[str, Located] = field(default_factory=dict)  # op or loop export -> its (first) value
    known_ops: frozenset[str] = frozenset()  # ops that will not run: their values, or their loop's, are here
    notes: Mapping[str, str] = field(default_factory=dict)  # op -> what the run report says of its cache
    client_values: Mapping[str, Any] = field(default_factory=dict)  # a loop's series, as the client keeps them


def recorded(loop: Loop) -> tuple[tuple[str, OpRef], ...]:
    """The series a loop records on the client: its metrics', then its evaluations' (a cache entry's order)."""
    return loop.metrics + (loop.evaluation.metrics if loop.evaluation is not None else ())


def place_hits(plan: Plan, submitter: Submitter, cache: CacheUse) -> Hits:
    """Values from the cache go to their planned devices; their ops (and loops) do not run."""
    spec = plan.spec
    held: dict[str, Any] = {}
    known: dict[str, Located] = {}
    done: dict[str, Located] = {}
    notes: dict[str, str] = {}
    client_values: dict[str, Any] = {}
    known_ops: set[str] = set()

    def place(ref: str, value: Any, device: DeviceSpec) -> Located:
        future = submitter.scatter(value, device)
        held[future.key] = future
        known[ref] = Located(future.key, device)
        return known[ref]

    for name, values in cache.hits.items():
        loop = spec.loop_index.get(name)
        if loop is None:
            refs = [str(r) for r in ref_of(plan, name)]
            placed = [place(ref, value, plan.placement(name).device) for ref, value in zip(refs, values)]
            done[name] = placed[0]
            known_ops.add(name)
            notes[name] = cache.record(name)
            continue
        states, series = values[:len(loop.state)], values[len(loop.state):]
        for var, value in zip(loop.state, states):
            export = f"{loop.name}.{var.name}"
            done[export] = place(export, value, plan.placement(export).device)
        for (metric, _), value in zip(recorded(loop), series):
            export = f"{loop.name}.{metric}"
            client_values[export] = value
            done[export] = place(export, value, plan.placement(export).device)
        finished = set(loop.body + loop.evaluated + spec.loop_exports(loop))
        known_ops |= finished
        notes.update({op: f"loop '{loop.name}' {cache.record(loop.name)}" for op in finished})
    return Hits(held, known, done, frozenset(known_ops), notes, client_values)
