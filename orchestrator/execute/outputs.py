"""Writing a run's outputs: all or nothing, each file atomically, never outside the output directory.

Every output is first written to a temporary file beside its target; only
when all of them are written are they renamed into place. A failure (a full
disk, a path that cannot be made) removes the temporary files and leaves
every existing file as it was.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from .. import formats
from ..atomic import atomic_open
from ..errors import RunError
from ..spec.records import Spec
from ..ops import lookup
from ..ops.values import CopyFailed
from ..paths import PathUse, clashes


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


def refuse_overwrites(spec: Spec, output_dir: str, base_dir: str, others: Sequence[PathUse] = ()) -> None:
    """Before anything starts: no two writes to one file, and none over the spec or a file it loads.

    Outputs and the files ops save go to ``output_dir``; ``others`` are the run's
    other writes (``--report``, ``--performance-report``). Validation checks
    outputs against the spec's own output directory; ``--output-dir`` (or the
    API's ``output_dir``) and the command's flags can point anywhere, so the run
    checks again, all of them together.
    """
    reads = [PathUse(os.path.join(base_dir, os.path.basename(spec.file)), "the spec itself")]
    writes = [PathUse(os.path.join(output_dir, out.target), f"output '{out.ref}'")
              for out in spec.outputs if out.target != "-"]
    for op in spec.ops:
        definition = lookup(op.kind)
        for param in definition.reads if definition else ():
            if param in op.params:
                reads.append(PathUse(os.path.join(base_dir, str(op.params[param])), f"the file op '{op.name}' loads"))
        for param in definition.writes if definition else ():
            if param in op.params:
                writes.append(PathUse(os.path.join(output_dir, str(op.params[param])), f"the file op '{op.name}' saves"))
    problems = clashes(reads, [*writes, *others])
    if problems:
        raise RunError(problems[0] + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""))


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


def write_outputs(spec: Spec, values: Mapping[str, Any], output_dir: str, echo: Callable[[str], None],
                  texts: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """Write the spec's file outputs (and print the ``-`` ones); the paths written.

    ``texts``: outputs written as this text rather than their value (a sweep's ``table:``)."""
    allow = spec.run.allow_absolute_paths
    texts = texts or {}
    staged: list[tuple[str, Any]] = []
    for out in spec.outputs:
        value: Any = texts.get(str(out.ref))
        if value is None:
            if isinstance(values[str(out.ref)], CopyFailed):
                failed = values[str(out.ref)]
                raise RunError(f"output '{out.ref}' is a value of a sweep copy that failed ('{failed.op}': "
                               f"{failed.error}); write the sweep's gather or select instead")
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
                if isinstance(value, str):
                    handle.write(value.encode())
                else:
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


class MetricFiles:
    """A loop's metric outputs in CSV, written as its windows are read: a stopped run keeps what it computed.

    The exception to all-or-nothing outputs, as the training-loops issue asks: the first window read in a
    run writes the file whole (atomically, with the rows a resumed loop starts from), each later window
    appends its rows, and the run's end writes the same bytes again with the others (``np.savetxt`` writes
    a row per line, so the appended rows are those it would write at once).
    """

    def __init__(self, spec: Spec, output_dir: str):
        self.targets: dict[str, list[str]] = {}  # a loop export written to CSV -> its paths
        for out in spec.outputs:
            chosen = formats.chosen(out.target)
            if out.target != "-" and chosen is not None and chosen.name == "csv":
                path = resolve_output(out.target, output_dir, spec.run.allow_absolute_paths)
                self.targets.setdefault(str(out.ref), []).append(path)
        self.rows: dict[str, int] = {}  # path -> rows written so far in this run

    def update(self, export: str, values: Sequence[Any]) -> None:
        """Write ``export``'s rows (a row per step, or per evaluation) past those already written."""
        for path in self.targets.get(export, ()):
            done = self.rows.get(path)
            if done is None:
                os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
                with atomic_open(path, "wb") as handle:
                    formats.write_array(handle, path, np.array(values))
            elif len(values) > done:  # only the new rows are copied: a long loop's series is not, every window
                with open(path, "ab") as handle:
                    formats.write_array(handle, path, np.array(values[done:]))
            self.rows[path] = len(values)
