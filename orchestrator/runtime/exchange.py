"""Values sent between the window partitions of a loop, worker to worker (TF's Send/Recv).

In a loop window every device runs its part of the window's steps as one
task; a value made on one device and read on another at the same step (or
a carried state read away from where it is updated) is sent directly from
worker to worker, never through the scheduler. The receiving worker keeps
it in its :class:`Mailbox` until the reading op takes it.

Sending needs Dask's comms, which only ``execute`` imports: the worker
plugin binds a :data:`Courier` here (:func:`bind_courier`). A tag is
``(loop, step, ref)``: unique within a run, whose token keys every entry.
An aborted run wakes every waiting taker with an error, so no thread waits
for a device that failed.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Protocol, Sequence

from ..errors import RunError

Tag = tuple[int, int, str]  # (loop index, step, value)
RECEIVE_TIMEOUT = 600.0  # seconds without the value: the sender is gone (and nobody aborted the run)


class Sent(Protocol):
    """What a send returns: done once the receiving worker holds the values."""

    def result(self, timeout: float | None = None) -> Any: ...


class Source(Protocol):
    """Where a waiting taker reads values itself (``links.Links``): instead of waiting to be handed them."""

    def gone(self, device: str) -> str | None: ...

    def poll(self, timeout: float) -> None: ...


Courier = Callable[[Any, str, str, Sequence[tuple[Tag, Any]]], Sent]
"""``courier(worker, device, run, items)``: send ``items`` to the worker of ``device``."""

_courier: Courier | None = None


def bind_courier(courier: Courier) -> None:
    global _courier
    _courier = courier


def send(worker: Any, device: str, run: str, items: Sequence[tuple[Tag, Any]]) -> Sent:
    if _courier is None:
        raise RunError("no courier is installed on this worker: values cannot be sent to other devices")
    return _courier(worker, device, run, items)


class Mailbox:
    """Values other devices sent to this one, by (run, tag), until an op takes them."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._items: dict[tuple[str, Tag], Any] = {}
        self._aborted: dict[str, str] = {}
        self._aborted_loops: dict[tuple[str, int], str] = {}  # one loop of a run: a sweep copy's that failed
        self.wakers: list[Callable[[], None]] = []  # called on abort: a thread polling links wakes at once

    def put(self, items: Sequence[tuple[str, Sequence[Any], Any]]) -> None:
        """Values arrived: ``(run, tag, value)`` each (the tag a list after the trip: msgpack has no tuples)."""
        with self._cond:
            for run, tag, value in items:
                if run not in self._aborted and (run, int(tag[0])) not in self._aborted_loops:
                    loop, step, ref = tag
                    self._items[(run, (int(loop), int(step), str(ref)))] = value
            self._cond.notify_all()

    def take(self, run: str, tag: Tag, sender: str, links: Source | None = None) -> Any:
        """The value sent for ``tag``, waiting for it (reading ``links`` meanwhile); raises when it cannot come."""
        key = (run, tag)
        deadline = time.monotonic() + RECEIVE_TIMEOUT
        while True:
            with self._cond:
                if key in self._items:
                    return self._items.pop(key)
                why = self._aborted.get(run) or self._aborted_loops.get((run, tag[0]))
                if why is not None:
                    raise RunError(f"stopped waiting for '{tag[2]}' of step {tag[1]} from {sender}: {why}")
                gone = links.gone(sender) if links is not None else None
                if gone is not None:
                    raise RunError(f"'{tag[2]}' of step {tag[1]} cannot come from {sender}: {gone}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RunError(f"'{tag[2]}' of step {tag[1]} never arrived from {sender} "
                                   f"(waited {RECEIVE_TIMEOUT:g} s)")
                if links is None:
                    self._cond.wait(min(left, 1.0))
                    continue
            links.poll(min(left, 1.0))

    def stopped(self, run: str, loop: int) -> str | None:
        """Why ``run`` (or its loop ``loop``) was aborted, or None while it goes on."""
        with self._cond:
            return self._aborted.get(run) or self._aborted_loops.get((run, loop))

    def idle(self, timeout: float) -> None:
        """Wait until something arrives (or ``timeout``): for a thread that leaves the reading to another."""
        with self._cond:
            self._cond.wait(timeout)

    def wake_takers(self) -> None:
        """Something changed that waiting takers must see (a peer's stream closed)."""
        with self._cond:
            self._cond.notify_all()

    def abort(self, run: str, why: str) -> None:
        with self._cond:
            self._aborted[run] = why
            for key in [k for k in self._items if k[0] == run]:
                del self._items[key]
            self._cond.notify_all()
        for wake in self.wakers:
            wake()

    def abort_loop(self, run: str, loop: int, why: str) -> None:
        """One loop of the run failed (a sweep's copy, which fails alone): wake its takers; the run goes on."""
        with self._cond:
            self._aborted_loops[(run, loop)] = why
            for key in [k for k in self._items if k[0] == run and k[1][0] == loop]:
                del self._items[key]
            self._cond.notify_all()
        for wake in self.wakers:
            wake()

    def forget(self, run: str) -> None:
        with self._cond:
            self._aborted.pop(run, None)
            for aborted in [k for k in self._aborted_loops if k[0] == run]:
                del self._aborted_loops[aborted]
            for key in [k for k in self._items if k[0] == run]:
                del self._items[key]
