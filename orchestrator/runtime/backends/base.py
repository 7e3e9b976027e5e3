"""What a worker knows about its device, and what every backend offers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Protocol


@dataclass(frozen=True)
class DeviceConfig:
    """What a worker needs to know about the device it stands for (picklable)."""

    name: str
    kind: str  # "CPU" | "GPU"
    backend: str  # a key of BACKENDS: "host" | "simulated" | "cupy" | ...
    memory_limit: int | None = None
    reserve_at_start: bool = False
    physical_gpu: int | str | None = None  # a CUDA ordinal or a GPU/MIG UUID
    backend_path: str = ""  # its class, ``module:Class``, as the client's registry says ("": the worker's)
    worker: str = ""  # the Dask worker standing for it when not its own: its task's (``processes: host``)
    ordinal: int = 0  # its CUDA ordinal in the worker's process (> 0 only where a task's GPUs share one process)


class Backend(Protocol):
    name: str
    xp: Any
    # to_device gives back as it is an input execute() handed the kernel (adopted by this device, or any value
    # of a host device): call may then skip it. A backend without it (False), or a subclass whose to_device
    # does more, has each input passed through it.
    keeps_adopted: bool

    def to_device(self, value: Any, op: str) -> Any: ...
    def to_host(self, value: Any) -> Any: ...
    def adopt(self, value: Any, op: str) -> Any: ...
    def execute(self, op: str, fn: Callable[[], Any]) -> Any: ...
    def stats(self) -> dict[str, int | str | None]: ...
