"""Device backends: where a worker keeps its arrays and how its memory is capped.

A backend is chosen per device by name from :data:`BACKENDS`
(``orchestrator.backend_registry``, the one place that knows them):

* ``host``: a CPU device; NumPy arrays, Dask's own worker memory limit.
* ``simulated``: a GPU device played by a worker process with NumPy arrays
  and an enforced memory cap (:mod:`.simulated`).
* ``cupy``: a real CUDA GPU (:mod:`.cupy`, the only module importing cupy,
  imported only when a worker needs it).

How to add one: a class following :class:`Backend`, and a
:class:`BackendEntry` in :data:`BACKENDS` (its class as a ``module:Class``
path, imported on the worker that needs it). The spec's
``cluster.gpu_backend``, ``run --gpu-backend``, the choice of ``auto`` and
the copy of outputs to the host all read the entry (docs/extending.md).
"""

from __future__ import annotations

import importlib

from ...backend_registry import (
    AUTO,
    BACKENDS,
    BackendEntry,
    backend_entry,
    fallback_gpu_backend,
    gpu_backend_names,
    gpu_backend_problem,
    hardware_gpu_backend,
)
from .base import Backend, DeviceConfig


def make_backend(config: DeviceConfig) -> Backend:
    # the client names the class: a backend registered in its process only still reaches the workers
    module, _, name = (config.backend_path or backend_entry(config.backend).path).partition(":")
    backend: Backend = getattr(importlib.import_module(module), name)(config)
    return backend


def cuda_device_count() -> int:
    """How many CUDA GPUs this process can see (0 when CuPy or CUDA is missing)."""
    from .cupy import cuda_device_count as count

    return count()


__all__ = ["AUTO", "BACKENDS", "Backend", "BackendEntry", "DeviceConfig", "backend_entry", "cuda_device_count",
           "fallback_gpu_backend", "gpu_backend_names", "gpu_backend_problem", "hardware_gpu_backend",
           "make_backend"]
