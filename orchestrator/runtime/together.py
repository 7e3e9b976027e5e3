"""The devices of one process run a loop window in one thread: their Dask tasks meet, the last runs them all.

Policy. A window is one Dask task per device (``runtime.windows``), and a
worker standing for several devices (``processes: host``) runs each on a
thread of its own. But the ops of a small step are Python calls of tens of
microseconds, and threads of one process run Python one at a time: handing
a value from one device's thread to another's (a wake-up, then the
interpreter lock passed back and forth at every system call) cost more than
the ops themselves (the polyfit example in one process: about 1 ms of CPU a
step, against 0.35 ms for its ten ops run one after another in one thread).
TensorFlow runs a step's ops from one executor for the same reason. So the
window's tasks of one process meet here: each arrives with its device's part
(its task, seat, runtime and inputs) and the last to arrive runs every part
in its thread, the ops interleaved in the step's order (``windows.run_together``);
the others wait, then return their own part's result, or raise the error that
ended the window. Nothing per device changes: each op runs with its own
device's runtime (memory cap and charges, timeout, records, placement log),
and a real GPU's backend makes its GPU CuPy's current device before anything
it does.

Why a meeting and not one Dask task for all: every device keeps its own
Dask task, key, resources and result (the carried states and metrics the
next window and the client read from it), so compile, the scheduler's view
and recovery stay as they are.

State. The meetings under way in this process, by (run, loop, first step):
the parts that arrived. A meeting leaves the table when its last part
arrives (that thread runs it) or when a waiting part gives up because the
run or its loop was aborted, so a later window never joins a dead meeting.
"""

from __future__ import annotations

import copy
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from ..errors import RunError
from .exchange import in_process

WAKE_SECONDS = 1.0  # how often a waiting part checks whether the run was aborted


@dataclass(frozen=True)
class Part:
    """One device's share of a window, as its Dask task brings it."""

    task: Any  # its windows.WindowTask
    worker: Any  # the seat standing for the device
    runtime: Any  # the device's runtime.Runtime
    outer: list[Any]  # the task's value arguments


@dataclass
class _Meeting:
    expected: tuple[str, ...]
    parts: dict[str, Part] = field(default_factory=dict)
    done: threading.Event = field(default_factory=threading.Event)
    results: dict[str, Any] = field(default_factory=dict)
    error: BaseException | None = None


_MEETINGS: dict[tuple[str, int, int], _Meeting] = {}
_LOCK = threading.Lock()


def devices_here(device: str, devices: Sequence[str]) -> tuple[str, ...]:
    """The window's devices that live in this process (``device`` among them), in the window's order."""
    return tuple(d for d in devices if d == device or in_process(d) is not None) or (device,)


def meet(part: Part, here: tuple[str, ...], run: Callable[[list[Part]], list[Any]]) -> Any:
    """``part``'s result once the parts of every device in ``here`` have met and ``run`` ran them."""
    task = part.task
    key = (task.run, task.loop, task.start)
    with _LOCK:
        meeting = _MEETINGS.get(key)
        if meeting is None:
            meeting = _MEETINGS[key] = _Meeting(here)
        meeting.parts[task.device] = part
        last = len(meeting.parts) == len(meeting.expected)
        if last:
            del _MEETINGS[key]
    if last:
        _run(meeting, run)
        if meeting.error is not None:
            raise meeting.error
    else:
        _wait(meeting, key, part)
        if meeting.error is not None:
            raise _copy(meeting.error)
    return meeting.results[task.device]


def _run(meeting: _Meeting, run: Callable[[list[Part]], list[Any]]) -> None:
    parts = [meeting.parts[d] for d in meeting.expected]
    try:
        for d, result in zip(meeting.expected, run(parts)):
            meeting.results[d] = result
    except BaseException as exc:  # every part's task ends with it: whichever the client hears first names the op
        meeting.error = exc
    finally:
        meeting.done.set()


def _wait(meeting: _Meeting, key: tuple[str, int, int], part: Part) -> None:
    task = part.task
    while not meeting.done.wait(WAKE_SECONDS):
        why = part.runtime.mailbox.stopped(task.run, task.loop)
        if why is None:
            continue
        with _LOCK:
            if meeting.done.is_set():
                return
            meeting.parts.pop(task.device, None)
            if not meeting.parts and _MEETINGS.get(key) is meeting:
                del _MEETINGS[key]
        raise RunError(f"window of steps {task.start + 1}.. on {task.device}: stopped waiting for the other "
                       f"devices of its process: {why}")


def _copy(error: BaseException) -> BaseException:
    """The error for another thread to raise: its own copy, so two threads never grow one traceback."""
    try:
        return copy.copy(error).with_traceback(None)
    except Exception:  # an exception that cannot be copied: raised as it is
        return error
