"""Compile a plan into a Dask graph whose every task carries its device.

One task per op, in a single ``HighLevelGraph`` layer whose annotations are
key-callables (resources and retries per key); the graph is run with
``optimize_graph=False`` so fusion can never merge tasks of different devices
or drop their annotations (dask#7036).

* Pinning uses identity resources: a pinned op asks for
  ``{"device:<canonical name>": 1}``, which only the worker standing for that
  device offers — restart-proof, unlike worker addresses (distributed#8600).
  An op on ``GPU:*`` asks for ``{"GPU": 1, "task:<job/replica/task>": 1}`` and
  Dask picks the GPU.
* A value used on another pinned device crosses once per consuming device.
  With one reader there, Dask fetches it as that task's dependency; with
  several (or, in loops, a value read every step) it goes through one ``move``
  task on that device, which all readers share — so Dask can never fetch it
  twice, and the copy to a GPU happens once.
* A control edge (``after``) depends on a ``done`` token task that runs on the
  producer's device and returns ``None``: no array moves.
* A multi-output op returns a tuple; a reader on the same device takes
  ``NAME:i`` from it in place, and only for another device is output i cut
  out by a getitem task beside it, so only that output crosses.

Keys are named by :mod:`orchestrator.keys`: by op name (``towers/1/c-<token>``,
one dashboard group per op) or, for graphs of many ops, by op kind.
"""

from __future__ import annotations

import operator
import os
from dataclasses import dataclass
from typing import Any, Callable, Collection, Mapping

from dask.task_spec import Task, TaskRef

from .devices import ANY, DeviceSpec
from .keys import KeyNamer, TaskNames
from .model import CompiledGraph, CompiledWindow, Located, Loop, OpRef, Plan
from .ops import lookup
from .tasks import OpTask, move, resources_for, run_op, to_host
from .tasks import token as control_token


def _short(device: DeviceSpec) -> str:
    return f"{device.job}/{device.task}/{device.short()}"


@dataclass(frozen=True)
class CompileOptions:
    """What every graph of one run shares: its token, directories and key naming."""

    token: str
    base_dir: str = "."  # the spec's directory: load and call ops read from here
    out_dir: str | None = None  # save ops write here (default: base_dir)
    task_names: TaskNames = "op"
    host_outputs: bool = False  # outputs are device arrays (CuPy): copy them to the host before fetching


Resolve = Callable[[OpRef], Located]


class GraphBuilder:
    """Accumulates tasks for ops (possibly of several loop steps) into one Dask graph."""

    def __init__(self, plan: Plan, token: str, base_dir: str = ".", suffix: str = "",
                 known_moves: Mapping[tuple[str, str], str] | None = None, shared_keys: Collection[str] = (),
                 out_dir: str | None = None, task_names: TaskNames = "op"):
        self.plan, self.spec, self.token, self.base_dir = plan, plan.spec, token, base_dir
        self.names = KeyNamer(task_names)
        self.out_dir = out_dir or base_dir  # save ops write here; load and call read from base_dir
        self.suffix = suffix or f"-{token}"
        self.tasks: dict[str, Any] = {}
        self.resources: dict[str, Mapping[str, float]] = {}
        self.retries: dict[str, int] = {}
        self.owner: dict[str, str] = {}
        self.moves: dict[tuple[str, str], str] = dict(known_moves or {})
        self.new_moves: dict[tuple[str, str], str] = {}
        self.crossings: set[tuple[str, str]] = set()  # (source key, device): every value sent somewhere
        self.shared = set(shared_keys)
        self.readers = _readers(plan)
        self._resources_of: dict[DeviceSpec, Mapping[str, float]] = {}
        self.default_timeout, self.log = plan.spec.run.timeout, plan.spec.placement.log

    def add(self, key: str, task: Any, device: DeviceSpec, op: str, n_retries: int) -> None:
        self.tasks[key] = task
        resources = self._resources_of.get(device)
        if resources is None:  # one (read-only) mapping per device, shared by its tasks
            resources = self._resources_of[device] = resources_for(device)
        self.resources[key] = resources
        self.retries[key] = n_retries
        self.owner[key] = op

    def item(self, base: Located, ref: OpRef, suffix: str = "") -> Located:
        """Output ``ref.output`` of a multi-output op: read in place by readers on its device."""
        if ref.output is None or self.spec.op(ref.op).outputs == 1:
            return base
        return Located(base.key, base.device, ref.output)

    def materialize(self, value: Located, ref: OpRef) -> Located:
        """One output of a tuple as a key of its own (a getitem beside it): what leaves the device."""
        if value.index is None:
            return value
        key = f"{value.key}[{value.index}]"
        if key not in self.tasks:
            self.add(key, Task(key, operator.getitem, TaskRef(value.key), value.index), value.device, ref.op, 0)
        return Located(key, value.device)

    def arrive(self, value: Located, ref: OpRef, consumer: DeviceSpec, n_retries: int) -> tuple[str, int | None]:
        """(key, index) to read ``value`` from on ``consumer``: moved there once, then reused."""
        if value.device == consumer:
            return value.key, value.index  # same worker: index the tuple in place, no task
        value = self.materialize(value, ref)  # only the output needed crosses
        if consumer.device_index == ANY:
            return value.key, None
        pair = (value.key, consumer.to_string())
        if pair in self.moves and pair not in self.new_moves:
            return self.moves[pair], None  # moved by an earlier loop window: not a new crossing
        self.crossings.add(pair)
        if self.readers.get((str(ref), pair[1]), 0) <= 1 and value.key not in self.shared:
            # one reader there: Dask fetches it once as that task's dependency; no extra task
            return value.key, None
        if pair not in self.moves:
            key = self.names.helper("move", f"{ref}@{_short(consumer)}", f"{self.suffix}-{len(self.moves)}")
            self.add(key, Task(key, move, str(ref), consumer.to_string(), self.token, TaskRef(value.key)),
                     consumer, ref.op, n_retries)
            self.moves[pair] = key
            self.new_moves[pair] = key
        return self.moves[pair], None

    def add_op(self, op_name: str, resolve: Resolve, step: int = 0, suffix: str | None = None) -> Located:
        suffix = self.suffix if suffix is None else suffix
        spec, placement = self.spec, self.plan.placement(op_name)
        op, device = spec.op(op_name), placement.device
        n_retries = op.retries or spec.run.retries
        arrivals = [self.arrive(resolve(ref), ref, device, n_retries) for ref in op.inputs]
        args = [TaskRef(key) for key, _ in arrivals]
        indices = tuple(index for _, index in arrivals)
        for name in op.after:
            producer = resolve(OpRef(name))
            done_key = self.names.helper("done", name, suffix)
            if done_key not in self.tasks:
                self.add(done_key, Task(done_key, control_token, TaskRef(producer.key)), producer.device, name, 0)
            args.append(TaskRef(done_key))
        payload = self.op_task(op_name, step, indices)
        key = self.names.op(op.name, op.kind, op.params, suffix)
        self.add(key, Task(key, run_op, payload, *args), device, op.name, n_retries)
        return Located(key, device)

    def op_task(self, op_name: str, step: int, indices: tuple[int | None, ...] = ()) -> OpTask:
        """The payload of one op: what its kernel needs on the worker, paths resolved as the op declares."""
        op = self.spec.op(op_name)
        definition = lookup(op.kind)
        params = op.params
        if definition is not None and definition.writes:
            params = {**params, **{p: os.path.join(self.out_dir, str(params[p])) for p in definition.writes
                                   if p in params}}
        needs_dir = definition is not None and definition.needs_base_dir
        return OpTask(
            name=op.name, kind=op.kind, params=params, n_inputs=len(op.inputs), run=self.token, step=step,
            input_keys=op.input_keys, timeout=op.timeout if op.timeout is not None else self.default_timeout,
            log=self.log, base_dir=self.base_dir if needs_dir else "", outputs=op.outputs,
            input_index=indices if indices.count(None) != len(indices) else ())

    def to_host(self, value: Located, ref: OpRef) -> str:
        value = self.materialize(value, ref)
        key = self.names.helper("host", str(ref), self.suffix)
        if key not in self.tasks:
            self.add(key, Task(key, to_host, TaskRef(value.key)), value.device, ref.op, 0)
        return key

    def build(self, values: Mapping[str, Located], output_keys: Mapping[str, str],
              sink_keys: tuple[str, ...] = ()) -> CompiledGraph:
        from dask.highlevelgraph import HighLevelGraph, MaterializedLayer

        annotations: dict[str, Any] = {"resources": _Lookup(self.resources, {})}
        if any(self.retries.values()):  # (none asked for: no annotation for the scheduler to read per key)
            annotations["retries"] = _Lookup(self.retries, 0)
        layer = MaterializedLayer(self.tasks, annotations=annotations)
        name = f"orchestrator{self.suffix}"
        graph = HighLevelGraph({name: layer}, {name: set()})
        return CompiledGraph(graph, self.tasks, dict(values), dict(output_keys), self.resources, self.retries,
                             self.owner, self.token, dict(self.new_moves), sink_keys, len(self.crossings))


def compile_plan(plan: Plan, token: str, base_dir: str = ".", host_outputs: bool = False,
                 only: Collection[str] | None = None, known: Mapping[str, Located] | None = None,
                 outputs: Collection[str] | None = None, out_dir: str | None = None,
                 task_names: TaskNames = "op") -> CompiledGraph:
    """Build the graph of ``only`` these ops (default: all), reading ``known`` values already computed.

    ``outputs`` are the refs to fetch (default: the spec's outputs that this graph can produce).
    """
    builder = GraphBuilder(plan, token, base_dir, out_dir=out_dir, task_names=task_names)
    spec = plan.spec
    values: dict[str, Located] = dict(known or {})

    def resolve(ref: OpRef) -> Located:
        text = str(ref)
        if text not in values:
            values[text] = builder.item(values[ref.op], ref)
        return values[text]

    chosen = set(only) if only is not None else None
    for placement in plan.placements:
        if placement.op in values or (chosen is not None and placement.op not in chosen):
            continue
        values[placement.op] = builder.add_op(placement.op, resolve)

    wanted = [str(o.ref) for o in spec.outputs] if outputs is None else list(outputs)
    output_keys: dict[str, str] = {}
    for text in wanted:
        ref = next((o.ref for o in spec.outputs if str(o.ref) == text), None) or OpRef.parse(text)
        if ref.op not in values:
            continue
        located = resolve(ref)
        output_keys[text] = builder.to_host(located, ref) if host_outputs else builder.materialize(located, ref).key

    # Ops nothing reads and no output names still run (a save, a side effect): the runner
    # waits for them without fetching their values.
    consumed = {ref.op for op in spec.ops for ref in op.inputs} | {a for op in spec.ops for a in op.after}
    consumed |= {out.ref.op for out in spec.outputs}
    sinks = tuple(values[p.op].key for p in plan.placements
                  if p.op not in consumed and p.op in values and (known is None or p.op not in known)
                  and (chosen is None or p.op in chosen))
    return builder.build(values, output_keys, sinks)


def _readers(plan: Plan) -> dict[tuple[str, str], int]:
    """How many ops on each device read each value: one reader needs no move task."""
    spec = plan.spec
    count: dict[tuple[str, str], int] = {}
    for p in plan.placements:
        for text in {str(ref) for ref in spec.op(p.op).inputs}:
            count[(text, p.device_name)] = count.get((text, p.device_name), 0) + 1
    return count


@dataclass(frozen=True)
class _Lookup:
    """A picklable key-callable annotation; unknown keys get ``default`` (never None)."""

    table: Mapping[str, Any]
    default: Any

    def __call__(self, key: str) -> Any:
        return self.table.get(key, self.default)


# --------------------------------------------------------------------------- loops


@dataclass(frozen=True)
class LoopState:
    """Where a loop stands between windows: what the driver keeps, and what the next window reads."""

    carried: Mapping[str, Located]  # state variable -> its current value
    known: Mapping[str, Located]  # values outside the loop (computed before it)
    outer_moves: Mapping[tuple[str, str], str]  # outer values already moved to a device, by earlier windows


def loop_start(plan: Plan, loop: Loop, known: Mapping[str, Located]) -> LoopState:
    """The state before a loop's first step: each state variable is its initial value."""
    return LoopState({var.name: lookup_value(known, var.init) for var in loop.state}, dict(known), {})


def compile_window(plan: Plan, loop: Loop, start: int, state: LoopState, options: CompileOptions) -> CompiledWindow:
    """Steps ``start`` .. ``start + window - 1`` of ``loop`` as one graph.

    Step s reads the carried state of step s−1 (inside the window, or from the
    previous window by key). Outer values reach the loop's devices through
    moves made once and reused by every later window (``persistent_moves``).
    """
    spec = plan.spec
    body = set(loop.body)
    order = [p.op for p in plan.placements if p.op in body]
    state_of = {var.placeholder: var for var in loop.state}
    read_in_body = {ref.op for name in order for ref in spec.op(name).inputs} | \
        {a for name in order for a in spec.op(name).after}
    ends = {var.update.op for var in loop.state} | {ref.op for _, ref in loop.metrics}
    body_sinks = [n for n in order if n not in read_in_body and n not in ends and n not in state_of]
    outer_keys = {located.key for located in state.known.values()}
    index = spec.loops.index(loop)
    builder = GraphBuilder(plan, options.token, options.base_dir, suffix=f"-{options.token}-L{index}w{start}",
                           known_moves=state.outer_moves, shared_keys=outer_keys, out_dir=options.out_dir,
                           task_names=options.task_names)
    carried = dict(state.carried)
    metric_keys: list[tuple[str, ...]] = []
    sink_keys: list[str] = []
    last = min(loop.steps, start + loop.window)
    for step in range(start, last):
        suffix = f"-{options.token}-{step}"
        values: dict[str, Located] = {}

        def resolve(ref: OpRef, values: dict[str, Located] = values) -> Located:
            if ref.op in body:
                return builder.item(values[ref.op], ref)
            return lookup_value(state.known, ref, builder)

        for name in order:
            var = state_of.get(name)
            if var is not None:
                # the carried value is read where it lives; readers elsewhere get it moved
                values[name] = carried[var.name]
                continue
            values[name] = builder.add_op(name, resolve, step=step, suffix=suffix)
        carried = {var.name: resolve(var.update) for var in loop.state}
        metric_keys.append(tuple(builder.materialize(resolve(ref), ref).key for _, ref in loop.metrics))
        sink_keys += [values[n].key for n in body_sinks]
    compiled = builder.build({}, {})
    persistent = {pair: key for pair, key in compiled.moves.items() if pair[0] in outer_keys}
    return CompiledWindow(compiled, carried, tuple(metric_keys), tuple(sink_keys), persistent, last)


def after_window(state: LoopState, window: CompiledWindow) -> LoopState:
    """The loop's state once ``window`` is submitted: its carried values, the outer moves it made."""
    return LoopState(window.carried, state.known, {**state.outer_moves, **window.persistent_moves})


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
                           task_names=options.task_names)
    wanted: dict[str, str] = {}
    for text, located in values.items():
        ref = OpRef.parse(text)
        wanted[text] = builder.to_host(located, ref) if options.host_outputs else builder.materialize(located, ref).key
    return builder.build({}, wanted)
