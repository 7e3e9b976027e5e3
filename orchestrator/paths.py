"""Where one command reads and writes: refuse two writes to one file, or a write over a file read.

A command that writes its report over an output it has just written, or a
page over the report it renders, loses the user's data without a word. So
every command lists, before anything runs, each file it will read and each
it will write (with a few words on what each is), and :func:`clashes` says
what would collide. Two paths are the same file when their real paths are
equal (symbolic links and ``..`` resolved) or, for files that exist, when
the operating system says so (hard links).

Where a run keeps what is not an output is decided here too, once, for the
stages that write it and those that show it: the output directory a path is
relative to, and the folder of a loop's checkpoints.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class PathUse:
    """One file a command touches: the path as the user gave it (or the spec made it), and what it is."""

    path: str
    what: str


def clashes(reads: Sequence[PathUse], writes: Sequence[PathUse]) -> list[str]:
    """One message per write that lands on an earlier write or on a file read, in the order given."""
    problems: list[str] = []
    read_at = [(use, _real(use.path)) for use in reads]
    written: list[tuple[PathUse, str]] = []
    for use in writes:
        real = _real(use.path)
        earlier = next((other for other, path in written if _same(real, path)), None)
        if earlier is not None:
            problems.append(f"{use.what} and {earlier.what} would both be written to {use.path}: "
                            "give them different paths")
            continue
        source = next((other for other, path in read_at if _same(real, path)), None)
        if source is not None:
            problems.append(f"{use.what} would be written over {use.path}, which is {source.what}: "
                            "write it somewhere else")
            continue
        written.append((use, real))
    return problems


def _real(path: str) -> str:
    return os.path.realpath(os.path.abspath(path))


def _same(a: str, b: str) -> bool:
    if a == b:
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist yet: different files
        return False


# --------------------------------------------------------------------------- where a run keeps things

CACHE_FOLDER = os.path.join(".orchestrate", "cache")  # a spec's cache directory, beside it, when none is given


def safe_name(name: str) -> str:
    """A spec's or a loop's name as one folder name (``sweep/0/train`` -> ``sweep_0_train``)."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def output_directory(spec_dir: str, given: str | None, spec_default: str | None) -> str:
    """The folder a run's outputs are relative to: ``--output-dir`` (or the API's ``output_dir``), else the
    spec's ``run.output_dir``, else the spec's folder; a relative one is taken from the spec's folder."""
    return os.path.normpath(os.path.join(spec_dir, given or spec_default or "."))


def checkpoint_root(spec_dir: str, spec_name: str, path: str | None, output_dir: str,
                    cache_dir: str | None = None) -> str:
    """The folder that holds a loop's checkpoint folder: ``checkpoint.path`` under the output directory when
    the loop names one, else ``checkpoints/<spec>`` in the cache directory (``--cache-dir``, or
    ``.orchestrate/cache`` beside the spec). A loop's files are in ``<root>/<loop>/``."""
    if path is not None:
        return os.path.normpath(os.path.join(output_dir, path))
    cache = cache_dir if cache_dir is not None else os.path.join(spec_dir, CACHE_FOLDER)
    return os.path.join(cache, "checkpoints", safe_name(spec_name))
