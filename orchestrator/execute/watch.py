"""Noticing at once that the connection to a remote scheduler is gone.

When a remote scheduler dies, Dask's client does not fail the calls waiting
on it: it tries to reconnect for ``distributed.comm.timeouts.connect``
(30 s by default), then cancels every future, and the run failed 30 s
later as if an op had (``FutureCancelledError``). A run of ours cannot go
on with another scheduler anyway (its tasks, resources and gang windows
live there), so the first moment the client is no longer connected is the
end of the run: this watch sees the client leave the ``running`` state,
closes it (which wakes every waiting call at once) and remembers why, for
the runner to say so in one line.
"""

from __future__ import annotations

import threading
from typing import Any

from ..errors import RunError

POLL_SECONDS = 0.1


class SchedulerWatch:
    """A daemon thread watching ``client.status`` while a run is under way."""

    def __init__(self, client: Any, address: str):
        self.client, self.address = client, address
        self.lost = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="orchestrator scheduler watch", daemon=True)

    def __enter__(self) -> SchedulerWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def error(self) -> RunError:
        return RunError(f"lost the connection to the Dask scheduler at {self.address} during the run "
                        "(did it stop, or its machine, or the network between?)")

    def _watch(self) -> None:
        while not self._stop.wait(POLL_SECONDS):
            status = str(getattr(self.client, "status", "running"))
            if status in ("connecting", "failed"):  # Dask's words for a lost connection it tries to win back
                self.lost = True
                try:
                    self.client.close(timeout=2)
                except Exception:  # closing a client that lost its scheduler can itself complain; it is closed
                    pass
                return
