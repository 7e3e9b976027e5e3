"""The worker plugin that gives every device worker its runtime (backend, records, mailbox).

A worker standing for several devices (``processes: host``: a machine's or a task's) gets a
runtime per device, each behind a :class:`Seat`: what ``runtime`` sees as
that device's worker. The worker lookup bound into ``runtime``
(:func:`device_worker`) gives a Dask task the seat of the device it is
pinned to, read from the task's own resource restriction (the identity
resource compile gave it), never from a name; so each op is charged,
capped, timed out, recorded and logged on its device as in a worker of its
own. A loop window of the process's devices is one task whose thread runs
them all and hands their values over by reference (``runtime.groups``).

A host worker also chooses its next Dask task as separate device workers
would (:func:`start_past_busy_devices`). Dask's worker starts the tasks
that ask for resources in priority order only: ``WorkerState._next_ready_task``
(``distributed/worker_state_machine.py``, the same in 2025.4.0, the lowest
version allowed, and in 2026.8.0) looks at the top of its ``constrained``
heap alone, and while that task's resources are taken it starts none of the
others. With a process per device that costs nothing: every task of a
worker asks for the same device. In one process it lets one device's queue
hold back another's: a task for a busy device at the top (a window's metric
read out beside it, an evaluation of the states of the window before) stops
another device's loop window, and the busy device's own window, waiting for
that window's values, never ends (the polyfit example, ``window=5``, stalled
so at step 1,145 in one of five runs; a loop whose ps device ends each step
last stalls in its first windows: ``tests/test_host_processes.py``). So a
host worker starts the highest-priority task whose resources are free,
which is the top of each device's own queue, as a worker per device would
start it. The seats stay as they were (each device runs at most its
threads' worth of Dask tasks, and each task runs with its own device's
runtime), so nothing a device is charged, capped or recorded changes.
Compile was left alone on purpose: asking a light task for no seat would
free those tasks only, not an evaluation's ops, which need their device's
seat.

It also hands ``runtime`` what it may not import itself: the worker lookup
(``distributed.get_worker``) and the courier that sends a loop window's
values to another device's worker over Dask's comms (TCP or TLS, as the
cluster is configured), addressed by the device's name.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import secrets
import threading
from concurrent.futures import Future
from typing import Any, Mapping, Sequence

from distributed import WorkerPlugin, get_worker
from distributed.protocol.serialize import to_serialize
from distributed.worker_state_machine import TaskState, WorkerState

from .. import runtime
from ..runtime.backends import DeviceConfig
from ..errors import RunError
from ..runtime import Sent

EXCHANGE_HANDLER = "orchestrator_exchange"
_WORKER_OF: dict[str, str] = {}  # device -> the worker standing for it, where that is not the device's own
OUTBOX_ATTRIBUTE = "orchestrator_outbox"


class DeviceRuntimePlugin(WorkerPlugin):
    """Gives each worker the backend of its device (by worker name), and ``runtime`` its worker lookup."""

    name = "orchestrator-device-runtime"
    idempotent = False

    def __init__(self, configs: Mapping[str, DeviceConfig]):
        self.configs = dict(configs)

    def plugin_name(self) -> str:
        """``orchestrator-runtime-<digest of the device configurations>``: equal clusters share one name."""
        digest = hashlib.sha256(repr(sorted(self.configs.items())).encode()).hexdigest()[:12]
        return f"orchestrator-runtime-{digest}"

    def setup(self, worker: Any) -> None:
        runtime.bind(device_worker)
        runtime.bind_courier(send)
        _WORKER_OF.update({c.name: c.worker for c in self.configs.values() if c.worker})
        mine = [c for c in self.configs.values() if (c.worker or c.name) == str(worker.name)]
        if not mine:
            return  # not a device of this cluster (another spec's, on a shared scheduler): leave it be
        if len(mine) == 1 and mine[0].name == str(worker.name):
            device_runtime = _kept(getattr(worker, runtime.RUNTIME_ATTRIBUTE, None), mine[0])
            setattr(worker, runtime.RUNTIME_ATTRIBUTE, device_runtime)
            runtimes = {mine[0].name: device_runtime}
        else:  # a host worker: a seat per device, each with its own runtime (kept across runs as above)
            old: dict[str, Seat] = worker.__dict__.get(runtime.SEATS_ATTRIBUTE) or {}
            held = {c.name: _kept(getattr(old.get(c.name), runtime.RUNTIME_ATTRIBUTE, None), c) for c in mine}
            placed = {name: Seat(worker, each, first=i == 0) for i, (name, each) in enumerate(held.items())}
            setattr(worker, runtime.SEATS_ATTRIBUTE, placed)
            start_past_busy_devices(worker.state)
            setattr(worker, runtime.RUNTIME_ATTRIBUTE, held[mine[0].name])
            runtimes = held

        async def receive(comm: Any, device: str = "") -> None:
            """A stream of values from another device's window partitions, until it closes."""
            mailbox = runtimes.get(device, next(iter(runtimes.values()))).mailbox
            while True:
                try:
                    message = await comm.read()
                except Exception:  # the sender closed the stream (it stopped, or its worker did)
                    return
                mailbox.put(message["items"])

        worker.handlers[EXCHANGE_HANDLER] = receive
        # what the run's live page shows of this device rides on Dask's heartbeat (execute.page): no message of
        # its own, and none per step
        worker.metrics[runtime.DEVICE_METRIC] = runtime.device_metrics
        # who this worker is, from itself: the client names a lost worker by it, a restarted one too (the
        # scheduler's events name workers by address only); a host worker names every device it stands for
        first = runtimes[mine[0].name]
        worker.log_event(runtime.DEVICE_TOPIC, {"device": first.config.name, "named": ", ".join(runtimes),
                                                "address": str(worker.address), "pid": os.getpid(),
                                                "created": first.created})

    def teardown(self, worker: Any) -> None:
        # Streams to other devices stay open between windows; a worker that closes with them open
        # has Dask warn "Closing dangling stream" for each at the end of every loop run.
        for seat in runtime.seats(worker):
            outbox: _Outbox | None = seat.__dict__.pop(OUTBOX_ATTRIBUTE, None)
            if outbox is not None:
                outbox.close()
            device_runtime = getattr(seat, runtime.RUNTIME_ATTRIBUTE, None)
            if device_runtime is not None:
                device_runtime.links.close()


def _kept(existing: runtime.Runtime | None, config: DeviceConfig) -> runtime.Runtime:
    """The device's runtime: the one it has, whose accounting goes on across runs (--keep-alive), or a new one."""
    return existing if existing is not None and existing.config == config else runtime.Runtime.for_device(config)


def start_past_busy_devices(state: WorkerState) -> None:
    """Have a host worker's Dask ``state`` start the highest-priority task whose resources are free, not only
    the top of its queue (see the module's policy): the same state, of a class that chooses so."""
    if type(state) is WorkerState:
        state.__class__ = _HostWorkerState


class _HostWorkerState(WorkerState):
    """Dask's worker state, choosing as a worker per device would (no state of its own: ``__class__`` is set)."""

    __slots__ = ()

    def _next_ready_task(self) -> TaskState | None:
        """Dask's choice (the top of ``ready`` or of ``constrained``, whichever comes first), with the first
        constrained task whose resources are free in place of the top of ``constrained``."""
        free = None
        if self.constrained:
            top = self.constrained.peek()  # the common case first: no look past it
            free = top if self._resource_restrictions_satisfied(top) else \
                next((ts for ts in self.constrained.sorted() if self._resource_restrictions_satisfied(ts)), None)
        first = self.ready.peek() if self.ready else None  # (a task Dask queued has its priority: `or ()`)
        if free is not None and (first is None or (free.priority or ()) < (first.priority or ())):
            self.constrained.discard(free)
            return free
        return self.ready.pop() if self.ready else None


class Seat:
    """One device of a host worker, as ``runtime`` sees a device's worker: the device's name and runtime; the
    rest (address, events, event loop, Dask state) is the host worker's own.

    Dask's transfer log of the host worker is the first seat's alone: a value Dask moved into the process is
    counted once (the report names the process's first device as where it went).
    """

    def __init__(self, worker: Any, device_runtime: runtime.Runtime, first: bool):
        self.worker, self.name = worker, device_runtime.config.name
        setattr(self, runtime.RUNTIME_ATTRIBUTE, device_runtime)
        self.resource = runtime.device_resource(self.name)
        self.seat_threads = int(worker.state.total_resources.get(self.resource, 1))
        self.is_gpu = device_runtime.config.kind == "GPU"
        if not first:
            self.transfer_incoming_log: Any = ()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.worker, name)


def device_worker() -> Any:
    """The worker ``runtime`` sees for the Dask task running on this thread: the worker itself, or in a host
    worker the seat of the device the task is pinned to (its identity resource, ``device:<name>``, the one a
    pinned task asks for). A task on ``GPU:*`` asks for no device: it runs on the GPU seat the fewest running
    tasks took (the first on a tie)."""
    worker = get_worker()
    placed: dict[str, Seat] | None = worker.__dict__.get(runtime.SEATS_ATTRIBUTE)
    if not placed:
        return worker
    key = worker.active_threads.get(threading.get_ident())
    state = worker.state.tasks.get(key) if key is not None else None
    restrictions = state.resource_restrictions if state is not None else None
    seated = list(placed.values())
    for seat in seated:
        if restrictions and seat.resource in restrictions:
            return seat
    gpus = [seat for seat in seated if seat.is_gpu]
    if restrictions and "GPU" in restrictions and gpus:
        return _least_taken(worker, gpus, key)
    return seated[0]


_TAKING = threading.Lock()


def _least_taken(worker: Any, gpus: list[Seat], key: Any) -> Seat:
    """The GPU seat the fewest running Dask tasks took (each thread's choice is kept while its task runs), so
    that tasks on ``GPU:*`` started at once spread over the GPUs as separate workers would spread them."""
    taken: dict[int, tuple[Any, Seat]] = worker.__dict__.setdefault("orchestrator_taken", {})
    with _TAKING:
        mine = taken.get(threading.get_ident())
        if mine is not None and mine[0] == key:  # asked again by the same task: its choice stands
            return mine[1]
        counts = {id(seat): 0 for seat in gpus}
        for thread, (running, seat) in list(taken.items()):
            if worker.active_threads.get(thread) != running:
                del taken[thread]  # that task is over
            elif id(seat) in counts:
                counts[id(seat)] += 1
        chosen = min(gpus, key=lambda seat: counts[id(seat)])
        taken[threading.get_ident()] = (key, chosen)
    return chosen


class LostCopies(WorkerPlugin):
    """Which ops of a run's sweep copies fail when Dask runs them again: those a lost worker was running.

    Registered with the scheduler, so that a worker that joins later (the lost one, restarted) has it before
    it runs any task; the run unregisters it when it ends (``teardown`` forgets the run's ops).
    """

    idempotent = False

    def __init__(self, run: str, ops: Mapping[str, str]):
        self.run, self.ops = run, dict(ops)

    def setup(self, worker: Any) -> None:
        runtime.mark_lost(self.run, self.ops)

    def teardown(self, worker: Any) -> None:
        runtime.mark_lost(self.run, None)


def open_device_links(client: Any, devices: Sequence[str]) -> bool:
    """Give ``devices``' workers direct links to each other (``runtime.links``); False where one cannot have
    them (a TLS cluster: its values keep to Dask's comms and their security), and the courier carries them.

    The secret is new for every run and reaches the workers over the client's own (Dask) connection.
    """
    opened = client.run(runtime.open_links, secret=secrets.token_bytes(runtime.LINK_SECRET_BYTES))
    book = dict(entry for entries in opened.values() if entries is not None for entry in entries)
    if not set(devices) <= set(book):
        book = {}
    client.run(runtime.set_links, book=book)
    return bool(book)


def send(worker: Any, device: str, run: str, items: Sequence[tuple[runtime.Tag, Any]]) -> Sent:
    """Send values to the worker standing for ``device`` (from a task's thread); done once written."""
    outbox: _Outbox | None = worker.__dict__.get(OUTBOX_ATTRIBUTE)
    if outbox is None:
        outbox = worker.__dict__.setdefault(OUTBOX_ATTRIBUTE, _Outbox(worker))
    return outbox.send(device, run, items)


class _Outbox:
    """One stream per receiving device, kept open: a writer drains each queue, several values a write.

    A stream is one-way (no reply per message); a value sent is done once
    written. Values queued while the previous write is under way go out
    together. A failed write fails every value it carried, which fails the
    window that sent them.
    """

    def __init__(self, worker: Any):
        self.worker = worker
        self.queues: dict[str, asyncio.Queue[tuple[str, Sequence[tuple[Any, Any]], Future[None]]]] = {}
        self.writers: list[asyncio.Task[None]] = []
        self.comms: dict[str, Any] = {}  # the open stream to each device

    def close(self) -> None:
        """Stop the writers and close their streams (on the worker's event loop, as it closes)."""
        for writer in self.writers:
            writer.cancel()
        for comm in self.comms.values():
            if not comm.closed():
                comm.abort()
        self.comms.clear()

    def send(self, device: str, run: str, items: Sequence[tuple[Any, Any]]) -> Future[None]:
        done: Future[None] = Future()
        self.worker.loop.asyncio_loop.call_soon_threadsafe(self._enqueue, device, run, items, done)
        return done

    def _enqueue(self, device: str, run: str, items: Sequence[tuple[Any, Any]], done: Future[None]) -> None:
        queue = self.queues.get(device)
        if queue is None:
            queue = self.queues[device] = asyncio.Queue()
            self.writers.append(asyncio.ensure_future(self._write(device, queue)))
        queue.put_nowait((run, items, done))

    async def _write(self, device: str, queue: asyncio.Queue[tuple[str, Sequence[tuple[Any, Any]], Future[None]]]) \
            -> None:
        from distributed.comm.core import connect

        comm: Any = None
        while True:
            batch = [await queue.get()]
            while not queue.empty():
                batch.append(queue.get_nowait())
            try:
                if comm is None or comm.closed():
                    address = await _address(self.worker, device, refresh=comm is not None)
                    comm = self.comms[device] = await connect(address, **self.worker.connection_args)
                    await comm.write({"op": EXCHANGE_HANDLER, "reply": False, "device": device})
                await comm.write({"items": [(run, list(tag), to_serialize(value))
                                            for run, items, _ in batch for tag, value in items]})
            except Exception as exc:
                for _, _, done in batch:
                    done.set_exception(RunError(f"cannot send values to {device}: {type(exc).__name__}: {exc}"))
                comm = None
                continue
            for _, _, done in batch:
                done.set_result(None)


async def _address(worker: Any, device: str, refresh: bool) -> str:
    book: dict[str, str] = worker.__dict__.setdefault("orchestrator_addresses", {})
    if refresh or device not in book:
        identity = await worker.scheduler.identity()
        book.clear()
        book.update({str(w.get("name")): address for address, w in identity.get("workers", {}).items()})
    standing = _WORKER_OF.get(device, device)  # a host worker stands for every device of its task
    if standing not in book:
        raise RunError(f"no worker stands for {device}: cannot send it the values it reads")
    return book[standing]
