"""Writing a run's outputs: all or nothing, each file atomically, never outside the output directory.

Every output is first written to a temporary file beside its target; only
when all of them are written are they renamed into place. A failure (a full
disk, a path that cannot be made) removes the temporary files and leaves
every existing file as it was.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Mapping

import numpy as np

from .. import formats
from ..atomic import atomic_open
from ..errors import RunError
from ..model import Spec


def resolve_output(target: str, base: str, allow_outside: bool) -> str:
    path = os.path.normpath(os.path.join(base, target))
    # realpath: a symlink inside the output directory must not lead outside it
    real_base = os.path.realpath(base)
    real_parent = os.path.realpath(os.path.dirname(path) or ".")
    inside = os.path.commonpath([real_parent, real_base]) == real_base
    if not inside and not allow_outside:
        raise RunError(f"output path '{target}' escapes the output directory {base} "
                       "(set run.allow_absolute_paths: true to allow it)")
    return path


def write_outputs(spec: Spec, values: Mapping[str, Any], output_dir: str,
                  echo: Callable[[str], None]) -> tuple[str, ...]:
    """Write the spec's file outputs (and print the ``-`` ones); the paths written."""
    allow = spec.run.allow_absolute_paths
    staged: list[tuple[str, Any]] = []
    for out in spec.outputs:
        value = np.asarray(values[str(out.ref)])
        if out.target == "-":
            continue
        staged.append((resolve_output(out.target, output_dir, allow), value))
    temps: list[tuple[Any, str]] = []
    path = ""
    try:
        for path, value in staged:
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            ctx = atomic_open(path, "wb")
            handle = ctx.__enter__()
            temps.append((ctx, path))  # before writing: a failed write must remove its temp too
            try:
                formats.write_array(handle, path, value)
            except ValueError as exc:
                raise RunError(str(exc)) from None
    except BaseException as exc:
        for ctx, _ in temps:
            ctx.__exit__(RuntimeError, RuntimeError("aborted"), None)
        if isinstance(exc, OSError):
            raise RunError(f"cannot write output {exc.filename or path}: {exc.strerror or exc}") from None
        raise
    for ctx, _ in temps:
        ctx.__exit__(None, None, None)
    for out in spec.outputs:
        if out.target == "-":
            echo(f"{out.ref} =\n{np.array2string(np.asarray(values[str(out.ref)]), threshold=50)}")
    for _, written in temps:
        echo(f"wrote {os.path.relpath(written)}")
    return tuple(written for _, written in temps)
