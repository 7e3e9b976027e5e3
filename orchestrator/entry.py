"""The ``orchestrate`` console script: stop signals are ours from the first instant, then the CLI.

Importing the CLI imports Dask, NumPy and the stages: a second, several on a
loaded machine. A Ctrl-C (SIGINT to the whole process group, from a terminal)
or a SIGTERM in that second once printed Python's traceback of whatever
import was under way. So this module, which imports nothing heavy, installs
the handlers first and only then imports the CLI; a stop signal at any point
prints one line and exits 130 (SIGINT) or 143 (SIGTERM), as ``run_cli`` does
for a signal that arrives later.

Once the command is done (its cluster closed, its files written) the process
leaves at once (:func:`_leave`): the exit hooks run, the output is flushed,
and the interpreter is not torn down — freeing every module of Dask, NumPy
and bokeh one by one took 0.15 s, a twentieth of a whole ``run``, for memory
the system reclaims anyway.
"""

from __future__ import annotations

import atexit
import logging
import os
import signal
import sys
import threading
from typing import Any, NoReturn

from .errors import Terminated

EXIT_INTERRUPTED, EXIT_TERMINATED = 130, 143


def _stop(signum: int, frame: Any) -> None:
    """A stop signal: quiet the libraries' own complaints about interrupted work, then unwind."""
    # Stopping a run leaves Dask's pending client calls to fail as the client closes; their
    # tracebacks ("Task exception was never retrieved") would bury the one line that matters.
    for name in ("asyncio", "distributed", "tornado"):
        logging.getLogger(name).setLevel(logging.CRITICAL + 1)
    if signum == signal.SIGTERM:
        raise Terminated()
    raise KeyboardInterrupt()


def main() -> None:
    """``orchestrate``: stop signals handled, then the CLI's exit code."""
    signal.signal(signal.SIGINT, _stop)
    signal.signal(signal.SIGTERM, _stop)
    try:
        from .cli import run_cli
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        sys.exit(EXIT_INTERRUPTED)
    except Terminated:
        sys.stderr.write("terminated\n")
        sys.exit(EXIT_TERMINATED)
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
