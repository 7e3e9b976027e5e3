"""The worker plugin that gives every device worker its runtime (backend, records)."""

from __future__ import annotations

import hashlib
from typing import Any, Mapping

from distributed import WorkerPlugin, get_worker

from .. import tasks
from ..backends import DeviceConfig


class DeviceRuntimePlugin(WorkerPlugin):
    """Gives each worker the backend of its device (by worker name), and ``tasks`` its worker lookup."""

    name = "orchestrator-device-runtime"
    idempotent = False

    def __init__(self, configs: Mapping[str, DeviceConfig]):
        self.configs = dict(configs)

    def plugin_name(self) -> str:
        """``orchestrator-runtime-<digest of the device configurations>``: equal clusters share one name."""
        digest = hashlib.sha256(repr(sorted(self.configs.items())).encode()).hexdigest()[:12]
        return f"orchestrator-runtime-{digest}"

    def setup(self, worker: Any) -> None:
        tasks.bind(get_worker)
        config = self.configs.get(str(worker.name))
        if config is None:
            return  # not a device of this cluster (another spec's, on a shared scheduler): leave it be
        existing = getattr(worker, tasks.RUNTIME_ATTRIBUTE, None)
        if existing is not None and existing.config == config:
            return  # keep the allocator's accounting across runs on a kept-alive cluster
        setattr(worker, tasks.RUNTIME_ATTRIBUTE, tasks.Runtime.for_device(config))

    def teardown(self, worker: Any) -> None:
        pass
