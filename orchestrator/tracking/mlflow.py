"""MLflow's file store, written with no MLflow library.

Policy. The folder given is an MLflow tracking root (``mlflow ui
--backend-store-uri FOLDER``, or ``MLFLOW_TRACKING_URI=file:FOLDER``). The
spec's name is the experiment: the one of that name already in the folder,
else a new one (the next free number; the ``Default`` experiment 0 is made
with the folder, as MLflow makes it). Each tracked run is a new MLflow run
in it (a random run id, so a second run of orchestrate adds runs and never
touches the first's): ``<exp>/<run>/meta.yaml``, ``params/<name>`` (the
value as text), ``tags/<name>``, and ``metrics/<name>``, a line
``<milliseconds> <value> <step>`` per point, appended as the metric CSVs
get their rows. A run is ``RUNNING`` (1) until the run of orchestrate
ends, then ``FINISHED`` (3) or ``FAILED`` (4): its ``meta.yaml`` (ours) is
replaced atomically. The YAML is written by hand, each string as a JSON
string (which YAML reads as a double-quoted scalar).

State: the folder of each tracked run opened, and its start time.
"""

from __future__ import annotations

import contextlib
import getpass
import json
import os
import time
import uuid
from collections.abc import Mapping, Sequence

from ..atomic import write_text
from .records import Point, SinkTarget, Tracked

RUNNING, FINISHED, FAILED = 1, 3, 4
_SOURCE_LOCAL = 4  # SourceType.LOCAL


def _yaml(fields: Mapping[str, object]) -> str:
    return "".join(f"{key}: {json.dumps(value)}\n" for key, value in fields.items())


def _meta_name(path: str) -> str | None:
    """An experiment's name from its meta.yaml (ours or MLflow's: ``name: VALUE``), or None."""
    with contextlib.suppress(OSError, ValueError), open(path, encoding="utf-8") as handle:
        for line in handle:
            if line.startswith("name:"):
                value = line[len("name:"):].strip()
                return str(json.loads(value)) if value.startswith('"') else value.strip("'")
    return None


def _uri(path: str) -> str:
    return "file://" + os.path.abspath(path)


class MlflowStore:
    """The ``mlflow`` sink: an experiment per spec, an MLflow run per tracked run."""

    def __init__(self, target: SinkTarget):
        self.target = target
        self.root = target.folder
        self.experiment: str | None = None
        self.runs: dict[str, tuple[str, Tracked, int]] = {}  # key -> its folder, the run, its start (ms)

    def _experiment(self) -> str:
        if self.experiment is None:
            self.experiment = self._find_or_make(self.target.spec)
        return self.experiment

    def _find_or_make(self, name: str) -> str:
        numbers = [entry for entry in os.listdir(self.root) if entry.isdigit()]
        for entry in sorted(numbers, key=int):
            if _meta_name(os.path.join(self.root, entry, "meta.yaml")) == name:
                return entry
        if "0" not in numbers:
            self._make("0", "Default")
        number = max((int(n) for n in numbers), default=0) + 1
        while not self._make(str(number), name):  # another run made that number meanwhile
            number += 1
        return str(number)

    def _make(self, number: str, name: str) -> bool:
        folder = os.path.join(self.root, number)
        try:
            os.mkdir(folder)
        except FileExistsError:
            return False
        now = int(time.time() * 1000)
        write_text(os.path.join(folder, "meta.yaml"), _yaml({
            "artifact_location": _uri(folder), "creation_time": now, "experiment_id": number,
            "last_update_time": now, "lifecycle_stage": "active", "name": name}))
        return True

    def _run(self, run: Tracked) -> str:
        opened = self.runs.get(run.key)
        if opened is not None:
            return opened[0]
        experiment = self._experiment()
        run_id = uuid.uuid4().hex
        folder = os.path.join(self.root, experiment, run_id)
        for part in ("params", "metrics", "tags", "artifacts"):
            os.makedirs(os.path.join(folder, part))
        start = int(time.time() * 1000)
        self.runs[run.key] = (folder, run, start)
        for name, value in run.params.items():
            write_text(os.path.join(folder, "params", name), value)
        tags = {"mlflow.runName": run.name, "mlflow.source.type": "LOCAL", "mlflow.user": _user(), **run.tags}
        for name, value in tags.items():
            write_text(os.path.join(folder, "tags", name), value)
        self._meta(folder, run, start, RUNNING)
        return folder

    def _meta(self, folder: str, run: Tracked, start: int, status: int) -> None:
        run_id = os.path.basename(folder)
        ended = None if status == RUNNING else int(time.time() * 1000)
        write_text(os.path.join(folder, "meta.yaml"), _yaml({
            "artifact_uri": _uri(os.path.join(folder, "artifacts")), "end_time": ended, "entry_point_name": "",
            "experiment_id": self._experiment(), "lifecycle_stage": "active", "run_id": run_id,
            "run_name": run.name, "run_uuid": run_id, "source_name": "", "source_type": _SOURCE_LOCAL,
            "source_version": "", "start_time": start, "status": status, "tags": [], "user_id": _user()}))

    def where(self) -> str:
        return f"MLflow runs in experiment '{self.target.spec}' of {os.path.relpath(self.root)} " \
               f"(mlflow ui --backend-store-uri {os.path.relpath(self.root)})"

    def log(self, run: Tracked, metric: str, points: Sequence[Point]) -> None:
        folder = self._run(run)
        now = int(time.time() * 1000)
        with open(os.path.join(folder, "metrics", metric), "a", encoding="utf-8") as handle:
            handle.write("".join(f"{now} {value!r} {step}\n" for step, value in points))

    def end(self, run: Tracked, finished: bool) -> None:
        """Opened if it was not (a copy that failed before its first metric is shown, with its values)."""
        folder = self._run(run)
        _, _, start = self.runs.pop(run.key)
        self._meta(folder, run, start, FINISHED if finished else FAILED)

    def close(self, finished: bool) -> None:
        for folder, run, start in self.runs.values():
            self._meta(folder, run, start, FINISHED if finished else FAILED)
        self.runs = {}


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no user name for this uid (a container)
        return "unknown"
