"""Checkpoints of a loop: its carried states, metric series, evaluations and stopping state at a step.

Policy. A checkpoint is written by the client every ``every`` steps of a
loop that asks for them (``iterate: checkpoint``), whatever the run's cache
settings; ``run --resume`` reads the newest one of the loop's current
revision and continues from its step. The revision is the loop's cache key
without its step count (``keys``: its body, states, what it reads, its
evaluation and stopping rules): a checkpoint of another revision is never
used, and the run says what changed (the revision's parts are kept in the
checkpoint's header). What the rest of the loop depends on is all here or a
function of the step: the minibatch order (seed and epoch), random draws
(seed and step). So a run with more steps continues from a shorter run's
checkpoints, and one with fewer never uses a checkpoint past its last step
(it would hand back a later state). A checkpoint is written at the last step
too, unless the loop evaluates there only because it is the last (a longer
run would not have: it could not go on from it).

Files. ``<root>/<loop>/<revision16>-<step>.npz``: NumPy, no pickle, written
atomically, a header with the revision, its parts, the step, the names of
what it holds, the spec's parameters and a SHA-256 of its arrays' bytes. A
file is used only if it reads, its checksum holds, and what it says agrees
with its name and with the loop (:class:`Expected`: states' dtypes and
shapes, one series value per step, evaluations at the loop's evaluation
steps); otherwise it is named in a warning and the next older one is tried.
Pruning keeps the newest ``keep`` of the revision being written up to the
loop's last step; files past it (a longer run's) and files of other
revisions stay until ``orchestrate checkpoints clear`` removes them.

Temporaries. A file is written to ``.<name>.<host>-<pid>.<random>.tmp``
beside it, then renamed. A writer killed midway leaves its temporary; the
next write into the folder removes the temporaries of ours (that pattern
only) whose process is gone (same host), or that are older than an hour.

State: none between calls but the warnings of the last reads.
"""

from __future__ import annotations

import json
import os
import re
import socket
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from ..atomic import _UMASK
from ..paths import safe_name
from .keys import Key, why_again
from .store import checked_bytes, read_checked

FORMAT = 2
NAME = re.compile(r"([0-9a-f]{16})-(\d{10})\.npz")
# ours: ".<name>.<host>-<pid>.<8 random>.tmp" (and, before pids were named, ".<name>.<8 random>.tmp")
TEMPORARY = re.compile(r"\.([0-9a-f]{16}-\d{10}\.npz)\.(?:([A-Za-z0-9_]+)-(\d+)\.)?[a-z0-9_]{8}\.tmp")
STALE_SECONDS = 3600.0  # a temporary this old is no write under way, whoever made it
HOST = re.sub(r"[^A-Za-z0-9_]", "_", socket.gethostname()) or "host"


@dataclass(frozen=True)
class Snapshot:
    """What a checkpoint holds of a loop at a step."""

    states: Sequence[Any]
    series: Mapping[str, Any]  # step metrics, one value per step so far
    evaluations: Mapping[str, Any]  # evaluation metrics, (step, value) rows so far
    stopping: Mapping[str, Any]  # the stopping rules' state (best value and step, evaluations waited)
    best: Sequence[Any] = ()  # the best evaluation's states (restore_best), when there is one


@dataclass(frozen=True)
class Saved:
    """One checkpoint as read back."""

    step: int
    states: tuple[np.ndarray, ...]
    series: Mapping[str, np.ndarray]
    evaluations: Mapping[str, np.ndarray]
    stopping: Mapping[str, Any]
    path: str
    best: tuple[np.ndarray, ...] = ()
    header: Mapping[str, Any] = field(default_factory=dict)  # what else the writer said (its steps, params)


@dataclass(frozen=True)
class Expected:
    """What a checkpoint must hold to be used for a loop as it is now."""

    steps: int  # the loop's steps: a checkpoint past the last one is not used
    states: tuple[tuple[str, tuple[int, ...] | None, str | None], ...]  # name, shape, dtype (None: not known)
    series: tuple[str, ...]
    evaluations: tuple[str, ...] = ()
    every: int = 0  # the evaluations' interval
    judged: bool = False  # stopping rules: their state counts the evaluations

    def usable(self, step: int) -> bool:
        """A checkpoint at ``step`` can be gone on from: before the last step, or at it unless the loop
        evaluates there only because it is its last (the run that wrote it, longer, did not)."""
        return step < self.steps or (step == self.steps and (not self.every or step % self.every == 0))


@dataclass
class Checkpoints:
    directory: str  # the root: a loop's checkpoints are in <directory>/<loop>/
    warnings: list[str] = field(default_factory=list)
    past: list[int] = field(default_factory=list)  # steps of the last latest() past what the loop can use

    def folder(self, loop: str) -> str:
        return os.path.join(self.directory, safe_name(loop))

    def files(self, loop: str) -> list[tuple[str, int, str]]:
        """(revision prefix, step, path) of every checkpoint file of ``loop``, newest step first."""
        return sorted(_named(self.folder(loop)), key=lambda f: -f[1])

    def save(self, loop: str, key: Key, step: int, snapshot: Snapshot, keep: int, last: int,
             header: Mapping[str, Any] | None = None) -> str:
        """Write the checkpoint of ``loop`` at ``step`` atomically; prune this revision's older ones up to the
        loop's ``last`` step (those past it are a longer run's, which this run could not write again). Its path."""
        arrays: dict[str, np.ndarray] = {f"s{i}": np.asarray(v) for i, v in enumerate(snapshot.states)}
        arrays.update({f"m{i}": np.asarray(v) for i, v in enumerate(snapshot.series.values())})
        arrays.update({f"e{i}": np.asarray(v) for i, v in enumerate(snapshot.evaluations.values())})
        arrays.update({f"b{i}": np.asarray(v) for i, v in enumerate(snapshot.best)})
        written = {**(header or {}), "format": FORMAT, "key": key.key, "parts": dict(key.parts), "loop": loop,
                   "step": step, "states": len(snapshot.states), "best": len(snapshot.best),
                   "series": list(snapshot.series), "evaluations": list(snapshot.evaluations),
                   "stopping": dict(snapshot.stopping), "created": time.time()}
        path = os.path.join(self.folder(loop), f"{key.key[:16]}-{step:010d}.npz")
        write_tagged(path, checked_bytes(written, arrays))
        mine = [f for f in self.files(loop) if f[0] == key.key[:16] and f[1] <= last]
        for _, _, old in mine[keep:]:
            try:
                os.unlink(old)
            except OSError:
                pass  # another run pruned it first
        return path

    def latest(self, loop: str, key: Key, expected: Expected) -> tuple[Saved | None, str]:
        """The newest checkpoint of ``loop``'s revision ``key`` up to its last step that reads, checks and
        agrees with ``expected``; else None and why not."""
        files = self.files(loop)
        mine = [f for f in files if f[0] == key.key[:16]]
        self.past = sorted(step for _, step, _ in mine if not expected.usable(step))
        for _, step, path in mine:
            if expected.usable(step):
                saved = self._read(path, loop, key, step, expected)
                if saved is not None:
                    return saved, ""
        if self.past:
            return None, unused(self.past, expected.steps)
        others = [f for f in files if f[0] != key.key[:16]]
        if mine:
            return None, "no checkpoint of it could be used"
        if others:
            parts = header_of(others[0][2]).get("parts")
            changed = why_again(parts if isinstance(parts, dict) else None, key.parts, True)
            return None, f"its checkpoint at step {others[0][1]} is of another revision of the loop ({changed})"
        return None, "no checkpoint of it"

    def _read(self, path: str, loop: str, key: Key, step: int, expected: Expected) -> Saved | None:
        try:
            header, arrays, intact = read_checked(path)
        except Exception as exc:  # any unreadable file: it is not used, whatever went wrong
            self.warnings.append(f"checkpoint of '{loop}' is unreadable and was not used ({type(exc).__name__}: "
                                 f"{exc}): {path}")
            return None
        if header.get("format") != FORMAT or header.get("key") != key.key or header.get("loop") != loop:
            self.warnings.append(f"checkpoint of '{loop}' belongs to another key or format and was not used: {path}")
            return None
        if not intact:
            self.warnings.append(f"checkpoint of '{loop}' does not match its checksum (corrupted) and was not "
                                 f"used: {path}")
            return None
        try:
            saved = _saved(header, arrays, path)
            problem = _disagreement(saved, step, expected)
        except (KeyError, TypeError, ValueError) as exc:  # a header that does not say what it holds
            problem = f"its header does not match its arrays ({type(exc).__name__}: {exc})"
        if problem is not None:
            self.warnings.append(f"checkpoint of '{loop}' at step {step} does not agree with the loop ({problem}) "
                                 f"and was not used: {path}")
            return None
        return saved

    def clean(self, loop: str) -> list[tuple[str, int]]:
        """Remove the stale temporaries of ``loop``'s folder; (path, bytes) of each removed."""
        removed = []
        for path in stale_temporaries(self.folder(loop)):
            try:
                size = os.path.getsize(path)
                os.unlink(path)
            except OSError:
                continue  # gone already, or not ours to remove
            removed.append((path, size))
        return removed


def unused(steps: Sequence[int], last: int) -> str:
    """Why checkpoints at ``steps`` are not gone on from by a loop of ``last`` steps (a longer run wrote them)."""
    after = [step for step in steps if step > last]
    said = []
    if after:
        many = len(after) > 1
        said.append(f"its checkpoint{'s' if many else ''} at step{'s' if many else ''} {', '.join(map(str, after))} "
                    f"{'are' if many else 'is'} past its last step ({last}): a run of more steps wrote "
                    f"{'them' if many else 'it'}")
    if last in steps:
        said.append(f"its checkpoint at step {last}, its last, lacks the evaluation the loop makes there")
    return "; ".join(said)


def _saved(header: Mapping[str, Any], arrays: Mapping[str, np.ndarray], path: str) -> Saved:
    states = tuple(arrays[f"s{i}"] for i in range(int(header["states"])))
    series = {str(name): arrays[f"m{i}"] for i, name in enumerate(header["series"])}
    evaluations = {str(name): arrays[f"e{i}"] for i, name in enumerate(header["evaluations"])}
    best = tuple(arrays[f"b{i}"] for i in range(int(header.get("best", 0))))
    stopping = header.get("stopping") or {}
    if not isinstance(stopping, dict):
        raise TypeError("its stopping state is not a mapping")
    return Saved(int(header["step"]), states, series, evaluations, dict(stopping), path, best, dict(header))


def _disagreement(saved: Saved, step: int, expected: Expected) -> str | None:
    """What in a checkpoint disagrees with its file name or the loop; None when nothing does."""
    if saved.step != step:
        return f"its header says step {saved.step}, its name step {step}"
    if len(saved.states) != len(expected.states):
        return f"it holds {len(saved.states)} states, the loop has {len(expected.states)}"
    for kept in (saved.states, saved.best):
        for value, (name, shape, dtype) in zip(kept, expected.states):
            if dtype is not None and value.dtype != np.dtype(dtype):
                return f"state '{name}' is {value.dtype}, the loop's is {np.dtype(dtype)}"
            if shape is not None and tuple(value.shape) != tuple(shape):
                return f"state '{name}' has shape {list(value.shape)}, the loop's {list(shape)}"
    if saved.best and len(saved.best) != len(expected.states):
        return f"it holds {len(saved.best)} best states, the loop has {len(expected.states)}"
    if sorted(saved.series) != sorted(expected.series):
        return f"its metric series are {sorted(saved.series)}, the loop's {sorted(expected.series)}"
    for name, values in saved.series.items():
        if values.shape != (step,):
            return f"series '{name}' holds {values.size} values, and a checkpoint at step {step} holds {step}"
    if sorted(saved.evaluations) != sorted(expected.evaluations):
        return f"its evaluations are {sorted(saved.evaluations)}, the loop's {sorted(expected.evaluations)}"
    at = list(range(expected.every, step + 1, expected.every)) if expected.every else []
    for name, rows in saved.evaluations.items():
        if rows.ndim != 2 or rows.shape[1:] != (2,) or rows[:, 0].tolist() != at:
            return f"evaluation '{name}' is not one (step, value) row per evaluation step up to {step}"
    judged = saved.stopping.get("judged")
    if expected.judged and at and judged != len(at):
        return f"its stopping state judged {judged} evaluations, and there were {len(at)}"
    return None


def _named(folder: str) -> list[tuple[str, int, str]]:
    found = []
    for name in os.listdir(folder) if os.path.isdir(folder) else ():
        match = NAME.fullmatch(name)
        if match:
            found.append((match.group(1), int(match.group(2)), os.path.join(folder, name)))
    return found


def header_of(path: str) -> dict[str, Any]:
    """A checkpoint's header alone (its arrays are not read); {} when it cannot be read."""
    try:
        with np.load(path, allow_pickle=False) as archive:
            header = json.loads(str(archive["header"]))
        return header if isinstance(header, dict) else {}
    except Exception:  # unreadable: no header to say anything with
        return {}


def write_tagged(path: str, data: bytes) -> None:
    """``data`` to ``path`` through a temporary named for this host and process, renamed into place."""
    folder, name = os.path.split(path)
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.{HOST}-{os.getpid()}.", suffix=".tmp", dir=folder)
    try:
        os.fchmod(fd, 0o666 & ~_UMASK)  # as a plain open() would make it (mkstemp's are 0600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def stale_temporaries(folder: str, now: float | None = None) -> list[str]:
    """The temporaries of our checkpoint writes in ``folder`` that no write is under way for: their process
    (named in them, on this host) is gone, or they are older than :data:`STALE_SECONDS`."""
    now = time.time() if now is None else now
    stale = []
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else ():
        match = TEMPORARY.fullmatch(name)
        if match is None:
            continue
        path = os.path.join(folder, name)
        try:
            old = now - os.path.getmtime(path) > STALE_SECONDS
        except OSError:
            continue
        if old or (match.group(2) == HOST and not _alive(int(match.group(3)))):
            stale.append(path)
    return stale


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: alive
        return True
    return True
