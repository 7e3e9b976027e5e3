"""What a run holds while a loop runs, in each way a loop can run (``plan.loop_mode``).

A loop is one step in the schedule (its span: the positions of its body's
ops); what it holds for many steps at once is counted over that span.

* Every mode: a value from outside the loop that a body op reads on another
  device, and each state's initial value on the devices reading the state,
  are moved there once before the first step and kept until the run ends
  (the driver keeps those futures), or until the enclosing loop's step ends.
  Once per value and device, however many loops read it there (``compile``
  names the move by the value and the device): the loops of a sweep's
  copies on one GPU share the data they all read.
  An inner loop's final states and metric series are kept until then too.
* ``gang`` (``orchestrator.runtime.windows``): each device runs its body ops
  for a window of steps in one task. Within a step, a value is dropped after
  its last reader on the device; a value received is held from its first
  reader to the end of the step; a state update and a metric to the end of
  the step. A value another device reads is sent when the device next waits
  for a value (it sends what it has first) or when the step ends: the
  direct links write it then. It is counted once more through the next step,
  as the transport is the run's choice: over Dask's comms (workers that
  cannot link directly) a value is held until the worker's event loop has
  written it. A cluster the spec declares TLS for always sends through
  Dask's comms, whose event loop may wait for the window's thread: every
  value sent in the window is counted to its end. (TLS given only on the
  command line is not the plan's to know: there it may fall short by those
  values.) Across steps: a state's owner holds the state, the step before's
  and the last window's (the driver has two windows in flight: a task's
  argument lives until the task ends), and every metric value of the window
  (they are stacked at its end).
* ``partition`` and ``op``: a task per device partition (or op) per step.
  Dask runs any task whose inputs are ready, in any order: a step's ops that
  do not wait for the state may all run ahead (polyfit at
  ``--granularity op``: 170 batches on a GPU at once), and the driver has
  two windows in flight. So every value a task returns, and every value
  moved between devices at a step, is counted once per step of two windows
  and one more (the last window's state, read by the first tasks of the
  next): an upper bound, as what Dask runs first is not the plan's to know.
  Only a chained value is bounded: made from a state and read only by ops
  an update of that state waits for, it is made again only after all its
  readers have run (:func:`_chained`: three steps). A value used only inside
  its partition is held as it is outside loops.
* ``nested`` (a loop holding loops): the driver runs each step's ops as
  stages of their own and waits only for the inner loops and the metrics,
  so a step's last tasks may still hold their values while the next step
  starts: every value is counted for two steps.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from ..records import Plan
from ...spec.records import Loop, OpRef
from .timeline import Held, Key, Placed, Scopes, Timeline, key_of, label, size_of


@dataclass(frozen=True)
class Span:
    """A loop as the schedule has it: its mode, its own ops, and the positions it runs between."""

    loop: Loop
    mode: str
    own: tuple[str, ...]  # the ops its steps run (not its states, nor its inner loops' ops)
    start: int
    stop: int
    hold: int  # until when what was moved in for it is kept: the run's end, or its enclosing step's

    @property
    def steps(self) -> int:
        """The steps one window runs (the loop's window, or all its steps when fewer)."""
        return min(self.loop.window, self.loop.steps)


def in_loops(plan: Plan, granularity: str, line: Timeline, scope: Scopes,
             unknown: dict[str, list[str]]) -> Iterator[Placed]:
    """What every device holds while the loops run: moved in, made by their steps, their inner loops' results."""
    spans = _spans(plan, granularity, line, scope)
    yield from _moved_in(plan, line, scope, spans)
    for span in spans:
        yield from _exports(plan, line, scope, span, unknown)
        if span.mode == "gang":
            yield from _gang(plan, line, scope, span, unknown)
        else:
            loop = span.loop
            live = min(loop.steps, 2) if span.mode == "nested" else min(loop.steps, 2 * loop.window + 1)
            yield from _per_step(plan, line, scope, span, live, granularity == "op", unknown)


def _spans(plan: Plan, granularity: str, line: Timeline, scope: Scopes) -> list[Span]:
    spans: dict[str, Span] = {}
    for loop in sorted(plan.spec.loops, key=lambda lp: len(lp.name)):  # an enclosing loop before its inner ones
        placeholders = {var.placeholder for var in loop.state}
        positions = [line.step_of[n] for n in loop.body if n not in placeholders]
        if not positions:
            continue
        own = tuple(sorted((n for n in scope.own(loop) if n not in scope.exports), key=line.step_of.__getitem__))
        holder = scope.parent[loop.name]
        hold = line.end if holder is None or holder.name not in spans else spans[holder.name].stop
        spans[loop.name] = Span(loop, plan.loop_mode(loop.name, granularity).mode, own, min(positions),
                                max(positions), hold)
    return list(spans.values())


def _home(line: Timeline, scope: Scopes, ref: OpRef) -> str:
    """The device holding ``ref`` during a step: a state lives where its update is made."""
    loop = scope.placeholders.get(ref.op)
    if loop is None:
        return line.device_of[ref.op]
    return line.device_of[next(v.update.op for v in loop.state if v.placeholder == ref.op)]


def _moved_in(plan: Plan, line: Timeline, scope: Scopes, spans: list[Span]) -> Iterator[Placed]:
    """Values from outside the loops, and states' initial values, moved once to each device reading them.

    One move per value and device, whichever loops read it there (``compile`` names it by the value and
    the device): a sweep's copies of a loop share the data they all read.
    """
    spec = plan.spec
    wanted: dict[tuple[str, str], tuple[OpRef, int, int, list[str]]] = {}
    for span in spans:
        loop = span.loop
        body = set(loop.body)
        inits = {var.placeholder: var.init for var in loop.state}
        for name in span.own:
            device = line.device_of[name]
            for ref in spec.op(name).inputs:
                if ref.op in inits:
                    source = inits[ref.op]  # the state's first value: there before the first step
                elif ref.op in body:
                    continue  # made by the loop's step (or by an inner loop)
                else:
                    source = ref
                if _home(line, scope, source) == device:
                    continue
                pair = (str(source), device)
                _, start, hold, loops = wanted.get(pair, (source, span.start, span.hold, []))
                if loop.name not in loops:
                    loops.append(loop.name)
                wanted[pair] = (source, min(start, span.start), max(hold, span.hold), loops)
    for (text, device), (ref, start, hold, loops) in wanted.items():
        size = spec.value(ref).nbytes
        if size is not None:
            read = f"loop '{loops[0]}'" if len(loops) == 1 else f"{len(loops)} loops"
            yield device, Held(start, hold, size, f"{text} (moved in for {read})", key_of(ref))


def _exports(plan: Plan, line: Timeline, scope: Scopes, span: Span,
             unknown: dict[str, list[str]]) -> Iterator[Placed]:
    """An inner loop's final states and metric series, kept until its enclosing loop's step ends."""
    if scope.parent[span.loop.name] is None:
        return  # a loop outside any other: its results are values of the run, counted with them
    for name in span.loop.exports:
        size = size_of(plan.spec, (name, 0))
        if size is None:
            unknown[line.device_of[name]].append(name)
        else:
            yield line.device_of[name], Held(line.step_of[name], span.hold, size, name, (name, 0))


def _readers(plan: Plan, span: Span) -> dict[Key, list[str]]:
    readers: dict[Key, list[str]] = {}
    for name in span.own:
        for ref in plan.spec.op(name).inputs:
            readers.setdefault(key_of(ref), []).append(name)
    return readers


def _outputs(plan: Plan, line: Timeline, span: Span, unknown: dict[str, list[str]]) -> Iterator[tuple[Key, int]]:
    """Every output of the loop's own ops with its size; the ops of unknown size are noted."""
    spec = plan.spec
    for name in span.own:
        for i in range(spec.op(name).outputs):
            size = size_of(spec, (name, i))
            if size is None:
                unknown[line.device_of[name]].append(name)
            else:
                yield (name, i), size


def _gang(plan: Plan, line: Timeline, scope: Scopes, span: Span,
          unknown: dict[str, list[str]]) -> Iterator[Placed]:
    """A device's window task within a step, as ``runtime.windows`` holds its values."""
    loop, spec = span.loop, plan.spec
    readers = _readers(plan, span)
    kept = {key_of(var.update) for var in loop.state} | {key_of(ref) for _, ref in loop.metrics}
    waits = _waits(plan, line, scope, span)
    courier = spec.cluster.tls is not None  # values go through Dask's comms, not the direct links
    for key, size in _outputs(plan, line, span, unknown):
        device, made = line.device_of[key[0]], line.step_of[key[0]]
        here = [line.step_of[r] for r in readers.get(key, ()) if line.device_of[r] == device]
        stop = max([made, *here, *([span.stop] if key in kept else [])])
        if any(line.device_of[r] != device for r in readers.get(key, ())):
            # the links write a value when the device next waits (or the step ends); Dask's comms (a TLS
            # cluster) when the worker's event loop gets to it: at the latest when the window ends
            flush = span.stop + 1 if courier else next((p for p in waits.get(device, ()) if p > made), span.stop + 1)
            stop = max(stop, flush - 1)
            before = max(1, span.steps - 1) if courier else 1
            yield device, Held(span.start, span.stop, before * size, f"{label(spec, key)} (sent, {before} earlier)", key)
        yield device, Held(made, stop, size, label(spec, key), key)
    for (ref, device), first in _received(plan, line, scope, span).items():
        nbytes = spec.value(ref).nbytes
        if nbytes is not None:
            yield device, Held(first, span.stop, nbytes, f"{ref} (received)", key_of(ref))
    yield from _window(plan, line, span)


def _window(plan: Plan, line: Timeline, span: Span) -> Iterator[Placed]:
    """Across a window's steps: each state where it is updated, and each metric's earlier values."""
    loop, spec = span.loop, plan.spec
    copies = (loop.steps > loop.window) + (span.steps >= 2)  # the last window's, and the step before's
    for var in loop.state:
        size = spec.value(var.update).nbytes
        if size is not None and copies:
            yield line.device_of[var.update.op], Held(span.start, span.stop, copies * size,
                                                      f"state {var.name} (carried)", key_of(var.update))
    for name, ref in loop.metrics:
        size = spec.value(ref).nbytes
        if size is not None and span.steps > 1:
            yield line.device_of[ref.op], Held(span.start, span.stop, (span.steps - 1) * size,
                                               f"metric {name} ({span.steps - 1} earlier steps)", key_of(ref))


def _received(plan: Plan, line: Timeline, scope: Scopes, span: Span) -> dict[tuple[OpRef, str], int]:
    """Values a device receives at each step (from another device, or a state updated elsewhere): its
    first reader's position."""
    own = set(span.own)
    states = {var.placeholder for var in span.loop.state}
    first: dict[tuple[OpRef, str], int] = {}
    for name in span.own:
        device = line.device_of[name]
        for ref in plan.spec.op(name).inputs:
            if (ref.op in own or ref.op in states) and _home(line, scope, ref) != device:
                first.setdefault((ref, device), line.step_of[name])
    return first


def _waits(plan: Plan, line: Timeline, scope: Scopes, span: Span) -> dict[str, list[int]]:
    """Per device, the positions of its ops that wait for a value at a step: before waiting, it sends
    what it has made."""
    waits: dict[str, list[int]] = {}
    for (_, device), position in _received(plan, line, scope, span).items():
        waits.setdefault(device, []).append(position)
    return {device: sorted(set(found)) for device, found in waits.items()}


def _per_step(plan: Plan, line: Timeline, scope: Scopes, span: Span, live: int, per_op: bool,
              unknown: dict[str, list[str]]) -> Iterator[Placed]:
    """Tasks per step: what they return, and what moves between devices, for ``live`` steps at once."""
    loop, spec = span.loop, plan.spec
    readers = _readers(plan, span)
    own = set(span.own)
    # returned by its task: read by another task (of the step, an inner loop, the loop's results) or wanted
    returned = {key_of(var.update) for var in loop.state} | {key_of(ref) for _, ref in loop.metrics}
    returned |= {key_of(ref) for name in loop.body if name not in own for ref in spec.op(name).inputs}
    returned |= {key for key, names in readers.items()
                 if key[0] in own and any(line.unit_of[n] != line.unit_of[key[0]] for n in names)}
    chained = _chained(plan, span, readers) if span.mode != "nested" else set()
    for key, size in _outputs(plan, line, span, unknown):
        device, made = line.device_of[key[0]], line.step_of[key[0]]
        if per_op or key in returned:
            steps = min(live, CHAINED) if key in chained else live
            yield device, Held(span.start, span.stop, steps * size, f"{label(spec, key)} ({steps} steps)", key)
        else:  # used inside its partition only: held while it runs, by as many tasks as the device runs at once
            inside = [line.step_of[r] for r in readers.get(key, ())]
            yield device, Held(made, max([made, *inside]), min(_threads(plan, device), live) * size,
                               label(spec, key), key)
    updates = {var.placeholder: key_of(var.update) for var in loop.state}
    for (ref, device), _ in _received(plan, line, scope, span).items():
        nbytes = spec.value(ref).nbytes
        steps = min(live, CHAINED) if updates.get(ref.op, key_of(ref)) in chained else live
        if nbytes is not None:
            yield device, Held(span.start, span.stop, steps * nbytes, f"{ref} (moved, {steps} steps)", key_of(ref))


CHAINED = 3  # steps of a chained value held at once: the step's, the next step's, and one Dask has yet to drop


def _chained(plan: Plan, span: Span, readers: dict[Key, list[str]]) -> set[Key]:
    """Values that cannot pile up over steps: made from a state, and read only by ops that an update of
    one of those states waits for. The next step makes the value again only once that update is made, so
    after all its readers have run: one step's, the next one's, and one not yet dropped are held at once."""
    loop, spec = span.loop, plan.spec
    own = set(span.own)
    placeholders = {var.placeholder for var in loop.state}
    states: dict[str, set[str]] = {}  # own op -> the states it is made from
    for name in span.own:
        inputs = spec.op(name).inputs
        states[name] = {r.op for r in inputs if r.op in placeholders}.union(
            *(states[r.op] for r in inputs if r.op in own))
    feeds: dict[str, set[str]] = {}  # own op -> the states whose update waits for it
    for var in loop.state:
        todo = [var.update.op] if var.update.op in own else []
        while todo:
            name = todo.pop()
            if var.placeholder not in feeds.setdefault(name, set()):
                feeds[name].add(var.placeholder)
                todo += [r.op for r in spec.op(name).inputs if r.op in own]
    wanted = {key_of(ref) for _, ref in loop.metrics}  # the driver keeps every step's until the window ends
    chained = set()
    for key, names in readers.items():
        if key[0] not in own or not states[key[0]] or key in wanted:
            continue
        later = [n for var in loop.state if key_of(var.update) == key for n in _reading(plan, span, var.placeholder)]
        if all(feeds.get(n, set()) & states[key[0]] for n in names + later):
            chained.add(key)
    for var in loop.state:  # an update read only by the next step
        key = key_of(var.update)
        later = _reading(plan, span, var.placeholder)
        if key not in readers and key[0] in own and states[key[0]] and later and \
                all(feeds.get(n, set()) & states[key[0]] for n in later):
            chained.add(key)
    return chained


def _reading(plan: Plan, span: Span, name: str) -> list[str]:
    return [n for n in span.own if any(r.op == name for r in plan.spec.op(n).inputs)]


def _threads(plan: Plan, device: str) -> int:
    known = plan.spec.cluster.device(device)
    return known.threads if known is not None else 1
