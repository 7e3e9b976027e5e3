"""Compiling loop windows: steps ``start .. start + window - 1`` of an ``iterate`` as one graph.

Step s reads the carried state of step s−1 (inside the window, or from the
previous window by key); outer values reach the loop's devices through
moves made once and reused by every later window. Three ways to run a
window, chosen per loop by planning (``plan.loop_mode``, decided in
``orchestrator.plan.partition``):

* ``op``: one task per op per step (``--granularity op``).
* ``partition``: one task per device partition per step; the body's
  partitions are the plan's (``plan.loop_partitions``), and every step
  repeats them.
* ``gang``: one task per device for the whole window, its values exchanged
  worker to worker (:mod:`.gang`); the default when the loop allows it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from .records import CompiledGraph, CompiledWindow, Located
from ..plan.records import Plan
from ..spec.records import Loop, OpRef
from ..plan.partition import published
from .builder import GraphBuilder
from .options import CompileOptions
from .graph import partition_readers


@dataclass(frozen=True)
class LoopState:
    """Where a loop stands between windows: what the driver keeps, and what the next window reads."""

    carried: Mapping[str, Located]  # state variable -> its current value
    known: Mapping[str, Located]  # values outside the loop (computed before it)
    outer_moves: Mapping[tuple[str, str], str]  # outer values already moved to a device, by earlier windows
    placed: Mapping[tuple[str, str], tuple[str, int | None]] = field(default_factory=dict)  # gang: (ref, device)
    last_windows: Mapping[str, str] = field(default_factory=dict)  # gang: device -> its part of the last window


def loop_start(plan: Plan, loop: Loop, known: Mapping[str, Located]) -> LoopState:
    """The state before a loop's first step: each state variable is its initial value."""
    return LoopState({var.name: lookup_value(known, var.init) for var in loop.state}, dict(known), {})


def compile_window(plan: Plan, loop: Loop, start: int, state: LoopState, options: CompileOptions,
                   offset: int = 0, stop: int | None = None) -> CompiledWindow:
    """One window of ``loop`` with a task per op or per device partition, step by step.

    ``offset`` is added to every step number (a loop inside a loop: its steps of one outer step are
    ``outer step x steps + 0 .. steps - 1``), so keys and random draws differ from one outer step to the next.
    """
    spec = plan.spec
    body = set(loop.body)
    order = [p.op for p in plan.placements if p.op in body]
    state_of = {var.placeholder: var for var in loop.state}
    body_sinks = _body_sinks(plan, loop, order)
    outer_keys = {located.key for located in state.known.values()}
    index = spec.loops.index(loop)
    by_partition = options.granularity != "op"
    parts = plan.loop_partitions[loop.name] if by_partition else ()
    wanted = [str(var.update) for var in loop.state] + [str(ref) for _, ref in loop.metrics]
    returns = published(plan, parts, wanted) if by_partition else {}
    builder = GraphBuilder(plan, options.token, options.base_dir,
                           suffix=f"-{options.token}-L{index}w{offset + start}",
                           known_moves=state.outer_moves, shared_keys=outer_keys, out_dir=options.out_dir,
                           task_names=options.task_names, host_crossings=options.host_outputs,
                           readers=partition_readers(plan, parts) if by_partition else None)
    carried = dict(state.carried)
    metric_keys: list[tuple[str, ...]] = []
    sink_keys: list[str] = []
    last = min(loop.steps, start + loop.window) if stop is None else stop
    for step in range(offset + start, offset + last):
        suffix = f"-{options.token}-{step}"
        builder.step = (step, step)
        values: dict[str, Located] = {}
        done: dict[str, Located] = {}

        def resolve(ref: OpRef, values: dict[str, Located] = values) -> Located:
            if ref.op in body:
                text = str(ref)
                return values[text] if text in values else builder.item(values[ref.op], ref)
            return lookup_value(state.known, ref, builder)

        for name, var in state_of.items():
            # the carried value is read where it lives; readers elsewhere get it moved
            values[name] = done[name] = carried[var.name]
        if by_partition:
            for part in parts:
                values.update(builder.add_partition(part, resolve, done.__getitem__, returns[part.index],
                                                    step=step, suffix=suffix))
                for name in part.ops:
                    done[name] = Located(builder.last_key, part.device)
                if not returns[part.index]:
                    sink_keys.append(builder.last_key)
        else:
            for name in order:
                if name not in state_of:
                    values[name] = builder.add_op(name, resolve, step=step, suffix=suffix)
            sink_keys += [values[n].key for n in body_sinks]
        carried = {var.name: resolve(var.update) for var in loop.state}
        metric_keys.append(tuple(builder.materialize(resolve(ref), ref).key for _, ref in loop.metrics))
    compiled = builder.build({}, {})
    persistent = {pair: key for pair, key in compiled.moves.items() if pair[0] in outer_keys}
    return CompiledWindow(compiled, carried, tuple(metric_keys), tuple(sink_keys), persistent, last)


def _body_sinks(plan: Plan, loop: Loop, order: list[str]) -> list[str]:
    """Body ops nothing reads: no later op, no state update, no metric (their tasks are waited for)."""
    spec = plan.spec
    read_in_body = {ref.op for name in order for ref in spec.op(name).inputs} | \
        {a for name in order for a in spec.op(name).after}
    ends = {var.update.op for var in loop.state} | {ref.op for _, ref in loop.metrics}
    placeholders = {var.placeholder for var in loop.state}
    return [n for n in order if n not in read_in_body and n not in ends and n not in placeholders]


def after_window(state: LoopState, window: CompiledWindow) -> LoopState:
    """The loop's state once ``window`` is submitted: its carried values, the outer moves it made."""
    return LoopState(window.carried, state.known, {**state.outer_moves, **window.persistent_moves}, state.placed,
                     {**state.last_windows, **window.devices})


def lookup_value(known: Mapping[str, Located], ref: OpRef, builder: GraphBuilder | None = None) -> Located:
    """Where ``ref`` is among values computed earlier; output i of a tuple is read in place."""
    text = str(ref)
    if text in known:
        return known[text]
    if builder is None or ref.op not in known:
        raise KeyError(f"value '{text}' is not available here")
    return builder.item(known[ref.op], ref)


def compile_fetch(plan: Plan, values: Mapping[str, Located], options: CompileOptions) -> CompiledGraph | None:
    """A last small graph making values fetchable by the client, or None when they already are.

    An output of a tuple is cut out on its device; on CuPy a device array is
    copied to the host first. ``output_keys`` maps each ref to the key to gather.
    """
    if not options.host_outputs and all(v.index is None for v in values.values()):
        return None
    builder = GraphBuilder(plan, options.token, options.base_dir, suffix=f"-{options.token}-out",
                           task_names=options.task_names, host_crossings=options.host_outputs)
    wanted: dict[str, str] = {}
    for text, located in values.items():
        ref = OpRef.parse(text)
        wanted[text] = builder.to_host(located, ref) if options.host_outputs else builder.materialize(located, ref).key
    return builder.build({}, wanted)
