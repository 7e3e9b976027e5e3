"""The ``orchestrate`` console script: stop signals are ours from the first instant, then the CLI.

Importing the CLI imports Dask, NumPy and the stages: a second, several on a
loaded machine. A Ctrl-C (SIGINT to the whole process group, from a terminal)
or a SIGTERM in that second once printed Python's traceback of whatever
import was under way. So this module, which imports nothing heavy, installs
the handlers first and only then imports the CLI; a stop signal at any point
prints one line and exits 130 (SIGINT) or 143 (SIGTERM), as ``run_cli`` does
for a signal that arrives later.
"""

from __future__ import annotations

import logging
import signal
import sys
from typing import Any

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
    sys.exit(run_cli())
