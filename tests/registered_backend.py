"""A GPU backend that lives outside the package: tests/test_backends.py registers it with one registry entry.

Its workers import it by the path the client's registry gives (``registered_backend:TracingBackend``).
:class:`DeviceOnlyBackend` carries what CuPy's arrays do to a run: a device array
sent to a process without a GPU cannot be rebuilt there.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
from distributed.protocol import dask_deserialize, dask_serialize
from distributed.protocol.numpy import deserialize_numpy_ndarray, serialize_numpy_ndarray

from orchestrator.runtime.backends.simulated import SimulatedGPUBackend


class TracingBackend(SimulatedGPUBackend):
    """The simulated GPU under a name of its own: the run report shows which backend each worker ran."""

    name = "tracing"


class DeviceArray(np.ndarray):
    """An array that lives on a GPU, as a CuPy array does: Dask rebuilds it on a receiver only where there is one."""


@dask_serialize.register(DeviceArray)
def _send(array: DeviceArray) -> tuple[dict[str, Any], list[Any]]:
    return serialize_numpy_ndarray(np.asarray(array))


@dask_deserialize.register(DeviceArray)
def _receive(header: dict[str, Any], frames: list[Any]) -> DeviceArray:
    # CuPy's deserializer copies the frames into device memory: a process without a GPU cannot
    if os.environ.get("CUDA_VISIBLE_DEVICES") == "":
        raise RuntimeError("a device array reached a process without a GPU")
    return deserialize_numpy_ndarray(header, frames).view(DeviceArray)


class DeviceOnlyBackend(SimulatedGPUBackend):
    """The simulated GPU whose arrays, like CuPy's, cannot be rebuilt in a process without a GPU."""

    name = "device-only"

    def adopt(self, value: Any, op: str) -> Any:
        if isinstance(value, tuple):
            return tuple(self.adopt(v, op) for v in value)
        return super().adopt(np.asarray(value).view(DeviceArray), op)

    def to_host(self, value: Any) -> Any:
        if isinstance(value, tuple):
            return tuple(self.to_host(v) for v in value)
        return np.asarray(value)
