"""Writing a run's outputs: all or nothing, never outside the output directory.

Policy. A run's outputs are every file it writes for the spec: the
``outputs`` (a loop's metric CSVs and a sweep's ``table:`` among them) and
the files ``save`` ops write. They are committed together, or not at all:
each output is written to a temporary beside its target (the saves to a
staging file beside theirs, on the worker that ran the op), and only when
every one is written are they all renamed into place, the old files kept
aside until the last rename is done. A write that fails (a full disk, a
folder that cannot be made) removes every temporary and leaves every
existing file as it was, and says which file and why; a rename that fails
midway puts the old files back (:class:`~orchestrator.atomic.FileSet`). A
run that fails, or whose sweep copies failed where the sweep does not allow
it, writes none of them. Checkpoints of loops are not outputs: they are the
run's state for ``--resume`` and are kept when it fails.

State: none between runs. :class:`MetricFiles` keeps, for one run, the rows
of each loop metric CSV written so far to its live file beside the target,
removed when the run ends.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from .. import formats
from ..atomic import FileSet, atomic_open
from ..errors import RunError
from ..spec.records import Spec
from ..ops import lookup
from ..ops.values import CopyFailed
from ..paths import PathUse, clashes
from ..runtime import commit_saves, discard_saves, settle_saves
from .records import RunSettings

OnWorkers = Callable[..., Iterable[Any]]  # runs a function of runtime.calls on every worker: what each returned


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
    tables = {f"{search.name}.table": f"the table of sweep '{search.name}'" for search in spec.sweeps if search.table}
    writes = [PathUse(os.path.join(output_dir, out.target), tables.get(str(out.ref), f"output '{out.ref}'"))
              for out in spec.outputs if out.target != "-"]
    writes += [PathUse(live_path(os.path.join(output_dir, out.target)), f"the rows so far of output '{out.ref}'")
               for out in spec.outputs if str(out.ref) in loop_exports(spec) and _is_csv(out.target)]
    for op in spec.ops:
        definition = lookup(op.kind)
        for param in definition.reads if definition else ():
            if param in op.params:
                reads.append(PathUse(os.path.join(base_dir, str(op.params[param])), f"the file op '{op.name}' loads"))
        for param in definition.writes if definition else ():
            if param in op.params:
                writes.append(PathUse(os.path.join(output_dir, str(op.params[param])), f"the file op '{op.name}' saves"))
    flagged = {os.path.realpath(use.path) for use in others}
    writes += [PathUse(path, f"the {what} folder (run.{key})") for key, what, folder in
               (("tensorboard", "TensorBoard", spec.run.tensorboard), ("mlflow", "MLflow", spec.run.mlflow))
               if folder and os.path.realpath(path := os.path.join(output_dir, folder)) not in flagged]
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


def commit_run(spec: Spec, values: Mapping[str, Any], output_dir: str, echo: Callable[[str], None],
               texts: Mapping[str, str], on_workers: OnWorkers, run: str, write: bool = True,
               failed: Sequence[str] = ()) -> tuple[str, ...]:
    """The run's outputs (``write``: the spec's files and the ``-`` ones printed) and the files its ops saved
    take their places together, or none does; the output files written.

    ``texts``: outputs written as this text rather than their value (a sweep's ``table:``); ``failed``:
    the sweeps whose failed copies fail the run, which then writes nothing; ``on_workers``: how a function
    of ``runtime.calls`` runs on every worker holding this ``run``'s saves.
    """
    printed = _printed(spec, values) if write else []
    if failed:
        on_workers(discard_saves, run=run)
        for line in printed:
            echo(line)
        echo(f"no output written: sweep{'s' if len(failed) > 1 else ''} {', '.join(repr(f) for f in failed)} "
             f"had copies that failed{_kept(spec, output_dir)}")
        return ()
    files = FileSet()
    try:
        if write:
            _stage(spec, values, output_dir, texts, files)
        saved = _commit_saves(on_workers, run)
        try:
            written = files.commit()
        except BaseException:
            on_workers(settle_saves, run=run, undo=True)
            raise
    except OSError as exc:
        files.discard()
        raise RunError(f"cannot write {_shown(exc.filename)}: {exc.strerror or exc}; no output of this run was "
                       f"written{_kept(spec, output_dir)}") from None
    except BaseException:
        files.discard()
        raise
    on_workers(settle_saves, run=run, undo=False)
    files.settle()
    for line in printed:
        echo(line)
    for path in written:
        echo(f"wrote {os.path.relpath(path)}")
    for path in sorted(saved):
        echo(f"saved {os.path.relpath(path)}")
    return tuple(written)


def _commit_saves(on_workers: OnWorkers, run: str) -> list[str]:
    """Every worker's saves into place (each worker puts its own back when one of its renames fails)."""
    try:
        return [path for paths in on_workers(commit_saves, run=run) for path in paths]
    except BaseException:
        on_workers(settle_saves, run=run, undo=True)  # the workers whose renames were all done
        raise


def _printed(spec: Spec, values: Mapping[str, Any]) -> list[str]:
    """The ``-`` outputs as printed; an output of a copy that failed is refused."""
    for out in spec.outputs:
        if isinstance(values.get(str(out.ref)), CopyFailed):
            failed = values[str(out.ref)]
            raise RunError(f"output '{out.ref}' is a value of a sweep copy that failed ('{failed.op}': "
                           f"{failed.error}); write the sweep's gather or select instead")
    return [f"{out.ref} =\n{np.array2string(np.asarray(values[str(out.ref)]), threshold=50)}"
            for out in spec.outputs if out.target == "-"]


def _stage(spec: Spec, values: Mapping[str, Any], output_dir: str, texts: Mapping[str, str], files: FileSet) -> None:
    """Every output file written to its temporary (none renamed yet)."""
    allow = spec.run.allow_absolute_paths
    for out in spec.outputs:
        if out.target == "-":
            continue
        path = resolve_output(out.target, output_dir, allow)
        text = texts.get(str(out.ref))
        with files.open(path) as handle:
            try:
                if text is not None:
                    handle.write(text.encode())
                else:
                    formats.write_array(handle, path, np.asarray(values[str(out.ref)]))
            except ValueError as exc:
                raise RunError(str(exc)) from None


def _kept(spec: Spec, output_dir: str) -> str:
    """What a run that wrote nothing left: the files of its outputs already there, as they were."""
    there = [os.path.join(output_dir, out.target) for out in spec.outputs if out.target != "-"]
    there = [path for path in there if os.path.exists(path)]
    if not there:
        return ""
    shown = ", ".join(_shown(path) for path in there[:4]) + (f" and {len(there) - 4} more" if len(there) > 4 else "")
    return f"; the files already there are as they were ({shown})"


def _shown(path: Any) -> str:
    return os.path.relpath(str(path)) if path else "an output"


def loop_exports(spec: Spec) -> set[str]:
    return {name for loop in spec.loops for name in loop.exports}


def _is_csv(target: str) -> bool:
    chosen = formats.chosen(target)
    return target != "-" and chosen is not None and chosen.name == "csv"


def live_path(target: str) -> str:
    """Where a loop metric's rows so far are while the run goes: hidden beside the output, removed at its end."""
    folder, name = os.path.split(target)
    return os.path.join(folder, f".{name}.running")


class MetricFiles:
    """A loop's metric CSVs while the run goes: the rows so far, in a live file beside each output.

    The output itself is written with the others when the run ends, or not at all; the live file
    (``.NAME.csv.running``) lets one watch a long loop (``tail -f``) and is removed when the run ends,
    whichever way. The first window read in a run writes it whole (atomically, with the rows a resumed
    loop starts from), each later window appends its rows (``np.savetxt`` writes a row per line, so the
    appended rows are those it would write at once).
    """

    def __init__(self, spec: Spec, output_dir: str):
        self.targets: dict[str, list[str]] = {}  # a loop export written to CSV -> its live files
        exports = loop_exports(spec)
        for out in spec.outputs:
            if str(out.ref) in exports and _is_csv(out.target):
                path = resolve_output(out.target, output_dir, spec.run.allow_absolute_paths)
                self.targets.setdefault(str(out.ref), []).append(live_path(path))
        self.rows: dict[str, int] = {}  # path -> rows written so far in this run
        self.folders: list[str] = []  # folders made for the live files, removed with them if left empty

    def update(self, export: str, values: Sequence[Any]) -> None:
        """Write ``export``'s rows (a row per step, or per evaluation) past those already written."""
        for path in self.targets.get(export, ()):
            try:
                self._write(path, values)
            except OSError as exc:
                raise RunError(f"cannot write {os.path.relpath(path)} (the rows so far of a loop metric): "
                               f"{exc.strerror or exc}") from None
            self.rows[path] = len(values)

    def _write(self, path: str, values: Sequence[Any]) -> None:
        done = self.rows.get(path)
        if done is None:
            folder = os.path.dirname(path) or "."
            while not os.path.isdir(folder) and folder not in self.folders:
                self.folders.append(folder)
                folder = os.path.dirname(folder)
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            with atomic_open(path, "wb") as handle:
                formats.write_array(handle, path, np.array(values))
        elif len(values) > done:  # only the new rows are copied: a long loop's series is not, every window
            with open(path, "ab") as handle:
                formats.write_array(handle, path, np.array(values[done:]))

    def close(self) -> None:
        """The run ended (whichever way): the live files go, and the folders made for them if left empty."""
        for path in self.rows:
            with contextlib.suppress(OSError):
                os.unlink(path)
        for folder in self.folders:  # innermost first
            with contextlib.suppress(OSError):
                os.rmdir(folder)
        self.rows, self.folders = {}, []


def flag_writes(settings: RunSettings) -> list[PathUse]:
    """The files the command's flags write (relative to the working directory, as the user typed them)."""
    flags = [(settings.report_path, "the run report (--report)"),
             (settings.performance_report, "the performance report (--performance-report)"),
             (settings.tensorboard, "the TensorBoard folder (--tensorboard)"),
             (settings.mlflow, "the MLflow folder (--mlflow)")]
    return [PathUse(path, what) for path, what in flags if path]
