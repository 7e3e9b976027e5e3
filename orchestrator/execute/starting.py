"""Waiting for workers that are starting: for as long as they show progress, not for a fixed time.

A worker process takes what its machine gives it. On an idle 2-core machine
one starts in about two seconds; beside other work (load 8 to 11: two busy
loops and a test suite) a dozen of them starting at once took over a minute.
Any fixed clock is wrong for one of the two: short enough to notice a stuck
start soon, it fails a busy machine's slow one; long enough for the busy
machine, it makes a stuck start wait minutes to say so. So a start is
waited for while it shows signs of progress, and given up on when it has
shown none for a quiet spell (``quiet`` seconds), or when it has taken
``cap`` seconds in all whatever it shows (a start that always shows
something but never ends: a worker restarted over and over).

What counts as progress is the caller's to say, as a number that grows with
it: the CPU seconds of the processes starting (:func:`cpu_seconds`, for the
worker processes ``orchestrate worker`` starts on its own machine), the
devices that joined and the worker processes the scheduler sees starting
(``run --scheduler``, which can see the other machines only through the
scheduler). A process that is starting, however slowly, is given CPU time by
the kernel every few milliseconds; one that waits for nothing is given none.

State: a :class:`Progress` keeps when the wait began, the largest mark seen
and when it last grew. The CPU seconds come from ``/proc`` (Linux); where
there is none, :func:`cpu_seconds` says so with None, and the caller falls
back to the cap alone.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Callable, Iterable

QUIET_FACTOR = 10  # a wait's cap: this many quiet spells in all, whatever progress it shows
QUIET, CAPPED = "quiet", "capped"  # why a wait is over


class Progress:
    """A wait that goes on while its mark grows: :meth:`verdict` says why to stop, or "" to go on."""

    def __init__(self, quiet: float, cap: float | None = None, clock: Callable[[], float] = time.monotonic):
        self.quiet = quiet
        self.cap = QUIET_FACTOR * quiet if cap is None else cap
        self.clock = clock
        self.began = self.last = clock()
        self.mark: float | None = None

    def saw(self, mark: float) -> None:
        """A reading of the mark; progress when it is larger than every earlier one (the first is not)."""
        if self.mark is not None and mark > self.mark:
            self.last = self.clock()
        if self.mark is None or mark > self.mark:
            self.mark = mark

    def seen(self) -> None:
        """A sign of progress that is not a number (a process known to be alive where CPU time is unknown)."""
        self.last = self.clock()

    @property
    def waited(self) -> float:
        return self.clock() - self.began

    def verdict(self) -> str:
        """Why the wait is over, :data:`QUIET` (no progress for ``quiet`` seconds) or :data:`CAPPED`
        (``cap`` seconds in all), or "" to go on."""
        now = self.clock()
        if now - self.began > self.cap:
            return CAPPED
        if now - self.last > self.quiet:
            return QUIET
        return ""


def descendants(pid: int) -> list[int]:
    """The live processes below ``pid`` (children, theirs, ...), from ``/proc``; none where it is missing."""
    parents: dict[int, list[int]] = {}
    try:
        entries = list(os.scandir("/proc"))
    except OSError:
        return []
    for entry in entries:
        if not entry.name.isdigit():
            continue
        fields = _stat(int(entry.name))
        if fields:
            parents.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), ()):
            found.append(child)
            todo.append(child)
    return found


def cpu_seconds(pids: Iterable[int]) -> float | None:
    """User and system CPU seconds of the live processes ``pids`` and the children they have waited for
    (from ``/proc``; a process gone meanwhile counts 0); None where ``/proc`` is missing."""
    if not Path("/proc/self/stat").exists():
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        fields = _stat(pid)
        if fields:  # utime, stime, cutime, cstime: fields 14 to 17 of proc(5), counted from the state
            total += sum(int(f) for f in fields[11:15])
    return total / ticks


def _stat(pid: int) -> list[str]:
    """The fields of ``/proc/PID/stat`` after the command name (which may hold spaces and parentheses)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []
