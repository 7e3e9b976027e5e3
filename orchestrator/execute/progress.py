"""A loop's progress line on the terminal: step/steps, steps per second, the latest metrics.

One line per loop, rewritten in place (``\\r``) as its windows are read, and
ended when the loop reaches its last step or stops.
"""

from __future__ import annotations

import time


class LoopProgress:
    def __init__(self) -> None:
        self.began: dict[str, tuple[float, int]] = {}  # loop -> (when, step) its line started

    def show(self, loop: str, done: int, steps: int, note: str = "") -> None:
        began = self.began.setdefault(loop, (time.perf_counter(), done))
        rate = (done - began[1]) / max(time.perf_counter() - began[0], 1e-9)
        line = f"{loop}: step {done}/{steps}" + (f", {rate:.0f} steps/s" if done > began[1] else "") + \
            (f", {note}" if note else "")
        last = done >= steps or note.startswith("stopped")
        print(f"\r{line:<79}", end="\n" if last else "", flush=True)
