"""A run's metrics fed to the sinks the user asked for (``--tensorboard``, ``--mlflow``).

Policy. The run asks the sinks of :mod:`orchestrator.tracking` for what it
records anyway: as a loop's windows are read (where the metric CSVs get
their rows so far), the rows past those already sent go to every sink, a
step metric at its step and an evaluation metric at the step it was
evaluated after; no value is fetched for a sink alone. Each loop is a
tracked run, named by the loop; its parameters are the spec's ``params:``
(as ``--set`` left them) and, for a loop of a sweep copy, the copy's values
(``Loop.scope`` says which copy of which sweep). A step of an inner loop
run inside an outer loop's step is numbered from the offset of that pass,
as its keys are. The folders are checked (and made) before the first op
runs, once no other write clashes with them (``outputs.flag_writes``); the
sinks are closed when the run ends, each tracked run marked finished or
failed. A spec without loops has no metric to write: its folders are left
alone.

State: the sinks of one run and, per loop, pass and metric, the rows sent.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np

from ..errors import RunError
from ..paths import safe_name
from ..spec.loops import Loop
from ..spec.records import Spec
from ..tracking import SINKS, MetricSink, SinkTarget, Tracked, folder_problem
from .records import RunSettings

T = TypeVar("T")


def asked(spec: Spec, settings: RunSettings, output_dir: str) -> tuple[dict[str, str], dict[str, str]]:
    """The sinks asked for: name -> folder, and name -> how it was asked. A flag's folder is relative to the
    working directory, and overrides the spec's ``run:`` key, which is relative to the output directory and
    kept inside it as an output is (unless ``run.allow_absolute_paths``)."""
    flags = {"tensorboard": settings.tensorboard, "mlflow": settings.mlflow}
    keys = {"tensorboard": spec.run.tensorboard, "mlflow": spec.run.mlflow}
    folders, how = {}, {}
    for name in SINKS:
        if flags.get(name) is not None:
            folders[name], how[name] = str(flags[name]), f"--{name}"
        elif keys.get(name):
            folder = os.path.normpath(os.path.join(output_dir, str(keys[name])))
            base = os.path.realpath(output_dir)
            inside = os.path.commonpath([os.path.realpath(folder), base]) == base
            if not inside and not spec.run.allow_absolute_paths:
                raise RunError(f"run.{name} '{keys[name]}' escapes the output directory {output_dir} "
                               "(set run.allow_absolute_paths: true to allow it)")
            folders[name], how[name] = folder, f"run.{name}"
    return folders, how


class Tracks:
    """The sinks of one run, fed from its loops' metrics as their windows are read."""

    def __init__(self, spec: Spec, settings: RunSettings, token: str, output_dir: str):
        self.spec = spec
        self.folders, self.how = asked(spec, settings, output_dir)
        self.token = token
        self.sinks: list[MetricSink] = []
        self.sent: dict[tuple[str, int, str], int] = {}  # (loop, offset, metric) -> rows sent
        self.runs: dict[str, Tracked] = {}

    def run(self, body: Callable[[], T], echo: Callable[[str], None]) -> T:
        """``body`` (the staged run), the folders checked and the sinks made before it, every tracked run
        marked finished or failed after it."""
        if not self.folders or not self.spec.loops:  # (no loop: no metric to write)
            return body()
        self.check(echo)
        finished = False
        try:
            result = body()
            finished = True
            return result
        finally:
            self.close(finished)

    def check(self, echo: Callable[[str], None]) -> None:
        """Before anything runs: each folder is one (made if missing) and writable; the sinks made."""
        problems = [problem for name, folder in self.folders.items()
                    if (problem := folder_problem(folder, self.how[name])) is not None]
        if problems:
            raise RunError("; ".join(problems))
        started = time.time()
        self.sinks = [SINKS[name](SinkTarget(folder, self.spec.name, self.token, started))
                      for name, folder in self.folders.items()]
        for sink in self.sinks:
            echo(f"metrics: {sink.where()}")

    def rows(self, loop: Loop, offset: int, series: Mapping[str, Sequence[Any]],
             evaluations: Mapping[str, Sequence[tuple[int, float]]]) -> None:
        """A loop's metrics so far, step and evaluation metrics alike: the rows not sent yet."""
        for name, values in series.items():
            self.steps(loop, offset, name, values)
        for name, rows in evaluations.items():
            self.evaluations(loop, offset, name, rows)

    def steps(self, loop: Loop, offset: int, metric: str, values: Sequence[Any]) -> None:
        """A step metric's series so far (a value per step from the first of this pass)."""
        self._send(loop, offset, metric, [(offset + i + 1, float(np.asarray(v))) for i, v in enumerate(values)])

    def evaluations(self, loop: Loop, offset: int, metric: str, rows: Sequence[tuple[int, float]]) -> None:
        """An evaluation metric's (step, value) rows so far."""
        self._send(loop, offset, metric, [(offset + step, float(value)) for step, value in rows])

    def _send(self, loop: Loop, offset: int, metric: str, points: list[tuple[int, float]]) -> None:
        done = self.sent.get((loop.name, offset, metric), 0)
        if len(points) <= done or not self.sinks:
            return
        run = self._tracked(loop)
        try:
            for sink in self.sinks:
                sink.log(run, metric, points[done:])
        except OSError as exc:
            raise RunError(f"cannot write the metrics of loop '{loop.name}' for {self._names()}: "
                           f"{exc.strerror or exc} ({exc.filename or ''})") from None
        self.sent[(loop.name, offset, metric)] = len(points)

    def failed(self, loop: Loop) -> None:
        """``loop`` (a sweep copy's) failed while the run goes on: its tracked runs end, marked failed."""
        run = self._tracked(loop)
        try:
            for sink in self.sinks:
                sink.end(run, finished=False)
        except OSError as exc:
            raise RunError(f"cannot end the metrics of loop '{loop.name}' for {self._names()}: "
                           f"{exc.strerror or exc}") from None

    def _tracked(self, loop: Loop) -> Tracked:
        run = self.runs.get(loop.name)
        if run is None:
            params = {p.name: _text(p.value) for p in self.spec.params}
            tags = {"orchestrator.spec": self.spec.name, "orchestrator.run": self.token,
                    "orchestrator.loop": loop.name}
            for sweep, index in loop.scope.copies:  # outermost first: an inner sweep's value wins a clash
                copy = self.spec.search(sweep).copies[index]
                params.update({name: _text(value) for name, value in copy.values.items()})
                tags.update({"orchestrator.sweep": sweep, "orchestrator.copy": copy.id})
            run = self.runs[loop.name] = Tracked(safe_name(loop.name), loop.name, params, tags)
        return run

    def _names(self) -> str:
        return ", ".join(f"{self.how[name]} {folder}" for name, folder in self.folders.items())

    def close(self, finished: bool) -> None:
        """The run ended: every sink's tracked runs closed, marked finished or failed."""
        sinks, self.sinks = self.sinks, []
        problems = []
        for sink in sinks:
            try:
                sink.close(finished)
            except OSError as exc:  # the metrics already written stay
                problems.append(str(exc.strerror or exc))
        if problems and finished:  # (a failed run's own error is the one to say)
            raise RunError(f"cannot close the metrics for {self._names()}: {'; '.join(problems)}")


def _text(value: Any) -> str:
    return value if isinstance(value, str) else repr(value) if isinstance(value, float) else str(value)
