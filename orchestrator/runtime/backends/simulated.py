"""The simulated GPU: a worker process with NumPy arrays and an enforced memory cap.

Every array an op produces (or receives) is charged to an accounting
allocator that enforces the device's limit and raises the same
out-of-memory error a real GPU would; a fixed limit without ``growth`` is
reserved at start, as TF does. Memory is given back when the array is
garbage-collected, i.e. when Dask releases the key or a partition drops its
last reference.

State: ``_tracked`` maps ``id(array)`` to the :class:`_Charge` (a weak
reference whose callback gives the bytes back) of each array charged here and
alive. It is read without the lock: an array that is alive cannot share its
id with a dead one, whose charge was removed as it died (the weak reference's
callback runs as the object is freed, before its id can be reused), so a
live charge under a live array's id is that array's. Charging and giving
back take the lock. A weak reference with a callback is what
``weakref.finalize`` keeps underneath, without its registry and bookkeeping:
an op's values are charged each step, so that difference is per op.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any, Callable

import numpy as np

from ...errors import DeviceOutOfMemory
from .base import DeviceConfig

_NDARRAY = np.ndarray


class _Charge(weakref.ref[Any]):
    """One array's charge: a weak reference to it, with the bytes given back when it dies."""

    __slots__ = ("key", "size")
    key: int
    size: int


class SimulatedGPUBackend:
    """NumPy arrays on a GPU worker, with an enforced memory cap."""

    name = "simulated"
    keeps_adopted = True
    xp = np

    def __init__(self, config: DeviceConfig):
        self.config = config
        self.limit = config.memory_limit
        self.in_use = 0
        self.peak = 0
        self.reserved = config.memory_limit if config.reserve_at_start else 0
        self._tracked: dict[int, _Charge] = {}
        self._lock = threading.Lock()

    def _charged(self, value: Any) -> bool:
        charge = self._tracked.get(id(value))
        return charge is not None and charge() is value

    def to_device(self, value: Any, op: str) -> Any:
        if isinstance(value, _NDARRAY) and self._charged(value):  # already this device's: as cupy.asarray, no copy
            return value
        return self.adopt(np.array(value, copy=True), op)

    def to_host(self, value: Any) -> Any:
        return value

    def adopt(self, value: Any, op: str) -> Any:
        """Charge ``value`` to this device once; tuples are charged element by element."""
        if type(value) is _NDARRAY:  # the common case: a value made or received here, charged already
            charge = self._tracked.get(id(value))  # (_charged, without its frame: every input of every op asks)
            return value if charge is not None and charge() is value else self._charge(value, op)
        if isinstance(value, tuple):
            return tuple(self.adopt(v, op) for v in value)
        if not isinstance(value, _NDARRAY):
            value = np.asarray(value)
        elif self._charged(value):  # (a subclass of ndarray)
            return value
        return self._charge(value, op)

    def _charge(self, value: Any, op: str) -> Any:
        # Nothing is allocated under the lock: an allocation may run the garbage collector, which may free
        # another array of this device, whose callback takes the lock (not re-entrant) in this same thread.
        key, size = id(value), int(value.nbytes)
        charge = _Charge(value, self._release)
        charge.key, charge.size = key, size
        with self._lock:
            held = self._tracked.get(key)
            if held is not None and held() is value:  # charged meanwhile, by another thread
                return value
            over = self.limit is not None and self.in_use + size > self.limit
            if not over:
                self.in_use += size
                if self.in_use > self.peak:
                    self.peak = self.in_use
                self._tracked[key] = charge
            in_use = self.in_use
        if over:
            raise DeviceOutOfMemory(self.config.name, op, size, in_use, self.limit or 0)
        return value

    def execute(self, op: str, fn: Callable[[], Any]) -> Any:
        return self.adopt(fn(), op)

    def _release(self, charge: _Charge) -> None:
        with self._lock:
            self.in_use -= charge.size
            if self._tracked.get(charge.key) is charge:
                del self._tracked[charge.key]

    def stats(self) -> dict[str, int | str | None]:
        return {"backend": self.name, "in_use": self.in_use, "peak": self.peak, "limit": self.limit,
                "reserved": self.reserved}
