"""Device backends: where a worker keeps its arrays and how its memory is capped.

A backend is chosen per device by name from :data:`BACKENDS`:

* ``host``: a CPU device; NumPy arrays, Dask's own worker memory limit.
* ``simulated``: a GPU device played by a worker process with NumPy arrays
  and an enforced memory cap (:mod:`.simulated`).
* ``cupy``: a real CUDA GPU (:mod:`.cupy`, the only module importing cupy,
  imported only when a worker needs it).

How to add one: a class following :class:`Backend`, and its name in
:data:`BACKENDS` (a ``module:Class`` path, imported on the worker that
needs it); ``gpu_backend:`` in the spec's schema lists the names users may
choose (docs/extending.md).
"""

from __future__ import annotations

import importlib
from typing import Mapping

from .base import Backend, DeviceConfig


BACKENDS: Mapping[str, str] = {
    "host": "orchestrator.backends.host:HostBackend",
    "simulated": "orchestrator.backends.simulated:SimulatedGPUBackend",
    "cupy": "orchestrator.backends.cupy:CupyBackend",
}
"""Backend classes by name, as import paths: a worker imports only the one it uses."""


def make_backend(config: DeviceConfig) -> Backend:
    module, _, name = BACKENDS[config.backend].partition(":")
    backend: Backend = getattr(importlib.import_module(module), name)(config)
    return backend


def cuda_device_count() -> int:
    """How many CUDA GPUs this process can see (0 when CuPy or CUDA is missing)."""
    from .cupy import cuda_device_count as count

    return count()


__all__ = ["BACKENDS", "Backend", "DeviceConfig", "cuda_device_count", "make_backend"]
