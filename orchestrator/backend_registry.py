"""The registry of device backends: each one's name, where its class lives, and what choosing it means.

The one place that knows the backends (docs/extending.md): the spec's
``cluster.gpu_backend`` and ``run --gpu-backend`` are checked against it,
``auto`` and the copy of outputs to the host read it, and a worker imports
the class an entry names (``orchestrator.runtime.backends.make_backend``).
It names classes by path and imports none, so checking a spec loads no
backend; it sits below every stage for that reason.

* ``host``: a CPU device; NumPy arrays, Dask's own worker memory limit.
* ``simulated``: a GPU device played by a worker process with NumPy arrays
  and an enforced memory cap.
* ``cupy``: a real CUDA GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping


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
    "host": BackendEntry("host", "orchestrator.runtime.backends.host:HostBackend", gpu=False,
                         about="a CPU device: NumPy arrays"),
    "simulated": BackendEntry("simulated", "orchestrator.runtime.backends.simulated:SimulatedGPUBackend",
                              about="NumPy arrays on GPU worker processes, with enforced memory caps"),
    "cupy": BackendEntry("cupy", "orchestrator.runtime.backends.cupy:CupyBackend", hardware=True, host_outputs=True,
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
