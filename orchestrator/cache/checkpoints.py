"""Checkpoints of a loop: its carried states, metric series, evaluations and stopping state at a step.

Policy. A checkpoint is written by the client every ``every`` steps of a
loop that asks for them (``iterate: checkpoint``), whatever the run's cache
settings; ``run --resume`` reads the newest one of the loop's current key
and continues from its step. The key is the loop's cache key (its body,
steps, states, what it reads, its evaluation and stopping rules): a
checkpoint of another revision of the loop is never used, and the run says
what changed (the key's parts are kept in the checkpoint's header). What
the rest of the loop depends on is all here or a function of the step: the
minibatch order (seed and epoch), random draws (seed and step).

Files. ``checkpoints/<spec>/<loop>/<key16>-<step>.npz``: NumPy, no pickle,
written atomically, a header with the key, its parts, the step, the names
of what it holds and a SHA-256 of its arrays' bytes, checked on reading as
cache entries are (a file that fails is named in a warning and the next
older one is tried). The newest ``keep`` of the current key are kept; files
of another key are removed once the current key has one.

State: none between calls but the warnings of the last reads.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from .store import Key, read_checked, why_again, write_checked

FORMAT = 1


@dataclass(frozen=True)
class Saved:
    """One checkpoint as read back."""

    step: int
    states: tuple[np.ndarray, ...]
    series: Mapping[str, np.ndarray]  # step metrics, one value per step so far
    evaluations: Mapping[str, np.ndarray]  # evaluation metrics, (step, value) rows so far
    stopping: Mapping[str, Any]  # the stopping rules' state (best value and step, evaluations waited)
    path: str
    best: tuple[np.ndarray, ...] = ()  # the best evaluation's states (restore_best), when there is one


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


@dataclass
class Checkpoints:
    directory: str  # the checkpoints of one spec: <root>/checkpoints/<spec>
    warnings: list[str] = field(default_factory=list)

    @classmethod
    def under(cls, root: str, spec_name: str) -> Checkpoints:
        return cls(os.path.join(root, "checkpoints", _safe(spec_name)))

    def _folder(self, loop: str) -> str:
        return os.path.join(self.directory, _safe(loop))

    def _files(self, loop: str) -> list[tuple[str, int, str]]:
        """(key prefix, step, path) of every checkpoint file of ``loop``, newest step first."""
        folder = self._folder(loop)
        found = []
        for name in os.listdir(folder) if os.path.isdir(folder) else ():
            match = re.fullmatch(r"([0-9a-f]{16})-(\d{10})\.npz", name)
            if match:
                found.append((match.group(1), int(match.group(2)), os.path.join(folder, name)))
        return sorted(found, key=lambda f: -f[1])

    def save(self, loop: str, key: Key, step: int, states: Sequence[Any], series: Mapping[str, Any],
             evaluations: Mapping[str, Any], stopping: Mapping[str, Any], keep: int, best: Sequence[Any] = ()) -> str:
        """Write the checkpoint of ``loop`` at ``step`` atomically; prune older ones. Its path."""
        arrays: dict[str, np.ndarray] = {f"s{i}": np.asarray(v) for i, v in enumerate(states)}
        arrays.update({f"m{i}": np.asarray(v) for i, v in enumerate(series.values())})
        arrays.update({f"e{i}": np.asarray(v) for i, v in enumerate(evaluations.values())})
        arrays.update({f"b{i}": np.asarray(v) for i, v in enumerate(best)})
        header = {"format": FORMAT, "key": key.key, "parts": dict(key.parts), "loop": loop, "step": step,
                  "states": len(states), "best": len(best), "series": list(series), "evaluations": list(evaluations),
                  "stopping": dict(stopping), "created": time.time()}
        path = os.path.join(self._folder(loop), f"{key.key[:16]}-{step:010d}.npz")
        write_checked(path, header, arrays)
        mine = [f for f in self._files(loop) if f[0] == key.key[:16]]
        for _, _, old in mine[keep:] + [f for f in self._files(loop) if f[0] != key.key[:16]]:
            try:
                os.unlink(old)
            except OSError:
                pass  # another run pruned it first
        return path

    def latest(self, loop: str, key: Key) -> tuple[Saved | None, str]:
        """The newest checkpoint of ``loop`` under ``key`` that reads and checks; else None and why not."""
        files = self._files(loop)
        for prefix, _, path in files:
            if prefix == key.key[:16]:
                saved = self._read(path, loop, key)
                if saved is not None:
                    return saved, ""
        others = [f for f in files if f[0] != key.key[:16]]
        if others:
            parts = self._header(others[0][2]).get("parts")
            changed = why_again(parts if isinstance(parts, dict) else None, key.parts, True)
            return None, f"its checkpoint at step {others[0][1]} is of another revision of the loop ({changed})"
        if files:
            return None, "no checkpoint of it could be read"
        return None, "no checkpoint of it"

    def _header(self, path: str) -> dict[str, Any]:
        try:
            return read_checked(path)[0]
        except Exception:  # unreadable: no header to say anything with
            return {}

    def _read(self, path: str, loop: str, key: Key) -> Saved | None:
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
        states = tuple(arrays[f"s{i}"] for i in range(int(header["states"])))
        series = {name: arrays[f"m{i}"] for i, name in enumerate(header["series"])}
        evaluations = {name: arrays[f"e{i}"] for i, name in enumerate(header["evaluations"])}
        best = tuple(arrays[f"b{i}"] for i in range(int(header.get("best", 0))))
        return Saved(int(header["step"]), states, series, evaluations, dict(header.get("stopping") or {}), path, best)
