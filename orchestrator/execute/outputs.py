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
from ..ops import lookup


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


def refuse_overwrites(spec: Spec, output_dir: str, base_dir: str) -> None:
    """Before anything starts: no output or checkpoint may land on the spec or on a file it loads.

    Validation checks this against the spec's own output directory; ``--output-dir``
    (or the API's ``output_dir``) can point elsewhere, so the run checks again.
    """
    inputs = {os.path.realpath(os.path.join(base_dir, os.path.basename(spec.file))): "the spec itself"}
    written: list[tuple[str, str]] = [(out.target, f"output '{out.ref}'") for out in spec.outputs if out.target != "-"]
    for op in spec.ops:
        definition = lookup(op.kind)
        for param in definition.reads if definition else ():
            if param in op.params:
                inputs.setdefault(os.path.realpath(os.path.join(base_dir, str(op.params[param]))),
                                  f"the file op '{op.name}' loads")
        for param in definition.writes if definition else ():
            if param in op.params:
                written.append((str(op.params[param]), f"op '{op.name}'"))
    for target, who in written:
        overwritten = inputs.get(os.path.realpath(os.path.join(output_dir, target)))
        if overwritten is not None:
            raise RunError(f"{who} would write {os.path.join(output_dir, target)}, which is {overwritten} "
                           "(choose another output directory or file)")


def metric_value(loop: str, metric: str, value: Any, step: int) -> np.ndarray:
    """One step's value of a loop's metric, which must be one number.

    Validation refuses a metric whose shape it knows; a ``call`` without ``output:`` is known only now.
    Its series is one column on the client: an array per step would grow it by the array at every step.
    """
    array = np.asarray(value)
    if array.ndim != 0:
        raise RunError(f"metric '{loop}.{metric}' is not a number: at step {step} its value has shape "
                       f"{list(array.shape)} (a metric is one number per step: reduce it in the loop's body, "
                       f"e.g. with op: mean)")
    return array


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
