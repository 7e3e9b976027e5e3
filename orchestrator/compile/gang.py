"""Gang windows: one task per device for a whole loop window, values exchanged worker to worker.

Per-step tasks pay the scheduler's round trip for every hop of every step
(measured on this project's 2-core machine: 13–20 ms per step of the
polyfit example with four tasks a step, whatever their size). TensorFlow
does not: each device runs its partition of the step function, exchanging
only the tensors that cross devices. A gang window does the same for
``window`` steps at a time: each device of the loop body gets one
:class:`~orchestrator.runtime.WindowTask` running its body ops for every step
of the window (``orchestrator.runtime.windows``), and the values read across
devices go directly from worker to worker. The devices of one worker process
(``processes: host``) get one task for all of them (``runtime.groups``,
asking for every one of their resources): one thread runs their ops, and
each device's states and metrics take their place, one part after another,
in its result (:class:`_Layout`).

What must hold for that, and why (planning's ``orchestrator.plan.partition.gang_blocker``
says which fails, and the plan keeps the answer: ``plan.loop_mode``):

* The window's tasks must all run at once, each waiting only for values the
  others make in the same window. So they depend on nothing but their own
  device's previous window and on values moved to their device before the
  loop started (:func:`compile_gang_prep`, which the driver waits for).
* Dask must not rerun one of them alone: a rerun task would wait for
  values its peers already sent. So no op of the spec may have ``retries``
  (Dask's ``allowed-failures`` is then 0, and a lost worker fails the run),
  and no body op may run on ``GPU:*`` (its peers must know where it is).
* Every state's update and every metric is a value made in the body.

Otherwise the loop runs with a task per partition per step, which Dask
schedules, retries and recovers on its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable

from dask.task_spec import Task, TaskRef

from ..devices import DeviceSpec
from .records import CompiledGraph, CompiledWindow, Located
from ..plan.records import Plan
from ..spec.records import Loop, OpRef
from ..runtime import ARG, LOCAL, RECEIVED, STATE, GroupTask, StateRule, WindowTask, run_group, run_window
from .builder import GraphBuilder
from .dask_keys import device_label
from .loops import LoopState, lookup_value
from .options import CompileOptions


def _element(plan: Plan, ref: OpRef) -> int:
    return ref.output if ref.output is not None and plan.spec.op(ref.op).outputs > 1 else -1


def compile_gang_prep(plan: Plan, loop: Loop, state: LoopState, options: CompileOptions,
                      offset: int = 0) -> tuple[CompiledGraph, LoopState]:
    """Before the first window: every outer value, and each state's initial value, on the devices reading them."""
    spec = plan.spec
    body = set(loop.body)
    placeholders = {var.placeholder: var for var in loop.state}
    outer_keys = {located.key for located in state.known.values()}
    builder = GraphBuilder(plan, options.token, options.base_dir,
                           suffix=f"-{options.token}-L{spec.loops.index(loop)}prep{offset}",
                           known_moves=state.outer_moves,
                           shared_keys=outer_keys, out_dir=options.out_dir, task_names=options.task_names, host_crossings=options.host_outputs)
    placed: dict[tuple[str, str], tuple[str, int | None]] = {}
    for name in loop.body:
        if name in placeholders:
            continue
        device = plan.placement(name).device
        for ref in spec.op(name).inputs:
            if ref.op in placeholders:
                var = placeholders[ref.op]
                init = state.carried[var.name]
                placed[(f"state:{var.name}", device.to_string())] = builder.arrive(init, var.init, device, 0)
            elif ref.op not in body:
                value = lookup_value(state.known, ref, builder)
                placed[(str(ref), device.to_string())] = builder.arrive(value, ref, device, 0)
    compiled = builder.build({}, {}, tuple(dict.fromkeys(key for key, _ in placed.values())))
    moves = {pair: key for pair, key in compiled.moves.items()}
    return compiled, LoopState(state.carried, state.known, {**state.outer_moves, **moves}, placed, {})


@dataclass(frozen=True)
class _Shape:
    """Who does what in a gang window: the body's ops, their devices and slots, each state's owner and readers."""

    order: list[str]  # the body's ops in plan order (state placeholders left out)
    device_of: dict[str, str]
    devices: list[str]
    slot: dict[str, int]  # an op's index among its device's ops
    placeholders: dict[str, int]  # a state's placeholder op -> the state's index
    owner: dict[int, str]  # state index -> the device of its update op
    readers: dict[int, set[str]]  # state index -> devices that read it


def _shape(plan: Plan, loop: Loop) -> _Shape:
    placeholders = {var.placeholder: v for v, var in enumerate(loop.state)}
    order = [p.op for p in plan.placements if p.op in set(loop.body) and p.op not in placeholders]
    device_of = {name: plan.placement(name).device.to_string() for name in order}
    devices = list(dict.fromkeys(device_of[name] for name in order))
    slot = {name: [n for n in order if device_of[n] == device_of[name]].index(name) for name in order}
    owner = {v: device_of[var.update.op] for v, var in enumerate(loop.state)}
    readers: dict[int, set[str]] = {v: set() for v in placeholders.values()}
    for name in order:
        for ref in plan.spec.op(name).inputs:
            if ref.op in placeholders:
                readers[placeholders[ref.op]].add(device_of[name])
    return _Shape(order, device_of, devices, slot, placeholders, owner, readers)


def _sends(plan: Plan, shape: _Shape) -> dict[str, dict[int, list[tuple[str, int, list[str]]]]]:
    """Per device and op slot, every value read on another device at the same step: sent right after it is made."""
    sends: dict[str, dict[int, list[tuple[str, int, list[str]]]]] = {d: {} for d in shape.devices}
    device_of = shape.device_of
    for name in shape.order:
        for ref in plan.spec.op(name).inputs:
            if ref.op in device_of and device_of[ref.op] != device_of[name]:
                outgoing = sends[device_of[ref.op]].setdefault(shape.slot[ref.op], [])
                entry = next((e for e in outgoing if e[0] == str(ref)), None)
                if entry is None:
                    outgoing.append((str(ref), _element(plan, ref), [device_of[name]]))
                elif device_of[name] not in entry[2]:
                    entry[2].append(device_of[name])
    return sends


@dataclass
class _Args:
    """A window task's value arguments: one per (key, element) it reads, in the order first read."""

    refs: list[Any] = field(default_factory=list)
    index: list[int] = field(default_factory=list)
    slots: dict[tuple[str, int | None], int] = field(default_factory=dict)

    def slot(self, key: str, index: int | None) -> int:
        if (key, index) not in self.slots:
            self.slots[(key, index)] = len(self.refs)
            self.refs.append(TaskRef(key))
            self.index.append(-1 if index is None else index)
        return self.slots[(key, index)]


def _state_rules(plan: Plan, loop: Loop, shape: _Shape, d: str, first_window: bool, state: LoopState,
                 args: _Args, base: int = 0) -> tuple[list[int], list[StateRule]]:
    """The states device ``d`` updates or reads, and how each starts the window (argument, received); ``base``:
    where ``d``'s states begin in its previous window's result."""
    relevant = [v for v in shape.placeholders.values() if shape.owner[v] == d or d in shape.readers[v]]
    previous = state.last_windows.get(d)
    owned = [v for v in relevant if shape.owner[v] == d]
    rules = []
    for v in relevant:
        var, owner, readers = loop.state[v], shape.owner[v], shape.readers[v]
        first: tuple[int, int, int] | None = None
        if first_window and d in readers:
            first = (ARG, args.slot(*state.placed[(f"state:{var.name}", d)]), -1)
        elif not first_window and owner == d:
            assert previous is not None
            first = (ARG, args.slot(previous, base + owned.index(v)), -1)
        elif not first_window and d in readers:
            first = (RECEIVED, -1, -1)
        update = (shape.slot[var.update.op], _element(plan, var.update)) if owner == d else None
        rules.append(StateRule(var.name, owner, update, first, tuple(sorted(readers - {d})) if owner == d else ()))
    return relevant, rules


def _inputs(plan: Plan, shape: _Shape, d: str, mine: list[str], relevant: list[int], state: LoopState,
            args: _Args) -> tuple[list[tuple[tuple[int, int, int], ...]], list[tuple[str, str]], dict[int, int]]:
    """Where each of ``d``'s ops takes each input at a step; the values received; the last reader of each slot."""
    state_slot = {v: i for i, v in enumerate(relevant)}
    received: list[tuple[str, str]] = []
    inputs = []
    last_reader: dict[int, int] = {}
    for j, name in enumerate(mine):
        row = []
        for ref in plan.spec.op(name).inputs:
            if ref.op in shape.placeholders:
                row.append((STATE, state_slot[shape.placeholders[ref.op]], -1))
            elif ref.op in shape.device_of and shape.device_of[ref.op] == d:
                row.append((LOCAL, shape.slot[ref.op], _element(plan, ref)))
                last_reader[shape.slot[ref.op]] = j
            elif ref.op in shape.device_of:
                wanted = (str(ref), shape.device_of[ref.op])
                if wanted not in received:
                    received.append(wanted)
                row.append((RECEIVED, received.index(wanted), -1))
            else:
                row.append((ARG, args.slot(*state.placed[(str(ref), d)]), -1))
        inputs.append(tuple(row))
    return inputs, received, last_reader


def _frees(count: int, kept: set[int], last_reader: dict[int, int]) -> tuple[tuple[int, ...], ...]:
    """Per op, the slots no later op of the step reads and the window does not keep: dropped at once."""
    frees: list[list[int]] = [[] for _ in range(count)]
    for s, j in last_reader.items():
        if s not in kept:
            frees[j].append(s)
    for j in range(count):
        if j not in kept and j not in last_reader:
            frees[j].append(j)
    return tuple(tuple(sorted(f)) for f in frees)


def _urgent(plan: Plan, loop: Loop, shape: _Shape) -> set[str]:
    """The body ops the next step waits for: every state update and what it reads, on any device.

    Their values are sent the moment they are made, as TF's Send runs as soon as its tensor is ready;
    other values (a metric's parts) go in one message per device at the step's end or before a wait.
    """
    todo = [var.update.op for var in loop.state]
    found: set[str] = set()
    while todo:
        name = todo.pop()
        if name in found or name not in shape.device_of:
            continue
        found.add(name)
        todo += [ref.op for ref in plan.spec.op(name).inputs]
    return found


SAMPLED_WINDOWS = 8  # windows per loop whose second step every device records (the step picture)


def _sampled(loop: Loop, start: int, last: int, offset: int) -> int | None:
    """The first of the two steps of this window that every device records, or None: the second and third
    (the first also waits for the window to start; the picture of a step reads the one before it) of
    windows spread evenly over the loop."""
    windows = -(-loop.steps // loop.window)
    if offset or (start // loop.window) % max(1, windows // SAMPLED_WINDOWS):
        return None  # an inner loop's later passes repeat its first pass: that one is enough
    return start + min(1, max(0, last - start - 2))


def compile_gang_window(plan: Plan, loop: Loop, start: int, state: LoopState, options: CompileOptions,
                        offset: int = 0, stop: int | None = None, first: bool | None = None) -> CompiledWindow:
    """One task per device running its body ops for steps ``start .. stop - 1`` (plus ``offset``; ``stop``
    defaults to a window's steps on), or one per worker process for the devices sharing one (``processes:
    host``: :func:`_process_groups`). ``first``: the states start from values moved to the devices before it
    (the loop's first window, or the first after a resumed checkpoint; default: ``start == 0``)."""
    last = min(loop.steps, start + loop.window) if stop is None else stop
    suffix = f"-{options.token}-L{plan.spec.loops.index(loop)}w{offset + start}"
    builder = GraphBuilder(plan, options.token, options.base_dir, suffix=suffix, out_dir=options.out_dir,
                           task_names=options.task_names, host_crossings=options.host_outputs)
    steps = builder.step = (offset + start, offset + last - 1)
    shape = _shape(plan, loop)
    groups = _process_groups(plan, shape.devices)
    keys = {d: builder.names.window(loop.name, "+".join(device_label(plan, DeviceSpec.parse(e))
                                                        for e in groups.get(d, (d,))), steps, suffix)
            for d in shape.devices}
    layout = _Layout(loop, shape, groups)
    carried: dict[str, Located] = {}
    metric_keys: dict[str, str] = {}
    elements: dict[str, int] = {}  # a metric read from its part's own result: its element there
    grouped: dict[str, list[tuple[str, WindowTask, list[Any]]]] = {}
    context = _Window(plan, loop, shape, _sends(plan, shape), _urgent(plan, loop, shape), state,
                      offset + start, last - start, start == 0 if first is None else first,
                      _sampled(loop, start, last, offset), start in loop.rungs, options.token, builder.op_task)
    for d in shape.devices:
        key, device, base = keys[d], DeviceSpec.parse(d), layout.base[d]
        payload, task_args = context.part(d, base)
        if d in groups:
            grouped.setdefault(key, []).append((d, payload, task_args))
        else:
            builder.add(key, Task(key, run_window, payload, *task_args), device, payload.ops[0].name, 0)
        builder.partition_ops[key] = (*builder.partition_ops.get(key, ()), *(op.name for op in payload.ops))
        for i, v in enumerate(layout.owned[d]):
            carried[loop.state[v].name] = Located(key, device, base + i)
        direct = _small(plan, [loop.state[v].update for e in groups.get(d, (d,)) for v in layout.owned[e]])
        here = [(name, ref) for name, ref in loop.metrics if shape.device_of[ref.op] == d]
        for position, (name, ref) in enumerate(here, start=base + len(layout.owned[d])):
            if direct:  # the client reads the part's own result: no getter task waiting for the device's thread
                metric_keys[name], elements[name] = key, position
            else:
                metric_keys[name] = builder.materialize(Located(key, device, position), ref).key
    for key, parts in grouped.items():
        _add_group(builder, key, parts)
    sinks = tuple(dict.fromkeys(keys.values()))
    compiled = replace(builder.build({}, {}), gang=sinks)
    return CompiledWindow(compiled, carried, (tuple(metric_keys[name] for name, _ in loop.metrics),),
                          sinks, {}, last, metrics_stacked=True, devices=keys,
                          metric_elements=tuple(elements.get(name, -1) for name, _ in loop.metrics))


def _process_groups(plan: Plan, devices: list[str]) -> dict[str, tuple[str, ...]]:
    """The window's devices that share a worker process with another of its devices (``processes: host``):
    each one's devices of that process, in the window's order. Their window is one task (``runtime.groups``)."""
    by_worker: dict[str, list[str]] = {}
    for d in devices:
        by_worker.setdefault(plan.spec.cluster.standing_for(d), []).append(d)
    return {d: tuple(together) for together in by_worker.values() if len(together) > 1 for d in together}


class _Layout:
    """Where each device's part begins in its task's result: the states it carries out, then its metrics;
    after the parts of the devices before it in its group (a group's task returns its parts one after another)."""

    def __init__(self, loop: Loop, shape: _Shape, groups: dict[str, tuple[str, ...]]):
        self.owned = {d: [v for v in shape.placeholders.values() if shape.owner[v] == d] for d in shape.devices}
        size = {d: len(self.owned[d]) + sum(1 for _, ref in loop.metrics if shape.device_of[ref.op] == d)
                for d in shape.devices}
        self.base = {d: sum(size[e] for e in groups.get(d, (d,))[:groups.get(d, (d,)).index(d)])
                     for d in shape.devices}


def _add_group(builder: GraphBuilder, key: str, parts: list[tuple[str, WindowTask, list[Any]]]) -> None:
    """One task for the parts of the devices of one process, asking for every one of their resources."""
    group = GroupTask(tuple(payload for _, payload, _ in parts), tuple(len(args) for _, _, args in parts))
    device = DeviceSpec.parse(parts[0][0])
    builder.add(key, Task(key, run_group, group, *(a for _, _, args in parts for a in args)), device,
                parts[0][1].ops[0].name, 0)
    merged: dict[str, float] = {}
    for d, payload, _ in parts:  # each device's as its own part would ask (a packed copy's share of a GPU too)
        for name, amount in builder.task_resources(DeviceSpec.parse(d), payload.ops[0].name).items():
            merged[name] = merged.get(name, 0.0) + amount
    builder.resources[key] = merged


@dataclass(frozen=True)
class _Window:
    """What every part of one window shares: the body's shape, its sends, the states so far, its steps."""

    plan: Plan
    loop: Loop
    shape: _Shape
    sends: dict[str, dict[int, list[tuple[str, int, list[str]]]]]
    urgent: set[str]
    state: LoopState
    start: int  # the window's first step (counted across the steps of enclosing loops)
    steps: int
    opening: bool  # the states start from values moved to the devices before the window
    sample: int | None
    resumes: bool
    token: str  # the run's
    op_task: Callable[[str, int], Any]  # the builder's: an op's runtime task

    def part(self, d: str, base: int) -> tuple[WindowTask, list[Any]]:
        """Device ``d``'s part (its ops, inputs, sends, states, metrics) and its task's arguments."""
        plan, loop, shape = self.plan, self.loop, self.shape
        mine = [name for name in shape.order if shape.device_of[name] == d]
        args = _Args()
        relevant, rules = _state_rules(plan, loop, shape, d, self.opening, self.state, args, base)
        inputs, received, last_reader = _inputs(plan, shape, d, mine, relevant, self.state, args)
        metrics = [(shape.slot[ref.op], _element(plan, ref)) for _, ref in loop.metrics
                   if shape.device_of[ref.op] == d]
        kept = {s for s, _ in metrics} | {rule.update[0] for rule in rules if rule.update is not None}
        previous = self.state.last_windows.get(d)
        owns = any(shape.owner[v] == d for v in relevant)
        controls = [TaskRef(previous)] if previous is not None and not owns else []
        sends = self.sends[d]
        payload = WindowTask(plan.spec.loops.index(loop), self.token, d, self.start, self.steps,
                             self.opening, tuple(self.op_task(n, 0) for n in mine), tuple(inputs),
                             tuple(tuple((r, e, tuple(to)) for r, e, to in sends.get(j, ())) for j in range(len(mine))),
                             tuple(received), tuple(rules), tuple(metrics), _frees(len(mine), kept, last_reader),
                             len(args.refs), tuple(args.index) if any(i >= 0 for i in args.index) else (),
                             loop.name, self.sample,
                             tuple(n in self.urgent and bool(sends.get(j)) for j, n in enumerate(mine)),
                             self.resumes, tuple(shape.order.index(n) for n in mine))
        return payload, [*args.refs, *controls]


DIRECT_READ_BYTES = 64 << 10  # a part whose carried states are this small at most is read whole by the client


def _small(plan: Plan, updates: list[OpRef]) -> bool:
    """Whether the states a device's part carries out (made by ``updates``) are small enough that the client
    may read the part's whole result for its metrics.

    A getter task for a metric needs a thread of the device, which the device's next window holds until it
    ends: so the client would read window k only once window k + 1 is done, and submit k + 2 only then,
    leaving the device idle between windows. Reading the part's result costs the client its carried states
    as well, so only where they are small (as planned; a size not known counts as large).
    """
    sizes = [plan.placement(ref.op).out_bytes for ref in updates]
    return all(size is not None for size in sizes) and sum(s or 0 for s in sizes) <= DIRECT_READ_BYTES
