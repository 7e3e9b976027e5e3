"""The worker plugin that gives every device worker its runtime (backend, records, mailbox).

It also hands ``tasks`` what it may not import itself: the worker lookup
(``distributed.get_worker``) and the courier that sends a loop window's
values to another device's worker over Dask's comms (TCP or TLS, as the
cluster is configured), addressed by the device's name.
"""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any, Mapping, Sequence

from distributed import WorkerPlugin, get_worker
from distributed.protocol.serialize import to_serialize

from .. import tasks
from ..backends import DeviceConfig
from ..errors import RunError

EXCHANGE_HANDLER = "orchestrator_exchange"


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
        tasks.bind_courier(send)
        config = self.configs.get(str(worker.name))
        if config is None:
            return  # not a device of this cluster (another spec's, on a shared scheduler): leave it be
        existing = getattr(worker, tasks.RUNTIME_ATTRIBUTE, None)
        if existing is None or existing.config != config:  # else keep its accounting across runs (--keep-alive)
            setattr(worker, tasks.RUNTIME_ATTRIBUTE, tasks.Runtime.for_device(config))
        runtime = getattr(worker, tasks.RUNTIME_ATTRIBUTE)

        async def receive(run: str, items: Sequence[tuple[Sequence[Any], Any]]) -> None:
            runtime.mailbox.put(run, items)

        worker.handlers[EXCHANGE_HANDLER] = receive

    def teardown(self, worker: Any) -> None:
        pass


def send(worker: Any, device: str, run: str, items: Sequence[tuple[tasks.Tag, Any]]) -> Any:
    """Send values to the worker standing for ``device`` (from a task's thread); a future of the delivery."""
    payload = [(list(tag), to_serialize(value)) for tag, value in items]
    return asyncio.run_coroutine_threadsafe(_deliver(worker, device, run, payload), worker.loop.asyncio_loop)


async def _deliver(worker: Any, device: str, run: str, payload: list[Any]) -> None:
    for attempt in range(2):  # a restarted worker has a new address: look it up once more
        address = await _address(worker, device, refresh=attempt > 0)
        try:
            await worker.rpc(address).orchestrator_exchange(run=run, items=payload)
            return
        except OSError:
            if attempt:
                raise
    raise AssertionError("unreachable")


async def _address(worker: Any, device: str, refresh: bool) -> str:
    book: dict[str, str] = worker.__dict__.setdefault("orchestrator_addresses", {})
    if refresh or device not in book:
        identity = await worker.scheduler.identity()
        book.clear()
        book.update({str(w.get("name")): address for address, w in identity.get("workers", {}).items()})
    if device not in book:
        raise RunError(f"no worker stands for {device}: cannot send it the values it reads")
    return book[device]
