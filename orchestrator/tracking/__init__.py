"""Metric sinks: a run's loop metrics and parameters, written where people already look.

Policy. A run already records each loop's metrics (the series its windows
read, the rows of its evaluations) and each sweep copy's values; a sink
writes them again in a format another tool reads, with no library of that
tool: TensorBoard's event files (:mod:`.tensorboard`) and MLflow's file
store (:mod:`.mlflow`). A sink is named by the flag that asks for it; the
registry below maps each name to its maker, so a new format is one module
and one line here. The client feeds a sink as it writes the metric CSVs'
rows so far, never a value per step.

A sink never writes over anything: every run of ``orchestrate`` adds files
of its own (a new event file in a new folder, a new MLflow run), and the
folders it is given are only added to. A tracked run is one loop of the
spec (each copy of a sweep has loops of its own, so each copy is its own
tracked run, with its values as parameters).

State: each sink holds, for one run of ``orchestrate``, the files of the
tracked runs it has opened, closed when the run ends.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from .mlflow import MlflowStore
from .records import MetricSink, Point, SinkTarget, Tracked
from .tensorboard import EventLog


SinkMaker = Callable[[SinkTarget], MetricSink]

SINKS: dict[str, SinkMaker] = {
    "tensorboard": EventLog,
    "mlflow": MlflowStore,
}


def folder_problem(folder: str, flag: str) -> str | None:
    """Why ``folder`` cannot take a sink's files (made if missing), or None."""
    if not folder.strip():
        return f"{flag}: the folder is empty"
    if os.path.exists(folder) and not os.path.isdir(folder):
        return f"{flag} {folder}: is a file, not a folder (give a folder; runs are added inside it)"
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as exc:
        return f"{flag} {folder}: cannot make the folder: {exc.strerror or exc}"
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"{flag} {folder}: the folder is not writable (give a folder you can write to)"
    return None


__all__ = ["SINKS", "MetricSink", "Point", "SinkMaker", "SinkTarget", "Tracked", "folder_problem"]
