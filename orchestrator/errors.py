"""Errors and diagnostics.

Every problem a user can cause is reported as a :class:`Diagnostic` that names
the file, line and column, the YAML path, what was wrong and a hint. Exceptions
carry diagnostics; the CLI renders them and never shows a traceback unless
``--debug`` is given.

The exception tree::

    OrchestratorError
     ├── SpecError            the spec is invalid; carries every diagnostic found
     │    └── LoadError       the file cannot be read or parsed as a YAML mapping
     ├── DeviceSpecError      a device string does not parse (ValueError too)
     ├── UsageError           bad command-line usage (exit code 2)
     └── RunError             the run failed after it started
          ├── OpFailedError        an op raised; names op, device and the user's line
          ├── OpTimeoutError       an op exceeded its ``timeout``
          ├── DeviceOutOfMemory    an allocation exceeded a device's memory limit
          ├── NoWorkerError        no worker offers the device an op is pinned to
          ├── DeviceLost           a device's worker was lost during the run (without retries)
          └── PlacementMismatch    an op ran somewhere other than its plan said
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Iterable, Literal, Sequence

Severity = Literal["error", "warning"]
YamlPath = tuple[str | int, ...]


def format_path(path: YamlPath) -> str:
    """Render a YAML path the way users write it: ``graph[2].inputs[0]``."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif out:
            out += f".{part}"
        else:
            out = str(part)
    return out or "<root>"


@dataclass(frozen=True)
class Diagnostic:
    """One problem found in a spec, with everything needed to find and fix it."""

    code: str
    file: str
    line: int
    column: int
    path: YamlPath
    message: str
    hint: str = ""
    severity: Severity = "error"

    @property
    def is_error(self) -> bool:
        return self.severity == "error"

    def render(self) -> str:
        """``file:line:col: path: message (hint)`` — the one text form used everywhere."""
        where = f"{self.file}:{self.line}:{self.column}"
        text = f"{where}: {format_path(self.path)}: {self.message}"
        if self.severity == "warning":
            text = f"{where}: warning: {format_path(self.path)}: {self.message}"
        if self.hint:
            text += f" ({self.hint})"
        return text

    def as_dict(self) -> dict[str, object]:
        return {
            "code": self.code,
            "severity": self.severity,
            "file": self.file,
            "line": self.line,
            "column": self.column,
            "path": format_path(self.path),
            "message": self.message,
            "hint": self.hint,
        }


class OrchestratorError(Exception):
    """Base of every error this package raises on purpose."""


class SpecError(OrchestratorError):
    """The spec is invalid. ``diagnostics`` holds all problems found, errors first."""

    def __init__(self, diagnostics: Sequence[Diagnostic]):
        self.diagnostics = tuple(diagnostics)
        first = self.diagnostics[0].render() if self.diagnostics else "invalid spec"
        more = len(self.diagnostics) - 1
        super().__init__(first + (f" (and {more} more)" if more > 0 else ""))


class LoadError(SpecError):
    """The file cannot be read, decoded or parsed into a YAML mapping."""


class DeviceSpecError(OrchestratorError, ValueError):
    """A device string that does not follow the device grammar."""


class UsageError(OrchestratorError):
    """Bad command-line usage; the CLI exits with code 2."""


class RunError(OrchestratorError):
    """The run failed after it started."""


class DeviceLost(RunError):
    """A device's worker was lost during the run (its process died, or its machine), and the run cannot go on."""

    def __init__(self, device: str, text: str):
        self.device = device
        super().__init__(text)


class OpFailedError(RunError):
    """A user-visible failure of one op: op, device, the exception and its origin line."""

    def __init__(self, op: str, device: str, error: str, origin: str = ""):
        self.op, self.device, self.error, self.origin = op, device, error, origin
        text = f"op '{op}' failed on {device}: {error}"
        if origin:
            text += f"\n  at {origin}"
        super().__init__(text)


class OpTimeoutError(RunError):
    def __init__(self, op: str, device: str, seconds: float):
        self.op, self.device, self.seconds = op, device, seconds
        super().__init__(f"op '{op}' on {device} exceeded its timeout of {seconds:g} s")


class DeviceOutOfMemory(RunError):
    """An allocation would exceed a device's memory limit (real or simulated GPU)."""

    def __init__(self, device: str, op: str, requested: int, in_use: int, limit: int):
        self.device, self.op = device, op
        self.requested, self.in_use, self.limit = requested, in_use, limit
        super().__init__(
            f"OOM when allocating {format_bytes(requested)} for op '{op}' on {device}: "
            f"{format_bytes(in_use)} in use, limit is {format_bytes(limit)}"
        )

    def __reduce__(self) -> tuple[type[DeviceOutOfMemory], tuple[str, str, int, int, int]]:  # worker -> client intact
        return (type(self), (self.device, self.op, self.requested, self.in_use, self.limit))


class NoWorkerError(RunError):
    """No worker offers the device (resource) an op is pinned to."""


class PlacementMismatch(RunError):
    """After the run, an op is found to have run on a worker its plan did not allow."""


def did_you_mean(word: str, candidates: Iterable[str]) -> str:
    """``did you mean 'worker'?`` for the closest candidate, or ``""``: the hint for an unknown name."""
    close = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return f"did you mean '{close[0]}'?" if close else ""


def format_bytes(n: int | float) -> str:
    """Binary units with one decimal, as the memory messages use: ``4.0 MiB``."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


class Terminated(BaseException):
    """SIGTERM (what timeout, Slurm and Kubernetes send): unwinds like Ctrl-C, so every cleanup runs."""
