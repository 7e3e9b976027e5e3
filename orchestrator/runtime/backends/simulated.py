"""The simulated GPU: a worker process with NumPy arrays and an enforced memory cap.

Every array an op produces (or receives) is charged to an accounting
allocator that enforces the device's limit and raises the same
out-of-memory error a real GPU would; a fixed limit without ``growth`` is
reserved at start, as TF does. Memory is given back when the array is
garbage-collected (``weakref.finalize``), i.e. when Dask releases the key
or a partition drops its last reference.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any, Callable

import numpy as np

from ...errors import DeviceOutOfMemory
from .base import DeviceConfig


class SimulatedGPUBackend:
    """NumPy arrays on a GPU worker, with an enforced memory cap."""

    name = "simulated"
    xp = np

    def __init__(self, config: DeviceConfig):
        self.config = config
        self.limit = config.memory_limit
        self.in_use = 0
        self.peak = 0
        self.reserved = config.memory_limit if config.reserve_at_start else 0
        self._tracked: dict[int, weakref.finalize[Any, Any]] = {}
        self._lock = threading.Lock()

    def to_device(self, value: Any, op: str) -> Any:
        if isinstance(value, np.ndarray):
            with self._lock:
                finalizer = self._tracked.get(id(value))
                if finalizer is not None and finalizer.alive:  # already this device's: as cupy.asarray, no copy
                    return value
        return self.adopt(np.array(value, copy=True), op)

    def to_host(self, value: Any) -> Any:
        return value

    def adopt(self, value: Any, op: str) -> Any:
        """Charge ``value`` to this device once; tuples are charged element by element."""
        if isinstance(value, tuple):
            return tuple(self.adopt(v, op) for v in value)
        if not isinstance(value, np.ndarray):
            value = np.asarray(value)
        key = id(value)
        with self._lock:
            if key in self._tracked and self._tracked[key].alive:
                return value
            size = int(value.nbytes)
            if self.limit is not None and self.in_use + size > self.limit:
                raise DeviceOutOfMemory(self.config.name, op, size, self.in_use, self.limit)
            self.in_use += size
            self.peak = max(self.peak, self.in_use)
            self._tracked[key] = weakref.finalize(value, self._release, key, size)
        return value

    def execute(self, op: str, fn: Callable[[], Any]) -> Any:
        return self.adopt(fn(), op)

    def _release(self, key: int, size: int) -> None:
        with self._lock:
            self.in_use -= size
            self._tracked.pop(key, None)

    def stats(self) -> dict[str, int | str | None]:
        return {"backend": self.name, "in_use": self.in_use, "peak": self.peak, "limit": self.limit,
                "reserved": self.reserved}
