"""Above the stages, the command line: ``orchestrate`` parses arguments, runs a command, returns an exit code.

:mod:`.parser` parses the arguments, :mod:`.commands` runs the command through ``api`` (which
composes the stages).

Exit codes: 0 ok; 1 the spec is invalid or the run failed; 2 usage error;
130 after Ctrl-C, 143 after SIGTERM. No traceback reaches the user unless
``--debug`` is given.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import TextIO

from ..errors import OrchestratorError, Terminated, UsageError
from .commands import EXIT_INVALID, EXIT_OK, EXIT_USAGE, HANDLERS
from . import parser

__all__ = ["EXIT_INVALID", "EXIT_OK", "EXIT_USAGE", "build_parser", "run_cli"]


def build_parser() -> argparse.ArgumentParser:
    """The ``orchestrate`` parser, each command bound to its handler in :mod:`.commands`."""
    return parser.build_parser(HANDLERS)


def run_cli(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    debug = "--debug" in (argv if argv is not None else sys.argv[1:])
    try:
        args = build_parser().parse_args(argv)
        if args.command is None:
            build_parser().print_help(out)
            return EXIT_USAGE
        handler: Callable[[argparse.Namespace, TextIO], int] = args.handler
        return handler(args, out)
    except UsageError as exc:
        sys.stderr.write(f"{exc}\n")
        return EXIT_USAGE
    except OrchestratorError as exc:
        if debug:
            raise
        sys.stderr.write(f"error: {exc}\n")
        return EXIT_INVALID
    except SystemExit as exc:  # argparse's --help and --version
        return int(exc.code or 0) if not isinstance(exc.code, str) else EXIT_USAGE
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        return 130
    except Terminated:
        sys.stderr.write("terminated\n")
        return 143
    except Exception as exc:  # a bug of ours: say so briefly, never a traceback without --debug
        if debug:
            raise
        if isinstance(exc, OSError) and exc.filename:  # the machine's, not ours: a full disk, a folder refused
            sys.stderr.write(f"error: {exc.filename}: {exc.strerror or exc}\n")
            return EXIT_INVALID
        sys.stderr.write(f"internal error: {type(exc).__name__}: {exc} (run with --debug for the traceback)\n")
        return EXIT_INVALID
