"""One device's part of a loop window: its body ops, step after step, in one Dask task.

This is TensorFlow's execution model for a step function: every device gets
its partition of the step once (here: once per window of steps) and runs it
for each step, exchanging only the values that cross devices, worker to
worker (:mod:`.exchange`), never through the scheduler. The window
partitions of one window run side by side, one per device. Two devices of
one process (a host worker's, ``processes: host``) hand their values over by
reference, no socket and no pickling between, as TensorFlow hands tensors
between the devices of one worker: one thread runs their ops, and a value
goes into the thread's hand-over table (:class:`_Hand`), where its reader
takes it, with no mailbox, lock or wake-up between.

Per step, each op takes its inputs from this step's earlier ops (local),
from a value moved here before the loop started (an outer value, or a
state's initial value), from the carried state, or from another device
(received). After it runs, its value is sent to every other device that
reads it at this step. A carried state lives where its update op runs; that
device sends it on to its readers elsewhere, for the next step, and at the
start of each window after the first. Each op keeps everything it has when
it runs alone (memory charge, timeout, record, log line, errors naming it).

The task returns the states this device carries (to the next window's
partition on this device) and, for each metric computed here, the window's
values stacked on the host (for the client).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from collections.abc import Iterable
from typing import Any

import numpy as np

from ..errors import RunError
from .exchange import Sent, Tag, send
from .device import Runtime, _runtime, execute
from .tasks import OpTask
from .together import Part

# Where an input comes from at a step: (kind, slot, element)
LOCAL, ARG, STATE, RECEIVED = 0, 1, 2, 3
Source = tuple[int, int, int]


@dataclass(frozen=True)
class StateRule:
    """One carried state as this device sees it."""

    name: str
    owner: str  # the device whose update op makes it
    update: tuple[int, int] | None  # (op slot, element) of the update op, when this device is the owner
    first: Source | None  # its value at the window's first step, when this device needs it then
    send_to: tuple[str, ...]  # the owner sends it to these devices for every step they read it


@dataclass(frozen=True)
class WindowTask:
    """One device's part of one loop window."""

    loop: int  # the loop's index in the spec (tags of values sent)
    run: str
    device: str
    start: int  # the window's first step (counted across the steps of enclosing loops)
    steps: int
    first: bool  # the loop's first window: states start from values moved here before the loop
    ops: tuple[OpTask, ...]  # this device's body ops, in the plan's order
    inputs: tuple[tuple[Source, ...], ...]  # per op
    sends: tuple[tuple[tuple[str, int, tuple[str, ...]], ...], ...]  # per op: (value, element, to devices)
    received: tuple[tuple[str, str], ...]  # RECEIVED slot -> (value, sender device)
    states: tuple[StateRule, ...]
    metrics: tuple[tuple[int, int], ...]  # (op slot, element) of each metric computed here
    frees: tuple[tuple[int, ...], ...]  # per op: op slots no later op of the step reads
    n_args: int  # leading task arguments that are values; the rest only order the windows of a device
    arg_index: tuple[int, ...] = ()  # per value argument: the element of a tuple it is, or -1
    loop_name: str = ""
    sample: int | None = None  # the first of two steps whose timelines this device records (the step picture)
    urgent: tuple[bool, ...] = ()  # per op: its sends go at once (the next step waits for them)
    resumes: bool = False  # the first window after a decision step of a sweep's rule (the loop was paused there)
    positions: tuple[int, ...] = ()  # per op: its place in the step's order across the window's devices


def run_window(task: WindowTask, *args: Any) -> tuple[Any, ...]:
    """Run this device's ops for the window's steps; the states it carries and its metrics. (The devices of
    one process run their window as one task instead: :mod:`.groups`.)"""
    worker, runtime = _runtime()
    outer = outer_values(task, args)
    del args
    return run_together([Part(task, worker, runtime, outer)])[0]


def outer_values(task: WindowTask, args: tuple[Any, ...]) -> list[Any]:
    """The window's value arguments (each an element of a tuple where the task says so)."""
    return [a if not task.arg_index or task.arg_index[i] < 0 else a[task.arg_index[i]]
            for i, a in enumerate(args[:task.n_args])]


def run_together(parts: list[Part]) -> list[tuple[Any, ...]]:
    """Run the windows of ``parts`` in this thread, step after step; each part's result, in order.

    One part is a device's window alone. Several are devices of one process: their ops run interleaved in
    the step's order (a value is made before any device reads it), handed over by reference at once, so no
    thread waits for another and nothing waits for the interpreter lock.
    """
    began = time.time()
    hand = _Hand(p.task.device for p in parts) if len(parts) > 1 else None
    windows = [_Window(p.task, p.worker, p.runtime, p.outer, hand) for p in parts]
    if len(windows) == 1:
        window = windows[0]
        for step in range(window.task.start, window.last + 1):
            window.run_step(step)
    else:
        _interleave(windows)
    results = []
    for window in windows:
        task, runtime = window.task, window.runtime
        window.out.wait()  # the window ends once every value it sent is on its way
        runtime.ran_window(task.run, task.loop_name, began, time.time(), task.first or task.resumes,
                           (task.start + 1, window.last + 1))  # counted from 1, as the metric series
        carried = tuple(window.state[v] for v, rule in enumerate(task.states) if rule.update is not None)
        results.append(carried + tuple(np.stack([np.asarray(x) for x in values]) for values in window.series))
    return results


def _interleave(windows: list[_Window]) -> None:
    """Every step of one process's windows, their ops in the step's order across devices."""
    outs = [window.out for window in windows]

    def flush_all() -> None:  # before any wait: a value unsent may be what a device elsewhere waits for
        for out in outs:
            out.flush()

    thread = "+".join(window.task.device for window in windows)  # the step picture's: who shared the thread
    for window in windows:
        window.flush_all, window.thread = flush_all, thread
    flush_all()  # the states each owner passes on at the window's start
    program = [(window, j) for _, _, window, j in
               sorted((position, k, window, j) for k, window in enumerate(windows)
                      for j, position in enumerate(window.task.positions))]
    task = windows[0].task
    for step in range(task.start, task.start + task.steps):
        for window in windows:
            window.begin(step)
        for window, j in program:
            window.run_op(j)
        for window in windows:
            window.end()


class _Window:
    """One device's window while it runs: the states it holds, the metrics so far, what it sends.

    What a step does is laid out once, when the window starts (the inputs of each op, the states that
    arrive each step, the sends after each op), so that a step only follows it: :meth:`begin`, then
    :meth:`run_op` for each op (alone, in this device's order; with a ``hand``, interleaved with the other
    devices of this thread, to whom it hands its values as each op makes them), then :meth:`end`.
    """

    def __init__(self, task: WindowTask, worker: Any, runtime: Runtime, outer: list[Any], hand: _Hand | None = None):
        self.task, self.worker, self.runtime, self.outer = task, worker, runtime, outer
        self.out = _Outgoing(worker, runtime, task, hand)
        self.flush_all = self.out.flush
        self.state = _first_states(task, outer, self.out)
        self.series: list[list[Any]] = [[] for _ in task.metrics]
        self.last = task.start + task.steps - 1
        self.refs = [f"state:{rule.name}" for rule in task.states]
        self.updates: list[list[tuple[int, int, str, tuple[str, ...]]]] = [[] for _ in task.ops]
        for v, rule in enumerate(task.states):  # per op: the states it updates (state, element, ref, readers)
            if rule.update is not None:
                self.updates[rule.update[0]].append((v, rule.update[1], self.refs[v], rule.send_to))
        self.flush_after = [bool(task.urgent and task.urgent[j]) or any(u[3] for u in self.updates[j])
                            for j in range(len(task.ops))]
        # the states updated elsewhere: they arrive for each step after the first (at the first too when sent)
        arriving = [(v, rule.first[0] == RECEIVED) for v, rule in enumerate(task.states)
                    if rule.update is None and rule.first is not None]
        self.arrive_later = tuple(v for v, _ in arriving)
        self.arrive_first = tuple(v for v, received in arriving if received)
        self.steps = list(zip(task.ops, task.inputs, task.sends, self.updates, self.flush_after, task.frees))
        # the step running now (begin .. end)
        self.step, self.first, self.more = task.start, True, True
        self.timeline: Timeline | None = None
        self.thread = ""  # the devices this thread runs, when more than this one
        self.received: dict[int, Any] = {}
        self.here: list[Any] = []
        self.env: list[Any] = []

    def run_step(self, step: int) -> None:
        self.begin(step)
        for j in range(len(self.steps)):
            self.run_op(j)
        self.end()

    def begin(self, step: int) -> None:
        task = self.task
        self.step, self.first, self.more = step, step == task.start, step < self.last  # more: a step follows
        self.timeline = self.out.timeline = (Timeline(step, self.thread) if task.sample is not None
                                             and 0 <= step - task.sample <= 1 else None)
        self.received = {}
        here = self.here = list(self.state)
        for v in (self.arrive_later if step > task.start else self.arrive_first):
            here[v] = None
        self.env = [None] * len(task.ops)

    def run_op(self, j: int) -> None:
        op, inputs, sends, updates, flush, frees = self.steps[j]
        env, out, step, timeline = self.env, self.out, self.step, self.timeline
        raw = self.inputs(inputs, env, self.here, self.received, step, op.name, timeline)
        began = time.time() if timeline is not None else 0.0
        value = env[j] = execute(op, self.runtime, self.worker, raw, step, self.first)
        if timeline is not None:
            timeline.add("op", op.name, began, time.time())
        for ref, element, devices in sends:
            out.add(step, ref, value if element < 0 else value[element], devices)
        for v, element, ref, readers in updates:  # a state goes on to its readers as soon as it is made
            self.state[v] = value if element < 0 else value[element]
            if self.more and readers:
                out.add(step + 1, ref, self.state[v], readers)
        if flush:
            out.flush()
        for slot in frees:
            env[slot] = None

    def end(self) -> None:
        _end_step(self.task, self.env, self.series, self.out)
        if self.timeline is not None:
            self.runtime.sample_step(self.task.run, self.task.loop_name, self.task.device, self.timeline.finish())

    def inputs(self, sources: tuple[Source, ...], env: list[Any], here: list[Any], received: dict[int, Any],
               step: int, reader: str, timeline: Timeline | None) -> tuple[Any, ...]:
        """An op's inputs at ``step``: made here, moved here before the loop, carried, or received."""
        values = []
        for kind, slot, element in sources:
            if kind == LOCAL:
                value = env[slot]
            elif kind == ARG:
                value = self.outer[slot]
            elif kind == STATE:
                value = here[slot]
                if value is None:
                    value = here[slot] = self.receive(step, self.refs[slot], self.task.states[slot].owner,
                                                      reader, timeline)
            elif slot in received:
                value = received[slot]
            else:
                ref, sender = self.task.received[slot]
                value = received[slot] = self.receive(step, ref, sender, reader, timeline)
            values.append(value if element < 0 else value[element])
        return tuple(values)

    def receive(self, step: int, ref: str, sender: str, reader: str, timeline: Timeline | None) -> Any:
        hand = self.out.hand
        if hand is None or sender not in hand.devices:
            self.flush_all()  # never wait with values unsent that another device may be waiting for
        return self.out.receive(step, ref, sender, reader, timeline)


def _end_step(task: WindowTask, env: list[Any], series: list[list[Any]], out: _Outgoing) -> None:
    """Keep the step's metrics; send what is still unsent."""
    backend = out.runtime.backend
    for m, (slot, element) in enumerate(task.metrics):
        series[m].append(backend.to_host(_element(env[slot], element)))
    out.flush()


class Timeline:
    """What one device did during one sampled step: ops, waits for values, sends, with wall-clock times; and
    ``thread``, the devices whose ops one thread ran with its own (``processes: host``), or ""."""

    def __init__(self, step: int, thread: str = ""):
        self.step, self.begin, self.thread = step, time.time(), thread
        self.events: list[tuple[str, str, float, float]] = []

    def add(self, kind: str, name: str, start: float, stop: float) -> None:
        self.events.append((kind, name, start, stop))

    def finish(self) -> dict[str, Any]:
        out = {"step": self.step, "begin": self.begin, "end": time.time(), "events": self.events}
        return {**out, "thread": self.thread} if self.thread else out


def _first_states(task: WindowTask, outer: list[Any], out: _Outgoing) -> list[Any]:
    """The states at the window's start: those moved here before the loop, the others to arrive."""
    state: list[Any] = [None] * len(task.states)
    for v, rule in enumerate(task.states):
        if rule.first is not None and rule.first[0] == ARG:
            state[v] = _element(outer[rule.first[1]], rule.first[2])
    if not task.first:  # carried in from the last window: the owner passes it on to its readers elsewhere
        for v, rule in enumerate(task.states):
            if rule.update is not None and rule.send_to:
                out.add(task.start, f"state:{rule.name}", state[v], rule.send_to)
    return state


def _element(value: Any, element: int) -> Any:
    return value if element < 0 else value[element]


_MISSING = object()


class _Hand:
    """What the devices run by one thread make for each other in a window: the sender puts a value in, its
    reader (later in the step's order) takes it out. One thread uses it: no lock."""

    __slots__ = ("devices", "values")

    def __init__(self, devices: Iterable[str]):
        self.devices = frozenset(devices)
        self.values: dict[tuple[Tag, str], Any] = {}  # (tag, reader device) -> value


class _Outgoing:
    """Values to send, gathered per device: one message each when the step ends or before any wait.

    How each peer is reached (its mailbox in this process, a direct link, Dask's comms) is looked up once
    per window: the address book and the process's devices do not change while a window runs.
    """

    def __init__(self, worker: Any, runtime: Runtime, task: WindowTask, hand: _Hand | None = None):
        self.worker, self.runtime, self.task, self.hand = worker, runtime, task, hand
        self.pending: dict[str, list[tuple[Tag, Any]]] = {}
        self.sent: list[Sent] = []
        self.timeline: Timeline | None = None
        self.to_host = runtime.backend.to_host
        self.linked: dict[str, bool] = {}  # peer -> reached over a direct link (else Dask's comms)

    def over_link(self, device: str) -> bool:
        found = self.linked.get(device)
        if found is None:
            found = self.linked[device] = self.runtime.links.reaches(device)
        return found

    def add(self, step: int, ref: str, value: Any, devices: tuple[str, ...]) -> None:
        host = self.to_host(value)
        tag = (self.task.loop, step, ref)
        hand = self.hand
        for device in devices:
            if hand is not None and device in hand.devices:  # its reader runs in this thread: handed over now
                hand.values[(tag, device)] = host
                continue
            items = self.pending.get(device)
            if items is None:
                self.pending[device] = [(tag, host)]
            else:
                items.append((tag, host))

    def flush(self) -> None:
        if not self.pending:
            return
        run = self.task.run
        for device, items in self.pending.items():
            began = time.time() if self.timeline is not None else 0.0
            if self.over_link(device):
                self.runtime.links.send(device, run, items)  # written now: nothing to wait for later
            else:
                self.sent.append(send(self.worker, device, run, items))
            if self.timeline is not None:
                self.timeline.add("send", f"{', '.join(ref for (_, _, ref), _ in items)} to {device}",
                                  began, time.time())
        self.pending.clear()

    def wait(self) -> None:
        for done in self.sent:
            done.result()

    def receive(self, step: int, ref: str, sender: str, reader: str, timeline: Timeline | None) -> Any:
        """The value ``sender`` sent for ``ref`` at ``step``, waiting for it; on this device."""
        runtime, task, hand = self.runtime, self.task, self.hand
        start = time.time()
        if hand is not None and sender in hand.devices:  # made already in this thread: never waited for
            value = hand.values.pop(((task.loop, step, ref), task.device), _MISSING)
            if value is _MISSING:
                raise RunError(f"op '{reader}' on {task.device}: '{ref}' of step {step} from {sender} was not made "
                               f"before its reader, though both run in one thread (a bug in the window's order)")
        else:
            links = runtime.links if self.over_link(sender) else None
            try:
                value = runtime.mailbox.take(task.run, (task.loop, step, ref), sender, links)
            except RunError as exc:
                raise RunError(f"op '{reader}' on {task.device}: {exc}") from None
        moved = runtime.backend.to_device(value, reader)
        stop = time.time()
        if timeline is not None:
            timeline.add("wait", f"{ref} from {sender}", start, stop)
        handed = hand is not None and sender in hand.devices  # (no byte left the process: none counted as sent)
        runtime.record(task.run, f"{ref}@{task.device}", "exchange", task.device, start, stop - start,
                       0 if handed else int(getattr(moved, "nbytes", 0)))
        return moved
