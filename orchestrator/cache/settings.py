"""Which cache options can work: refused before a run starts, never found out midway."""

from __future__ import annotations

import os
import tempfile
from typing import Protocol

from ..errors import OrchestratorError, UsageError
from ..plan.records import Plan
from .store import default_directory


def directory_problem(directory: str, write: bool) -> str | None:
    """Why ``directory`` cannot hold a cache, or None. One that does not exist yet is fine if it can be made.

    Permission bits do not settle writing (root passes every check, a read-only mount fails none), so a
    write is also tried: a temporary file in the nearest folder that exists, gone as soon as it is closed.
    """
    existing = directory
    while not os.path.lexists(existing):
        parent = os.path.dirname(existing) or "."
        if parent == existing:
            break
        existing = parent
    if not os.path.isdir(existing):
        if existing == directory:
            return f"cache directory '{directory}' is a file, not a directory"
        return f"cache directory '{directory}' is inside '{existing}', which is a file, not a directory"
    if not write:
        return None
    try:
        if not os.access(existing, os.W_OK | os.X_OK):
            raise PermissionError(13, "permission denied")
        with tempfile.TemporaryFile(dir=existing, prefix=".orchestrate-probe-"):
            pass
    except OSError as exc:
        where = "" if existing == directory else f" (in '{existing}')"
        return f"cache directory '{directory}' cannot be written{where}: {exc.strerror or exc}"
    return None


class CacheSettings(Protocol):
    """The run settings the cache reads (``RunSettings`` has them; the cache sits below the run)."""

    @property
    def use_cache(self) -> bool: ...
    @property
    def cache_dir(self) -> str | None: ...
    @property
    def resume(self) -> bool: ...


def check_settings(plan: Plan, settings: CacheSettings) -> None:
    """Before a run starts: cache options that cannot work are refused, not found out midway.

    The directory is checked only when the run would use it (an op's ``cache:``, ``--resume``) or it was
    named: a spec that caches nothing runs from a read-only folder.
    """
    if settings.resume and not settings.use_cache:
        raise UsageError("--resume reads and writes the cache, and --no-cache turns it off: give one of them")
    if settings.cache_dir is not None and not settings.cache_dir.strip():
        raise UsageError("--cache-dir is empty: give a directory, or leave the option out for .orchestrate/cache "
                         "beside the spec")
    spec = plan.spec
    wanted = settings.resume or any(spec.caches(name) for name in (*(o.name for o in spec.ops),
                                                                   *(lp.name for lp in spec.loops)))
    if not settings.use_cache or not (wanted or settings.cache_dir is not None):
        return
    directory = settings.cache_dir or default_directory(os.path.abspath(spec.document.directory))
    problem = directory_problem(directory, write=True)
    if problem is not None:
        raise OrchestratorError(f"{problem} (give --cache-dir a directory this run can write, or --no-cache)")
