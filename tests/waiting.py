"""Waiting in tests for what a busy machine makes slow: by progress, not by a clock.

On a 2-core machine beside other work (load 8 to 11, or two busy loops:
``make test-busy``) processes start, and end, many times slower than on an
idle one. A test that gives them a fixed time fails there for nothing. So
these waits go on while what is waited for visibly moves, with the
product's own rule (:class:`orchestrator.execute.starting.Progress`), and
end on a quiet spell or a cap, each under pytest's 300 s per test.
"""

from __future__ import annotations

import time
from typing import Callable

from orchestrator.execute.starting import Progress, cpu_seconds


def gone(left: Callable[[], list[int]], quiet: float = 10.0, cap: float = 60.0) -> list[int]:
    """Until ``left()`` lists no process; while fewer are left, or those left use CPU (they are on their
    way out), for at most ``cap`` s. What is still listed once they made no progress for ``quiet`` s."""
    progress = Progress(quiet, cap)
    last: tuple[int, float] | None = None
    while True:
        pids = left()
        if not pids:
            return []
        now = (len(pids), cpu_seconds(pids) or 0.0)
        if last is None or now[0] < last[0] or (now[0] == last[0] and now[1] > last[1]):
            progress.seen()
        last = now
        if progress.verdict():
            return pids
        time.sleep(0.1)
