"""Waiting for a run's futures on the driver's thread, awake to lost device workers.

Policy. ``Client.gather`` and ``as_completed`` block until the values come,
and a lost worker can keep them from ever coming: Dask computes a lost
value again, and a gang window run again alone waits for peers that sent
their values long ago. A wait here is for a bell (``losses.Bell``) rung by
the futures as they finish (``Future.add_done_callback``, Dask's own
notification) and by the loss watch when the scheduler removes a device
worker. Each time it rings, the losses seen since are decided first
(``Losses.check``: it may end the run), then the futures are looked at
again: the first error raises as it happens (not the first future's: a
window's tasks wait for each other, and the one that failed may be any of
them), and a task Dask failed with its worker (``KilledWorker``) is run
again when its loss only failed copies of a sweep that allows failures.
Fetching values (``fetch``) runs Dask's gather on the client's event loop
while the thread waits on the same bell.

State: none between waits; the bell and the losses are the run's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from ..errors import NoWorkerError, RunError
from ..plan.records import Plan
from .losses import Keys, Losses

DONE = "finished"
FAILED = ("error", "cancelled")


class Waiter:
    def __init__(self, client: Any, losses: Losses):
        self.client, self.losses = client, losses
        self.bell = losses.watch.bell

    def settle(self, futures: Sequence[Any]) -> None:
        """Until every future has finished; raises the first error as it happens (Dask's exception)."""
        hooked: set[int] = set()  # futures whose done-callback is still to come

        def done(future: Any) -> None:
            hooked.discard(id(future))
            self.bell.ring()

        while True:
            rung = self.bell.rings
            self.losses.check()
            # a future Dask runs again still shows its error until Dask's word reaches the client: look again soon
            again = any([self.failed(f) for f in futures if f.status in FAILED])
            if not again and all(f.status == DONE for f in futures):
                self.losses.tell()
                return
            for future in futures:  # one that finished, then lost its value with a worker, is waited for again
                if future.status not in (DONE, *FAILED) and id(future) not in hooked:
                    hooked.add(id(future))
                    future.add_done_callback(done)
            self.bell.wait(rung, 0.05 if again else 1.0)

    def failed(self, future: Any) -> bool:
        """A future that failed: True when Dask runs it again (its worker's loss only failed copies of a sweep
        that allows failures); else it raises its error."""
        error = future.exception() if future.status == "error" else None
        if isinstance(error, Exception) and type(error).__name__ == "KilledWorker" and self.losses.killed(error):
            return True
        future.result()  # raises its error (a cancelled future: CancelledError)
        return False  # (it finished meanwhile: run again, and Dask's word came)

    def fetch(self, futures: Sequence[Any]) -> list[Any]:
        """The futures' values (they have finished: :meth:`settle`), fetched on the client's event loop while
        this thread stays awake to losses (a value lost with its worker is computed again before it comes)."""
        if not futures:
            return []

        async def gather() -> list[Any]:
            got: list[Any] = await self.client.gather(list(futures), asynchronous=True)
            return got

        fetched = asyncio.run_coroutine_threadsafe(gather(), self.client.loop.asyncio_loop)
        fetched.add_done_callback(self.bell.ring)
        try:
            while True:
                rung = self.bell.rings
                self.losses.check()
                if fetched.done():
                    self.losses.tell()
                    return fetched.result()
                self.bell.wait(rung)
        finally:
            fetched.cancel()  # a loss ended the run: Dask's gather stops waiting too


def dask_error(exc: Exception, plan: Plan, keys: Keys) -> RunError:
    """Dask's error of a task as ours, naming its op (or its partition's ops) and device."""
    text = f"{type(exc).__name__}: {exc}"
    # the longest key named: under kind naming one op's key can be the start of another's
    key = max((k for k in keys.key_owner if k in str(exc)), key=len, default=None)
    op = keys.key_owner.get(key or "", "?")
    device = plan.placement(op).device_name if op != "?" else "?"
    who = f"op '{op}'"
    group = keys.partition_ops.get(key or "", ())
    if len(group) > 1:  # a partition's task: Dask's error cannot say which of its ops it was
        shown = ", ".join(group[:4]) + (", ..." if len(group) > 4 else "")
        who = f"op '{op}' (or another of its partition: {shown})"
    if type(exc).__name__ == "NoValidWorkerError":
        return NoWorkerError(f"{who} cannot run: no worker offers its device {device} "
                             f"(waited {plan.spec.run.no_workers_timeout:g} s)")
    if type(exc).__name__ == "KilledWorker":
        return RunError(f"{who} on {device}: its worker died while running it more often than allowed "
                        f"(set retries: N on the op)")
    return RunError(f"{who} on {device} failed: {text}")
