"""Compiling ops outside loops (or a stage of them): one task per op, or one per planned device partition."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace

from .records import CompiledGraph, Located
from ..plan.records import Partition, Plan
from ..spec.records import OpRef
from ..plan.partition import published
from .builder import GraphBuilder, Resolve
from .options import CompileOptions


def compile_plan(plan: Plan, options: CompileOptions, only: Collection[str] | None = None,
                 known: Mapping[str, Located] | None = None, outputs: Collection[str] | None = None,
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
    spec = plan.spec
    values: dict[str, Located] = dict(known or {})
    chosen = set(only) if only is not None else None
    names = [p.op for p in plan.placements] if not values and chosen is None else \
        [p.op for p in plan.placements if p.op not in values and (chosen is None or p.op in chosen)]
    wanted = [str(o.ref) for o in spec.outputs] if outputs is None else list(outputs)
    by_op = options.granularity == "op"
    parts = () if by_op else stage_partitions(plan, names, cut_after)
    builder = GraphBuilder(plan, options.token, options.base_dir, suffix="" if step is None else
                           f"-{options.token}-s{step}", out_dir=options.out_dir, task_names=options.task_names, host_crossings=options.host_outputs,
                           readers=None if by_op else partition_readers(plan, parts))

    def resolve(ref: OpRef) -> Located:
        text = str(ref)
        if text not in values:
            values[text] = builder.item(values[ref.op], ref)
        return values[text]

    done: dict[str, Located] = dict(known_done or {})
    if by_op:
        sinks = _add_ops(plan, builder, names, resolve, values, done, step or 0)
    else:
        sinks = _add_partitions(plan, builder, parts, [t for t in wanted if OpRef.parse(t).op in set(names)],
                                resolve, values, done, step or 0)
    output_keys: dict[str, str] = {}
    for text in wanted:
        ref = next((o.ref for o in spec.outputs if str(o.ref) == text), None) or OpRef.parse(text)
        if ref.op not in values and text not in values:
            continue
        located = resolve(ref)
        output_keys[text] = builder.to_host(located, ref) if options.host_outputs else \
            builder.materialize(located, ref).key
    compiled = builder.build(values, output_keys, tuple(sinks))
    return compiled if by_op else replace(compiled, done={name: located.key for name, located in done.items()})


def _add_ops(plan: Plan, builder: GraphBuilder, names: Sequence[str], resolve: Resolve,
             values: dict[str, Located], done: dict[str, Located], step: int) -> list[str]:
    """A task per op; the keys of the sinks."""
    spec = plan.spec
    for name in names:
        values[name] = done[name] = builder.add_op(name, resolve, step=step)
    consumed = {ref.op for op in spec.ops for ref in op.inputs} | {a for op in spec.ops for a in op.after}
    consumed |= {out.ref.op for out in spec.outputs}
    # Ops nothing reads and no output names still run (a save, a side effect): the runner
    # waits for them without fetching their values.
    return [values[n].key for n in names if n not in consumed]


def _add_partitions(plan: Plan, builder: GraphBuilder, parts: Sequence[Partition], wanted: Sequence[str],
                    resolve: Resolve, values: dict[str, Located], done: dict[str, Located], step: int) -> list[str]:
    """A task per partition; the keys of the sinks."""
    home = {name: part.index for part in parts for name in part.ops}
    # ops another task waits for through a control edge: their partition is no sink (that task needs it)
    waited_for = {a for op in plan.spec.ops for a in op.after if home.get(a) != home.get(op.name)}
    returns = published(plan, parts, wanted, home)
    sinks: list[str] = []
    for part in parts:
        values.update(builder.add_partition(part, resolve, done.__getitem__, returns[part.index], step=step))
        key = builder.last_key
        located = Located(key, part.device)  # one record, shared by the partition's ops
        for name in part.ops:
            done[name] = located
        if not returns[part.index] and not (waited_for and waited_for.intersection(part.ops)):
            sinks.append(key)
    return sinks


def stage_partitions(plan: Plan, names: Sequence[str], cut_after: Collection[str] = ()) -> tuple[Partition, ...]:
    """The plan's partitions as far as ``names`` (ops in plan order) hold them, each cut after an op of
    ``cut_after``.

    A stage of a run runs some ops of a scope: the rest ran before it or came
    from the cache. The planner's rules keep holding for what remains (inputs
    still enter at the start, values leave at the end), so the partitions are
    the plan's, never made again. An op of no partition (a loop's state,
    compiled outside its loop) is a task alone.
    """
    home = plan.planned_tasks.home
    cut = set(cut_after)
    pieces_of: dict[int | str, list[list[str]]] = {}  # plan partition (by id), or an op alone -> its pieces
    source: dict[int | str, Partition | None] = {}
    for name in names:
        part = home.get(name)
        key: int | str = name if part is None else id(part)  # by id: hashing a partition hashes all its ops
        pieces = pieces_of.get(key)
        if pieces is None:
            pieces, source[key] = pieces_of.setdefault(key, [[]]), part
        if pieces[-1] and pieces[-1][-1] in cut:
            pieces.append([])
        pieces[-1].append(name)
    out: list[Partition] = []
    for key, pieces in pieces_of.items():  # by first op: every piece reads only pieces before it
        part = source[key]
        for ops in pieces:
            if part is not None:
                out.append(Partition(len(out), part.device, tuple(ops), part.retries))
            else:
                out.append(Partition(len(out), plan.placement(ops[0]).device, tuple(ops),
                                     plan.spec.op(ops[0]).retries or plan.spec.run.retries))
    return tuple(out)


def partition_readers(plan: Plan, parts: Sequence[Partition]) -> dict[tuple[str, str], int]:
    """How many partitions on each device read each value from outside: one needs no move task."""
    index = plan.spec.op_index
    count: dict[tuple[str, str], int] = {}
    for part in parts:
        members = set(part.ops)
        device = part.device.to_string()
        for text in {str(ref) for name in part.ops for ref in index[name].inputs if ref.op not in members}:
            count[(text, device)] = count.get((text, device), 0) + 1
    return count

