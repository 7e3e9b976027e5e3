"""Compiling ops outside loops: one task per op, or one task per device partition."""

from __future__ import annotations

from collections.abc import Collection, Mapping

from ..keys import TaskNames
from ..model import GRANULARITIES, CompiledGraph, Located, OpRef, Plan
from ..partition import Partition, partition, published
from .builder import GraphBuilder

Granularity = str  # one of GRANULARITIES: "partition" | "op"


def compile_plan(plan: Plan, token: str, base_dir: str = ".", host_outputs: bool = False,
                 only: Collection[str] | None = None, known: Mapping[str, Located] | None = None,
                 outputs: Collection[str] | None = None, out_dir: str | None = None,
                 task_names: TaskNames = "op", granularity: Granularity = "partition",
                 known_done: Mapping[str, Located] | None = None, step: int | None = None,
                 cut_after: Collection[str] = ()) -> CompiledGraph:
    """Build the graph of ``only`` these ops (default: all), reading ``known`` values already computed.

    ``outputs`` are the refs to fetch (default: the spec's outputs that this
    graph can produce). ``known_done`` locates the tasks that completed ops of
    earlier graphs (for control edges onto them). ``step`` is the step of an
    enclosing loop that runs step by step (a loop holding another): its ops
    run at that step, under keys of their own. ``cut_after``: ops whose values
    are wanted as soon as they are made (each ends its partition).
    """
    if granularity not in GRANULARITIES:
        raise ValueError(f"unknown granularity '{granularity}' (choose one of {', '.join(GRANULARITIES)})")
    spec = plan.spec
    values: dict[str, Located] = dict(known or {})
    chosen = set(only) if only is not None else None
    names = [p.op for p in plan.placements if p.op not in values and (chosen is None or p.op in chosen)]
    wanted = [str(o.ref) for o in spec.outputs] if outputs is None else list(outputs)
    suffix = "" if step is None else f"-{token}-s{step}"
    if granularity == "op":
        builder = GraphBuilder(plan, token, base_dir, suffix=suffix, out_dir=out_dir, task_names=task_names)
    else:
        parts = partition(plan, names, cut_after=cut_after)
        builder = GraphBuilder(plan, token, base_dir, suffix=suffix, out_dir=out_dir, task_names=task_names,
                               readers=partition_readers(plan, parts))

    def resolve(ref: OpRef) -> Located:
        text = str(ref)
        if text not in values:
            values[text] = builder.item(values[ref.op], ref)
        return values[text]

    done: dict[str, Located] = dict(known_done or {})
    sinks: list[str] = []
    if granularity == "op":
        for name in names:
            values[name] = done[name] = builder.add_op(name, resolve, step=step or 0)
        consumed = {ref.op for op in spec.ops for ref in op.inputs} | {a for op in spec.ops for a in op.after}
        consumed |= {out.ref.op for out in spec.outputs}
        # Ops nothing reads and no output names still run (a save, a side effect): the runner
        # waits for them without fetching their values.
        sinks = [values[n].key for n in names if n not in consumed]
    else:
        home = {name: part.index for part in parts for name in part.ops}
        # ops another task waits for through a control edge: their partition is no sink (that task needs it)
        waited_for = {a for op in spec.ops for a in op.after if home.get(a) != home.get(op.name)}
        returns = published(plan, parts, [t for t in wanted if OpRef.parse(t).op in set(names)])
        for part in parts:
            values.update(builder.add_partition(part, resolve, done.__getitem__, returns[part.index], step=step or 0))
            key = builder.last_key
            for name in part.ops:
                done[name] = Located(key, part.device)
            if not returns[part.index] and not waited_for & set(part.ops):
                sinks.append(key)

    output_keys: dict[str, str] = {}
    for text in wanted:
        ref = next((o.ref for o in spec.outputs if str(o.ref) == text), None) or OpRef.parse(text)
        if ref.op not in values and text not in values:
            continue
        located = resolve(ref)
        output_keys[text] = builder.to_host(located, ref) if host_outputs else builder.materialize(located, ref).key
    compiled = builder.build(values, output_keys, tuple(sinks))
    return compiled if granularity == "op" else _with_done(compiled, done)


def _with_done(compiled: CompiledGraph, done: Mapping[str, Located]) -> CompiledGraph:
    from dataclasses import replace

    return replace(compiled, done={name: located.key for name, located in done.items()})


def partition_readers(plan: Plan, parts: tuple[Partition, ...]) -> dict[tuple[str, str], int]:
    """How many partitions on each device read each value from outside: one needs no move task."""
    spec = plan.spec
    count: dict[tuple[str, str], int] = {}
    for part in parts:
        members = set(part.ops)
        device = part.device.to_string()
        for text in {str(ref) for name in part.ops for ref in spec.op(name).inputs if ref.op not in members}:
            count[(text, device)] = count.get((text, device), 0) + 1
    return count
