"""Lost device workers: seen in Dask's own events, and what the run does about each.

Policy. A device worker is lost when the scheduler removes it: its process died or was killed, or its
machine or network went away. The scheduler says so itself, in the ``remove-worker`` event of its ``all``
topic, with the tasks the worker held (``processing-tasks``) and the finished values that lived only
there (``lost-computed-tasks``). The run subscribes to it (:class:`LossWatch`): the loss reaches the
client on the stream that brings its tasks' results, in order, never from a timeout or a guess. The
events name workers by address; each device worker says which device it stands for when it joins
(``runtime.DEVICE_TOPIC``, sent by the device runtime's plugin: a restarted worker too), and each op of a
sweep's copy says when it starts (``runtime.COPY_TOPIC``), so that the run knows which copies a lost
worker was running and which it only held, waiting for a slot.

Why the run must decide, not Dask: Dask computes a lost value again on the restarted worker, whatever
it is, and reruns the tasks the worker held up to ``allowed-failures`` times. For a gang window that is a
hang: run again alone, it waits for values its peers sent long ago. That was the hang on a busy machine:
the client was still reading window k when window k+1's worker was killed; window k's result, lost with
the worker, was being computed again from the loop's first window, and the error of window k+1 sat on a
future nobody waited for yet. On a quiet machine the client was already waiting for window k+1 and saw
its error at once: timing luck.

So each loss is decided once, on the driver's thread, the next time it waits (``execute.waiting``; the
watch rings the bell it waits on), by :meth:`Losses.decide`, whose answer is one of:

* ``fail`` — without retries: the run ends with one line naming the device
  and what it was running (the op, the loop's steps), and aborts on the
  other workers what waits for it. A gang window's loss always fails.
* ``redo`` — with ``retries``: Dask reruns what was lost on the worker its
  nanny restarts under the same name; once the work is redone the run says
  so in one line, and the run report lists the loss.
* ``fail-copies`` — a run with a sweep that allows failures, when every
  task the worker held was a copy of one: the copies it was running fail
  (a ``CopyFailed`` in their place, as an exception in a copy gives: the
  restarted worker is told, through :class:`~.plugin.LostCopies`, before
  Dask runs their tasks again), the copies it held waiting run again, and
  the search goes on.

The spec's ``run.on_device_lost: wait`` asks for ``redo`` without retries on the ops (Dask may run a lost
worker's tasks again up to :data:`WAIT_LOSSES` times); ``fail``, the default, leaves it to ``retries``;
``replan`` is ``wait`` for ``run.replan_after`` (``execute.replanning``).

State: the watch keeps the address book, the copies' ops that started, and the removals not yet decided;
:class:`Losses` keeps the losses decided (the run report's ``losses``), the copies' ops marked failed, and
which losses are still to be told once their work is redone.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol

from ..compile import copy_sweeps
from ..compile.records import CompiledGraph
from ..errors import DeviceLost
from ..plan.records import Plan
from ..spec.records import Spec
from ..runtime import COPY_TOPIC, DEVICE_TOPIC
from .records import DeviceLoss

DASK_TOPIC = "all"  # the scheduler's events about its workers (added, removed, and what a removal cost)
WAIT_LOSSES = 3  # run.on_device_lost: wait: how many times Dask may run a lost worker's task again
TRAIL_SECONDS = 10.0  # a task's KilledWorker comes just before its worker's removal event, on the same stream
JOIN_TRAIL = 2.0  # a restarted worker's word that it is back may come after the work it redid (another stream)


class Bell:
    """Rung by whatever the driver's thread waits for: a future that finished, a worker lost or back."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.rings = 0

    def ring(self, *_: object) -> None:
        with self._cond:
            self.rings += 1
            self._cond.notify_all()

    def wait(self, seen: int, timeout: float = 1.0) -> None:
        """Until it rings after ``seen`` rings (at most ``timeout``: a safety net; the rings are what wake)."""
        with self._cond:
            if self.rings == seen:
                self._cond.wait(timeout)


@dataclass(frozen=True)
class Removal:
    """The scheduler removed a worker: its ``remove-worker`` event."""

    address: str
    at: float  # when it reached the client (time.time())
    held: tuple[str, ...]  # keys of the tasks it held: running, or waiting there (for a slot)
    lost: tuple[str, ...]  # keys of finished values that lived only there


class LossWatch:
    """Dask's events about the device workers; the handlers run on the client's event loop, the driver's
    thread reads what they kept."""

    def __init__(self, client: Any, devices: Collection[str]):
        self.client, self.devices = client, frozenset(devices)
        self.bell = Bell()
        self.lock = threading.Lock()
        self.names: dict[str, str] = {}  # worker address -> the device it stands for
        self.pids: dict[str, int] = {}  # worker address -> its process
        self.joins: dict[str, int] = {}  # device -> workers that said they stand for it (a restart adds one)
        self.started: set[tuple[str, str]] = set()  # (run, op) of sweep copies' ops that started
        self.removals: list[Removal] = []
        for topic, handler in self._handlers().items():
            client.subscribe_topic(topic, handler)
        for address, info in client.scheduler_info(n_workers=-1)["workers"].items():
            if str(info.get("name")) in self.devices:
                self.names[address] = str(info.get("name"))

    def _handlers(self) -> dict[str, Callable[[tuple[float, Any]], None]]:
        return {DEVICE_TOPIC: self._joined, COPY_TOPIC: self._started, DASK_TOPIC: self._event}

    def _joined(self, event: tuple[float, Any]) -> None:
        said = event[1]
        if not isinstance(said, Mapping) or str(said.get("device")) not in self.devices:
            return
        device = str(said.get("named") or said.get("device"))  # a host worker names every device it stands for
        with self.lock:
            self.names[str(said.get("address"))] = device
            self.pids[str(said.get("address"))] = int(said.get("pid") or 0)
            self.joins[device] = self.joins.get(device, 0) + 1
        self.bell.ring()

    def _started(self, event: tuple[float, Any]) -> None:
        run, op = event[1]
        with self.lock:
            self.started.add((str(run), str(op)))

    def _event(self, event: tuple[float, Any]) -> None:
        said = event[1]
        if not isinstance(said, Mapping) or said.get("action") != "remove-worker":
            return
        removal = Removal(str(said.get("worker")), time.time(), tuple(str(k) for k in said.get("processing-tasks", ())),
                          tuple(str(k) for k in said.get("lost-computed-tasks", ())))
        with self.lock:
            self.removals.append(removal)
        self.bell.ring()

    def recall(self) -> None:
        """Names and processes the workers said before this watch heard them (the scheduler keeps a topic's
        events): asked when a lost worker's are missing."""
        try:
            events = self.client.get_events(DEVICE_TOPIC)
        except Exception:  # (a scheduler gone: the loss is said without them)
            return
        with self.lock:
            for _, said in events:
                if isinstance(said, Mapping) and str(said.get("device")) in self.devices:
                    self.names.setdefault(str(said.get("address")), str(said.get("named") or said.get("device")))
                    self.pids.setdefault(str(said.get("address")), int(said.get("pid") or 0))

    def take(self) -> list[Removal]:
        with self.lock:
            taken, self.removals = self.removals, []
        return taken

    def close(self) -> None:
        for topic in self._handlers():
            try:
                self.client.unsubscribe_topic(topic)
            except Exception:  # a client whose scheduler is gone: nothing is subscribed any more
                pass


class Keys(Protocol):
    """What the runner knows of the keys it submitted (its ``account``)."""

    key_owner: dict[str, str]
    partition_ops: dict[str, tuple[str, ...]]
    key_steps: dict[str, tuple[int, int]]
    gang_keys: set[str]


@dataclass
class Losses:
    """The run's lost device workers, each decided when the driver's thread next waits (:meth:`check`)."""

    plan: Plan
    run: str
    retries: int
    watch: LossWatch
    keys: Keys
    echo: Callable[[str], None]
    why_redone: str = ""  # what asked for the redo: "retries: N" or "on_device_lost: wait"
    drained: Callable[[str], str] = lambda device: ""  # its one line, if drained on notice or its exit not recoverable
    recoverable: Callable[[str, str], bool] = lambda address, device: True  # its exit code (execute.exits)

    def __post_init__(self) -> None:
        self.began = time.time()
        self.decided: list[DeviceLoss] = []
        self.untold: list[tuple[DeviceLoss, int]] = []  # redone losses to say once their work is: (loss, joins then)
        self.marked: dict[str, str] = {}  # copies' ops that fail instead of running again, and why
        self.retried: set[str] = set()  # keys Dask failed with a worker whose loss failed only copies: run again
        self.seen: set[str] = set()  # keys held by the workers lost so far
        sweeps = copy_sweeps(self.plan)
        self.copies = set(sweeps)  # ops of sweeps' copies (they say when they start)
        tolerant = {s.name for s in self.plan.spec.sweeps if s.allow_failures}
        self.tolerant = {op for op, sweep in sweeps.items() if sweep in tolerant}
        self.gathering = {op.name for op in self.plan.spec.ops if op.group in tolerant and op.name not in sweeps}
        self.kept: dict[str, Any] = {}  # key -> future: copies' values held while the run lasts (see asked)
        self.loop_of = {op.name: op.scope.loop for op in self.plan.spec.ops  # a step's op: its innermost loop
                        if op.scope.loop is not None and op.scope.role in ("step", "state")}

    def asked(self, compiled: CompiledGraph, wanted: list[str]) -> list[str]:
        """The keys to ask Dask for: ``wanted``, and the values of copies of sweeps that allow failures which
        their gathering ops read. Held, they stay where they are when a lost worker fails the gathering ops
        (until Dask runs them again, on the copies of the restarted worker): Dask frees the values only a
        failed task read, and would compute every finished copy again."""
        if not self.tolerant:
            return wanted
        ops = {*compiled.key_owner.values(), *(op for group in compiled.partition_ops.values() for op in group)}
        extra = [compiled.values[str(ref)].key for name in ops & self.gathering
                 for ref in self.plan.spec.op(name).inputs if ref.op in self.tolerant and str(ref) in compiled.values]
        return list(dict.fromkeys([*wanted, *extra]))

    def hold(self, futures: Mapping[str, Any]) -> None:
        """Of a graph's futures, those :meth:`asked` added: kept until the run ends."""
        if self.tolerant:
            self.kept.update((key, future) for key, future in futures.items()
                             if key in self.keys.key_owner and self.keys.key_owner[key] in self.tolerant)

    def check(self) -> None:
        """Decide every loss the watch saw since the last check; raises :class:`DeviceLost` to end the run."""
        for removal in self.watch.take():
            if removal.address not in self.watch.pids:
                self.watch.recall()
            # a worker that died before it said who it is: the device its tasks were pinned to
            owned = [op for key in removal.held for op in self.ops(key)]
            device = self.watch.names.get(removal.address) or \
                (self.plan.placement(owned[0]).device_name if owned else None)
            if device is not None:
                self.decide(removal, device)

    def decide(self, removal: Removal, device: str) -> None:
        action = self.policy(removal) if self.recoverable(removal.address, device) else "fail"
        loss = self.describe(removal, device)
        self.seen.update(removal.held)
        if action == "fail":
            self.decided.append(replace(loss, outcome="failed the run"))
            raise DeviceLost(device, self.drained(device) or failed_line(loss))
        if action == "redo":
            self.decided.append(replace(loss, outcome="restarted; redone"))
            self.untold.append((loss, self.watch.joins.get(device, 0)))
            return
        why = f"its worker ({device}) was lost while it ran this copy"
        marks = {op: why for op in loss.running if op not in self.marked}
        if marks:
            self.marked.update(marks)
            self.mark(self.marked)
        if removal.held:  # Dask failed them with the worker (no retries): the copies' marks are out, run them again
            self.retry(list(removal.held))
            self.retried.update(removal.held)
        self.decided.append(replace(loss, outcome="copies failed" if loss.running else "copies run again"))
        self.echo(copies_line(loss))

    def policy(self, removal: Removal) -> str:
        """``fail``, ``redo`` or ``fail-copies``: what the run does about a lost worker (see the module)."""
        if any(key in self.keys.gang_keys for key in (*removal.held, *removal.lost)):
            return "fail"  # a gang window computed again, or run again, alone waits forever for its peers
        if self.retries:
            return "redo"
        if self.tolerant and all(set(self.ops(key)) <= self.tolerant for key in removal.held):
            return "fail-copies"
        return "fail"

    def ops(self, key: str) -> tuple[str, ...]:
        return self.keys.partition_ops.get(key) or ((self.keys.key_owner[key],) if key in self.keys.key_owner else ())

    def describe(self, removal: Removal, device: str) -> DeviceLoss:
        """The loss as the report keeps it: what the worker was running (a copy: if it had started)."""
        running: list[str] = []
        steps: list[tuple[int, int]] = []
        waiting, loop = 0, ""
        for key in removal.held:
            ops = self.ops(key)
            if ops and set(ops) <= self.copies and not any((self.run, op) in self.watch.started for op in ops):
                waiting += 1
                continue
            running += ops
            if key in self.keys.key_steps:
                steps.append(self.keys.key_steps[key])
                loop = loop or next((self.loop_of[op] for op in ops if op in self.loop_of), "")
        if not steps:  # running nothing of a loop: the loop's latest step whose value it held
            held = [(self.keys.key_steps[key], op) for key in removal.lost if key in self.keys.key_steps
                    for op in self.ops(key)[:1] if op in self.loop_of]
            if held:
                last, op = max(held)
                steps, loop = [(last[1], last[1])], self.loop_of[op]
        span = (min(s[0] for s in steps), max(s[1] for s in steps)) if steps else None
        return DeviceLoss(device, round(removal.at - self.began, 3), tuple(dict.fromkeys(running)), waiting,
                          len([k for k in removal.lost if k in self.keys.key_owner]), loop, span,
                          pid=self.watch.pids.get(removal.address))

    def killed(self, error: Exception) -> bool:
        """A task Dask failed because its worker died (``KilledWorker``): True when Dask runs it again (its
        worker's loss failed only copies; the client's future shows the error until Dask's word comes). Waits
        for the worker's removal event, which trails the error on the same stream; raises when the loss ends
        the run."""
        key = str(getattr(error, "task", ""))
        deadline = time.monotonic() + TRAIL_SECONDS
        while key not in self.seen and time.monotonic() < deadline:
            rung = self.watch.bell.rings
            self.check()
            if key not in self.seen:
                self.watch.bell.wait(rung, 0.1)
        return key in self.retried

    def tell(self, final: bool = False) -> None:
        """After a wait that ended well: in one line each, the losses whose device's worker is back (its work
        was redone before what the wait was for); ``final``: the run's work is done, every loss is told, once
        the restarted workers have said they are back (their word trails their first tasks: JOIN_TRAIL s)."""
        deadline = time.monotonic() + (JOIN_TRAIL if final else 0.0)
        while time.monotonic() < deadline and any(self.watch.joins.get(lost.device, 0) <= joins
                                                  for lost, joins in self.untold):
            self.watch.bell.wait(self.watch.bell.rings, 0.05)
        kept = []
        for loss, joins in self.untold:
            back = self.watch.joins.get(loss.device, 0) > joins
            if back or final:
                self.echo(redone_line(loss, back, self.why_redone or f"retries: {self.retries}"))
            else:
                kept.append((loss, joins))
        self.untold = kept

    def mark(self, ops: Mapping[str, str]) -> None:
        """Every worker, and every one that joins later (the lost one, restarted), fails these copies' ops."""
        from .plugin import LostCopies  # (distributed: imported by cluster runs only)

        self.watch.client.register_plugin(LostCopies(self.run, ops), name=f"orchestrator-lost-{self.run}")

    def retry(self, keys: list[str]) -> None:
        """Dask runs those of these tasks that it failed again, and what failed with them: the scheduler's own
        retry of exactly these keys (``Client.retry`` of a future retries whatever it finds failed below it, and
        would run again a task that Dask is already running again). A scheduler allowing failures of its own
        (a remote one) has not failed them: it runs them again itself."""
        client = self.watch.client
        states = client.sync(client.scheduler.get_task_status, keys=keys)
        failed = [key for key in keys if states.get(key) == "erred"]
        if failed:
            client.sync(client.scheduler.retry, keys=failed, client=client.id)

    def close(self) -> None:
        self.watch.close()
        if self.marked:  # the copies' marks go (a later run on this cluster has keys of its own)
            try:
                self.watch.client.unregister_worker_plugin(f"orchestrator-lost-{self.run}")
            except Exception:  # a worker or scheduler gone with the run: nothing left to forget there
                pass


def _what(loss: DeviceLoss) -> str:
    """What the worker was doing, in words: ``while running steps 400-499 of loop 'train' (ops...)``."""
    shown = ", ".join(loss.running[:4]) + (f", ... ({len(loss.running)} ops)" if len(loss.running) > 4 else "")
    if loss.running and loss.steps is not None:
        return f"while running {loss.at()} ({shown})"
    if loss.running:
        return f"while running op '{shown}'" if len(loss.running) == 1 else f"while running ops {shown}"
    if loss.steps is not None:
        return f"between tasks, holding values of {loss.at()}"
    if loss.values:
        return f"between tasks, holding {loss.values} finished value(s) of the run"
    return "between tasks"


def redo_policy(spec: Spec) -> tuple[int, str]:
    """How many times Dask may run a lost worker's task again, and what asked for it ("": the ops' retries).
    ``run.on_device_lost: wait`` (and ``replan``, within its grace: execute.replanning) redoes it without retries."""
    retries = max([op.retries for op in spec.ops] + [spec.run.retries])
    if spec.run.on_device_lost == "fail":
        return retries, ""
    return max(retries, WAIT_LOSSES), f"on_device_lost: {spec.run.on_device_lost}"


def failed_line(loss: DeviceLoss) -> str:
    process = f" (process {loss.pid})" if loss.pid else ""
    waited = f" ({loss.waiting} task(s) waiting there)" if loss.waiting else ""
    return (f"lost {loss.device}: its worker died{process} {_what(loss)}{waited}; without retries a lost worker "
            f"ends the run (set run.on_device_lost: wait, or retries: N on its ops, to have it restarted and its work "
            f"redone)")


def redone_line(loss: DeviceLoss, back: bool, why: str) -> str:
    at = f" at {loss.at()}" if loss.steps is not None else ""
    came = "restarted" if back else "not back yet"
    return f"{loss.device}'s worker was lost{at} and {came}; Dask redid its work ({why})"


def copies_line(loss: DeviceLoss) -> str:
    failed = f"its copies' ops {', '.join(loss.running[:4])}{', ...' if len(loss.running) > 4 else ''} fail" \
        if loss.running else "no copy had started there"
    waited = f"; {loss.waiting} task(s) it held waiting run again" if loss.waiting else ""
    return f"{loss.device}'s worker was lost: {failed} (allow_failures: true){waited}; the search goes on"
