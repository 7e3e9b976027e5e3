"""The host backend: a CPU device. NumPy arrays; memory is Dask's to account (the worker's limit)."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from .base import DeviceConfig


class HostBackend:
    name = "host"
    keeps_adopted = True
    xp = np

    def __init__(self, config: DeviceConfig):
        self.config = config

    def to_device(self, value: Any, op: str) -> Any:
        return value

    def to_host(self, value: Any) -> Any:
        return value

    def adopt(self, value: Any, op: str) -> Any:
        return value

    def execute(self, op: str, fn: Callable[[], Any]) -> Any:
        return fn()

    def stats(self) -> dict[str, int | str | None]:
        return {"backend": self.name}
