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
import time
from typing import Any, Callable

from ..errors import RunError

POLL_SECONDS = 0.1
TELL_SECONDS = 2.0  # how long a failed run waits for its workers to hear that it failed


def tell_workers(client: Any, function: Callable[..., Any], **kwargs: Any) -> None:
    """``client.run(function, **kwargs)`` on every worker, as a failed run's courtesy: waits at most
    ``TELL_SECONDS`` and ignores every error.

    Why bounded: the workers may be the reason the run failed. A worker behind
    a link that went dark (a cable, a switch, a host's network: no FIN, no
    RST) answers nothing, and the scheduler's broadcast waits for it until
    Dask's TCP timeout (``distributed.comm.timeouts.tcp``, 30 s) — the run
    would hang that long after its error. Reachable workers get the message
    in milliseconds either way, and the scheduler finishes the broadcast on
    its own after we stop waiting.
    """
    try:
        client.run(function, callback_timeout=TELL_SECONDS, **kwargs)
    except Exception:  # a worker that died or went dark with the run cannot be told; the run's error is what matters
        pass


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


def wait_forever(announce: Callable[[], None]) -> None:
    """Until Ctrl-C (a cluster kept alive with --keep-alive), saying so with ``announce`` inside the wait:
    a Ctrl-C that follows the words at once (a script that waits for them) lands here too, and not
    between the words and the wait, where it failed the finished run with "interrupted"."""
    try:
        announce()
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
