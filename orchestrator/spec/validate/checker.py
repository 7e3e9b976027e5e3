"""The collector every semantic check reports to, with the value readers they share."""

from __future__ import annotations

import math
from typing import Any

from dask.utils import parse_bytes

from ...devices import DeviceSpec
from ...errors import DeviceSpecError, Diagnostic, YamlPath
from ..records import Document
from .schema import finite_problem, short, show

MAX_SIZE = 2**63 - 1
"""The largest memory size (and array size in bytes) anything downstream can hold: NumPy's and Dask's limit."""


class Checker:
    """Collects the diagnostics of one document, with the helpers every check uses."""

    def __init__(self, doc: Document):
        self.doc = doc
        self.diags: list[Diagnostic] = []
        # Rules already warned about for naming an unknown op type: "matches no
        # op" would only repeat that warning less precisely.
        self.rules_with_unknown_ops: set[int] = set()
        # Set when the cluster or the graph is too big to build: later checks would take forever.
        self.too_big = False

    def error(self, code: str, path: YamlPath, message: str, hint: str = "", key: bool = False) -> None:
        self.diags.append(self.doc.diagnostic(code, path, message, hint, "error", key))

    def warn(self, code: str, path: YamlPath, message: str, hint: str = "", key: bool = False) -> None:
        self.diags.append(self.doc.diagnostic(code, path, message, hint, "warning", key))

    def size(self, value: Any, path: YamlPath) -> int | None:
        """Bytes of a size (a number, or text for dask's parse_bytes); None, with an error, when unusable."""
        if value is None:
            return None
        if isinstance(value, int) and not isinstance(value, bool):
            size = value
        elif isinstance(value, float):  # 2e9: a float in YAML 1.2
            if not math.isfinite(value):
                self.error("size", path, *finite_problem(str(path[-1]), value))
                return None
            if not value.is_integer():
                self.error("size", path, f"{show(value)} is not a whole number of bytes",
                           "write e.g. 512MB, 2GiB or a number of bytes")
                return None
            size = int(value)
        else:
            try:
                size = int(parse_bytes(str(value)))
            except (ValueError, TypeError, OverflowError):  # OverflowError: '1e400' is infinite bytes
                self.error("size", path, f"cannot read {show(value)} as a size",
                           "write e.g. 512MB, 2GiB or a number of bytes")
                return None
        if size > MAX_SIZE:
            self.error("size", path, f"{short(value)} is larger than any memory (8 EiB at most)",
                       "write e.g. 512MB, 2GiB or a number of bytes")
            return None
        if size <= 0:
            # Dask reads memory_limit 0 as "no limit"; a user writing 0 or a
            # negative size more likely made a slip, and leaving it out says "no limit".
            self.error("size", path, f"must be a positive size, got {show(value)}",
                       f"e.g. 2GiB; leave {path[-1]} out for no limit" if path[-1] != "total" else "e.g. 16GiB")
            return None
        return size

    def seconds(self, value: Any, path: YamlPath) -> float | None:
        """A duration the schema checked is a positive number; None, with an error, for .inf and .nan.

        An infinite timeout would silently mean "no timeout", and NaN compares
        false with every elapsed time: both are slips, and leaving the key out
        says "no limit" (or the default).
        """
        if value is None:
            return None
        if not math.isfinite(value):
            self.error("duration", path, *finite_problem(str(path[-1]), value))
            return None
        return float(value)

    def device(self, text: Any, path: YamlPath) -> DeviceSpec | None:
        try:
            return DeviceSpec.parse(str(text))
        except DeviceSpecError as exc:
            self.error("device-syntax", path, str(exc), "write /job:NAME/task:N/device:CPU:0, /gpu:1 or GPU:1")
            return None
