"""What one thread runs of a loop window: a part per device, each with its device's seat and runtime.

A window is one Dask task per device (``windows.run_window``: one part), or
one for the devices of one worker process (``processes: host``:
``groups.run_group``, several parts), whose ops one thread then runs
interleaved in the step's order (``windows.run_together``). A part carries
what its device's task would: the device's part of the window, the seat
standing for the device (its worker, or a host worker's seat), the device's
runtime (memory cap and charges, timeouts, records) and its value arguments.

State: none.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Part:
    """One device's share of a window, as its task brings it."""

    task: Any  # its windows.WindowTask
    worker: Any  # the seat standing for the device
    runtime: Any  # the device's runtime.Runtime
    outer: list[Any]  # the task's value arguments
