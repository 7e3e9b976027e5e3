"""The ``orchestrate`` console script: stop signals are ours from the first instant, then the CLI.

Importing the CLI imports Dask, NumPy and the stages: a second, several on a
loaded machine. A Ctrl-C (SIGINT to the whole process group, from a terminal)
or a SIGTERM in that second once printed Python's traceback of whatever
import was under way. So this module imports only what the interpreter has
already loaded at startup (``os``, ``signal``, ``sys``), and :func:`main`
installs its handlers before it imports anything: while the CLI is being
imported nothing has started (no cluster, no file), so a stop signal then
prints one line and leaves at once with 130 (SIGINT) or 143 (SIGTERM). Once
the CLI is imported the handlers unwind instead, as ``run_cli`` expects, and
it says the same line for a signal that arrives later. What is left is the
interpreter's own startup, a few milliseconds before ``main`` runs.

Once the command is done (its cluster closed, its files written) the process
leaves at once (:func:`_leave`): the exit hooks run, the output is flushed,
and the interpreter is not torn down — freeing every module of Dask, NumPy
and bokeh one by one took 0.15 s, a twentieth of a whole ``run``, for memory
the system reclaims anyway.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any, NoReturn

EXIT_INTERRUPTED, EXIT_TERMINATED = 130, 143


def _leave_at_once(signum: int, frame: Any) -> None:
    """A stop signal while the CLI is imported: nothing to unwind yet, so one line and out."""
    sys.stderr.write("terminated\n" if signum == signal.SIGTERM else "interrupted\n")
    sys.stderr.flush()
    os._exit(EXIT_TERMINATED if signum == signal.SIGTERM else EXIT_INTERRUPTED)


def _stop(signum: int, frame: Any) -> None:
    """A stop signal: quiet the libraries' own complaints about interrupted work, then unwind."""
    import logging

    from .errors import Terminated

    # Stopping a run leaves Dask's pending client calls to fail as the client closes; their
    # tracebacks ("Task exception was never retrieved") would bury the one line that matters.
    for name in ("asyncio", "distributed", "tornado"):
        logging.getLogger(name).setLevel(logging.CRITICAL + 1)
    if signum == signal.SIGTERM:
        raise Terminated()
    raise KeyboardInterrupt()


def main() -> None:
    """``orchestrate``: stop signals handled, then the CLI's exit code."""
    signal.signal(signal.SIGINT, _leave_at_once)
    signal.signal(signal.SIGTERM, _leave_at_once)
    from .cli import run_cli
    from .errors import Terminated  # noqa: F401  (imported now: _stop must not import while a signal lands)

    signal.signal(signal.SIGINT, _stop)
    signal.signal(signal.SIGTERM, _stop)
    _leave(run_cli())


def _leave(code: int) -> NoReturn:
    """Exit with ``code`` as Python would, but for tearing the interpreter down.

    What an exit must do is done, in Python's own order: threads that are not
    daemons are waited for (idle thread pools told to stop first), then the
    exit hooks run (logging flushes its handlers, multiprocessing removes its
    temporary files); then the standard streams are flushed and the process
    ends. A stop signal now ends it at once, without a word: there is nothing
    left to unwind (and a thread that never ends must not make it unstoppable).
    """
    import atexit
    import threading

    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    shutdown = getattr(threading, "_shutdown", None)  # what the interpreter calls first as it finalizes
    if shutdown is not None:
        shutdown()
    else:
        for thread in threading.enumerate():
            if thread is not threading.current_thread() and not thread.daemon:
                thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: nothing more can reach it
            pass
    os._exit(code)
