"""Which cache options and checkpoint folders can work: refused before a run starts, never found out midway."""

from __future__ import annotations

import os
import tempfile
from typing import Protocol

from ..errors import OrchestratorError, UsageError
from ..ops import lookup
from ..paths import PathUse, checkpoint_root, clashes, output_directory, safe_name
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
    @property
    def output_dir(self) -> str | None: ...


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


def check_checkpoint_paths(plan: Plan, output_dir: str | None) -> None:
    """Before a run starts: each loop's ``checkpoint.path``, under the output directory this run writes to
    (``--output-dir`` moves it), is a folder of its own, as validation found it under the spec's: inside
    the output directory (symbolic links resolved) unless ``run.allow_absolute_paths``, and not the spec, a
    file an op loads, or a file an output or a save writes."""
    spec = plan.spec
    if not any(loop.checkpoint is not None and loop.checkpoint.path is not None for loop in spec.loops):
        return
    base = os.path.abspath(spec.document.directory)
    out = output_directory(base, output_dir, spec.run.output_dir)
    taken = [PathUse(os.path.join(base, os.path.basename(spec.file)), "the spec itself")]
    taken += [PathUse(os.path.join(out, o.target), f"the file of output '{o.ref}'") for o in spec.outputs
              if o.target != "-"]
    for op in spec.ops:
        definition = lookup(op.kind)
        for param in definition.reads if definition else ():
            if param in op.params:
                taken.append(PathUse(os.path.join(base, str(op.params[param])), f"the file op '{op.name}' loads"))
        for param in definition.writes if definition else ():
            if param in op.params:
                taken.append(PathUse(os.path.join(out, str(op.params[param])), f"the file op '{op.name}' saves"))
    for loop in spec.loops:
        if loop.checkpoint is None or loop.checkpoint.path is None:
            continue
        root = checkpoint_root(base, spec.name, loop.checkpoint.path, out)
        what = f"checkpoint path '{loop.checkpoint.path}' of loop '{loop.name}' ({root})"
        real_out = os.path.realpath(out)
        if not spec.run.allow_absolute_paths and \
                os.path.commonpath([os.path.realpath(root), real_out]) != real_out:
            raise OrchestratorError(f"{what} is outside the output directory {out} (a symbolic link leads out): "
                                    "give a folder inside it, or set run.allow_absolute_paths: true")
        for folder in (root, os.path.join(root, safe_name(loop.name))):
            problems = clashes(taken, [PathUse(folder, what)])
            if problems:
                raise OrchestratorError(f"{problems[0].replace(' would be written over ', ' would be a folder at ')} "
                                        "(give the checkpoints a folder of their own)")
        existing = os.path.join(root, safe_name(loop.name))
        while not os.path.exists(existing) and os.path.dirname(existing) != existing:
            existing = os.path.dirname(existing)
        if not os.path.isdir(existing):
            raise OrchestratorError(f"{what} cannot be a folder: {existing} is a file (choose another folder)")
