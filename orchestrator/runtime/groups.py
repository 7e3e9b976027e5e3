"""A loop window of the devices that share a worker process: one Dask task, one thread, every device's ops.

Policy. Devices of one process (``processes: host``) run a window's ops in
one thread, interleaved in the step's order (``windows.run_together``): the
ops of a small step are Python calls of tens of microseconds, and handing
values between threads of one process (wake-ups, the interpreter lock
passed back and forth) cost more than the ops. Compile knows which devices
share a process (the spec says where each device's worker runs), so it
makes that window one Dask task for all of them (:class:`GroupTask`), asking
for every one of their resources, rather than a task per device that would
have to meet here: the meeting's waiting threads, woken late when the
window ended, and two more tasks a window through the scheduler, were most
of the time between two windows (about 10 ms a window of the polyfit
example, against 40 ms of steps).

Nothing per device changes: each part runs with its own device's seat and
runtime (memory cap and charges, timeouts, records, the placement log, the
step picture), and a real GPU's backend makes its GPU CuPy's current device
before anything it does. The task returns the parts' results one after
another, flat: compile knows where each device's states and metrics begin.

State: none; the seats are the worker's (``execute.plugin``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import RunError
from .calls import SEATS_ATTRIBUTE
from .device import RUNTIME_ATTRIBUTE, _runtime
from .together import Part
from .windows import WindowTask, outer_values, run_together


@dataclass(frozen=True)
class GroupTask:
    """The window of the devices of one process: each device's part and how many task arguments it takes."""

    parts: tuple[WindowTask, ...]
    arg_counts: tuple[int, ...]  # per part: its arguments (values, then the controls ordering its windows)


def run_group(group: GroupTask, *args: Any) -> tuple[Any, ...]:
    """Every part of the window in this thread; their results, one after another (a flat tuple)."""
    seat, _ = _runtime()
    host = getattr(seat, "worker", seat)  # a seat stands for one device of its host worker
    seats: dict[str, Any] = getattr(host, SEATS_ATTRIBUTE, None) or {str(host.name): host}
    parts, at = [], 0
    for task, count in zip(group.parts, group.arg_counts):
        mine, at = args[at: at + count], at + count
        here = seats.get(task.device)
        if here is None:
            raise RunError(f"window of steps {task.start + 1}.. on {task.device}: this worker "
                           f"({host.name}) does not stand for it (it stands for {', '.join(seats)})")
        parts.append(Part(task, here, getattr(here, RUNTIME_ATTRIBUTE), outer_values(task, mine)))
    return tuple(value for result in run_together(parts) for value in result)
