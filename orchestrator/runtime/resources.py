"""Resource names: how a task asks for its device, and what a device's worker offers.

Pinning uses identity resources (restart-proof, unlike worker addresses):
a task pinned to a device asks for ``device:<canonical name>``, which only
the worker standing for that device offers; a task on ``GPU:*`` asks for
``GPU`` and its task's ``task:<job/replica/task>``, and Dask picks the GPU.
"""

from __future__ import annotations

from ..devices import ANY, DeviceSpec
from ..spec.records import Device


def device_resource(name: str) -> str:
    """The identity resource only the worker standing for device ``name`` offers."""
    return f"device:{name}"


def task_resource(spec: DeviceSpec) -> str:
    """The resource every worker of one task offers (``/gpu:*`` ops ask for it with ``GPU``)."""
    return f"task:{spec.task_spec().to_string()}"


def resources_for(device: DeviceSpec) -> dict[str, float]:
    """What a task on ``device`` asks for: that device, or on ``GPU:*`` any GPU of its task."""
    if device.device_index == ANY:
        return {"GPU": 1, task_resource(device): 1}
    return {device_resource(device.to_string()): 1}


def slot_resources(device: DeviceSpec, slots: float) -> dict[str, float]:
    """What a task taking ``slots`` of its pinned device's thread slots asks for (a GPU of several threads)."""
    return {device_resource(device.to_string()): float(slots)}


def worker_resources(device: Device) -> dict[str, float]:
    """What the worker standing for ``device`` offers: one slot per thread of its identity resources."""
    slots = float(device.threads)
    resources = {device_resource(device.name): slots, task_resource(device.spec): slots}
    if device.is_gpu:
        resources["GPU"] = 1.0
    return resources
