"""Device backends: where a worker keeps its arrays and how its memory is capped.

A backend is chosen per device by name from :data:`BACKENDS`, the one place
that knows them:

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
from dataclasses import dataclass
from typing import Mapping

from .base import Backend, DeviceConfig


@dataclass(frozen=True)
class BackendEntry:
    """A backend as the client knows it, without importing it."""

    name: str
    path: str  # its class as ``module:Class``: a worker imports only the one it uses
    gpu: bool = True  # it stands for GPU devices: the spec's gpu_backend and --gpu-backend offer it
    hardware: bool = False  # real CUDA GPUs: chosen (or allowed) only when enough are counted where GPU workers run
    host_outputs: bool = False  # its arrays live on the device: copied to the host before the client fetches them
    about: str = ""  # one line for users: what choosing it means


BACKENDS: Mapping[str, BackendEntry] = {
    "host": BackendEntry("host", "orchestrator.backends.host:HostBackend", gpu=False,
                         about="a CPU device: NumPy arrays"),
    "simulated": BackendEntry("simulated", "orchestrator.backends.simulated:SimulatedGPUBackend",
                              about="NumPy arrays on GPU worker processes, with enforced memory caps"),
    "cupy": BackendEntry("cupy", "orchestrator.backends.cupy:CupyBackend", hardware=True, host_outputs=True,
                         about="arrays on real CUDA GPUs"),
}
"""Backends by name, in the order ``auto`` considers them."""

AUTO = "auto"
"""Not a backend: the first hardware GPU backend when enough CUDA GPUs are counted, else the first other one."""


def gpu_backend_names() -> tuple[str, ...]:
    """What ``cluster.gpu_backend`` and ``--gpu-backend`` accept: ``auto``, then every GPU backend."""
    return (AUTO, *(name for name, entry in BACKENDS.items() if entry.gpu))


def gpu_backend_problem(name: str) -> str | None:
    """Why ``name`` cannot be a GPU backend (naming the ones that can), or None."""
    if name in gpu_backend_names():
        return None
    return f"unknown GPU backend '{name}' (known: {', '.join(gpu_backend_names())})"


def backend_entry(name: str) -> BackendEntry:
    """The entry of a backend; an unknown name is an error naming the known ones."""
    entry = BACKENDS.get(name)
    if entry is None:
        raise KeyError(f"unknown backend '{name}' (known: {', '.join(BACKENDS)})")
    return entry


def fallback_gpu_backend() -> BackendEntry:
    """What ``auto`` picks without enough GPUs (and a spec without GPUs runs on): the first GPU backend that
    needs no hardware."""
    return next(entry for entry in BACKENDS.values() if entry.gpu and not entry.hardware)


def hardware_gpu_backend() -> BackendEntry | None:
    """What ``auto`` picks when enough CUDA GPUs are counted: the first hardware GPU backend."""
    return next((entry for entry in BACKENDS.values() if entry.gpu and entry.hardware), None)


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
