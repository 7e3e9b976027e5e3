"""Drain on notice, the run's side: a device worker asked to leave finishes its window, is checkpointed, goes.

Policy. ``orchestrate worker`` hears SIGTERM (a spot instance's notice,
Kubernetes deleting its pod) and, instead of taking its devices away
mid-window, says so on :data:`DRAIN_TOPIC` (a Dask event topic, as the
device runtime announces its workers on ``runtime.DEVICE_TOPIC``): the
devices and the deadline it leaves by. The run hears it on the client's
event loop (:class:`Drains`). Each loop whose ops run on a draining
device reads its next window (the one in flight there when the notice
came), writes a checkpoint at that window's last step whatever the spec's
cadence (so that ``on_device_lost: fail`` ends with a checkpoint to
``--resume`` from), and, once every such loop has, the run answers
``leave`` on the same topic. A device no loop of the run is driving right
now is answered at once. The worker then retires its workers through the
scheduler (Dask's ``retire_workers``: their values that live nowhere else
are copied to the other workers first, so that nothing finished is
computed again; the tasks still queued or running there, the window
submitted after the one read, go back to the scheduler), and exits.

From there the departure is a loss like any (``execute.losses``, decided
by ``run.on_device_lost``): ``wait`` runs the work left on the worker that
comes back under the same name, ``fail`` ends the run in one line, which
names the drain and the checkpoint. Why a handshake and not
``retire_workers`` alone: the retirement hands back what is running, the
window in flight, at whatever step it is; the run can only checkpoint a
window it has read.

State: the notices heard (device -> when), the loops whose windows are in
flight and the devices they run on, what each notice still waits for, and
the drains done (the run report's ``drains``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Protocol

from ..plan.records import Plan
from ..runtime import DRAIN_TOPIC
from ..spec.records import Loop
from .records import DeviceLoss, Drain

FLUSH_SECONDS = 10.0  # how long a drain's checkpoint may take to be written before the worker is let go


class Writer(Protocol):
    """What a drain needs of the checkpoint writer (``execute.checkpointing``)."""

    def flush(self, timeout: float) -> str: ...


def loop_devices(plan: Plan, loop: Loop) -> frozenset[str]:
    """The devices a loop's windows run on."""
    return frozenset(plan.placement(name).device_name for name in (*loop.body, *loop.evaluated)
                     if name in plan.placement_index)


class Drains:
    """The notices of the run's device workers, and the answers; the handler runs on the client's event loop,
    the loops (on the driver's thread) checkpoint and let go."""

    def __init__(self, client: Any, plan: Plan, run: str, echo: Callable[[str], None]):
        self.client, self.plan, self.run, self.echo = client, plan, run, echo
        self.devices = frozenset(d.name for d in plan.spec.cluster.devices)
        self.began = time.time()
        self.lock = threading.Lock()
        self.active: dict[str, frozenset[str]] = {}  # loop in flight -> its devices
        self.waiting: dict[str, set[str]] = {}  # draining device -> the loops still to read a window first
        self.done: dict[str, Drain] = {}  # device -> its drain (the last one)
        self.notices: dict[str, str] = {}  # device -> the notice its drain answers (a worker's, for one SIGTERM)
        client.subscribe_topic(DRAIN_TOPIC, self._heard)
        client.log_event(DRAIN_TOPIC, {"action": "listening", "run": run})

    async def _heard(self, event: tuple[float, Any]) -> None:
        said = event[1]
        if not isinstance(said, Mapping) or said.get("action") != "draining":
            return
        ours = [str(d) for d in said.get("devices", ()) if str(d) in self.devices]
        free = []
        with self.lock:
            for device in ours:
                loops = {loop for loop, devices in self.active.items() if device in devices}
                self.done[device] = Drain(device, round(time.time() - self.began, 3))
                self.notices[device] = str(said.get("notice"))
                if loops:
                    self.waiting[device] = loops
                else:
                    free.append(device)
        if ours:
            self.echo(f"{', '.join(ours)} drain{'s' if len(ours) == 1 else ''} on notice "
                      f"(leaving within {float(said.get('deadline') or 0):g} s): "
                      + ("finishing the window in flight there" if len(free) < len(ours) else "no loop runs there now"))
        if free:
            await self._release(free)

    def begin(self, loop: Loop) -> None:
        with self.lock:
            self.active[loop.name] = loop_devices(self.plan, loop)

    def end(self, loop: Loop) -> None:
        """The loop ended: the drains that waited for it only go now."""
        with self.lock:
            self.active.pop(loop.name, None)
        self.read(loop, None)

    def due(self, loop: Loop) -> bool:
        """Does a drain wait for this loop's next window (read now: it checkpoints there)?"""
        with self.lock:
            return any(loop.name in loops for loops in self.waiting.values())

    def read(self, loop: Loop, step: int | None, writer: Writer | None = None) -> None:
        """The loop read a window (its last step ``step``; ``writer``: the checkpoint handed to it there);
        the drains that waited only for it are answered once the checkpoint is written."""
        checkpoint = writer.flush(FLUSH_SECONDS) if writer is not None else ""
        free = []
        with self.lock:
            for device, loops in list(self.waiting.items()):
                if loop.name not in loops:
                    continue
                loops.discard(loop.name)
                drain = self.done[device]
                if step is not None and drain.step is None:
                    drain = Drain(drain.device, drain.seconds, (*drain.loops, loop.name), step, checkpoint)
                elif step is not None:
                    drain = Drain(drain.device, drain.seconds, (*drain.loops, loop.name), drain.step, drain.checkpoint)
                self.done[device] = drain
                if not loops:
                    del self.waiting[device]
                    free.append(device)
        if free:
            self.client.sync(self._release, free)

    async def _release(self, devices: list[str]) -> None:
        now = round(time.time() - self.began, 3)
        with self.lock:
            for device in devices:
                drain = self.done[device]
                self.done[device] = Drain(drain.device, drain.seconds, drain.loops, drain.step, drain.checkpoint, now)
            told = [self.done[device] for device in devices]
            notices = sorted({self.notices[device] for device in devices})
        await self.client.scheduler.log_event(topic=DRAIN_TOPIC, msg={"action": "leave", "run": self.run,
                                                                       "devices": list(devices), "notices": notices})
        for drain in told:
            at = f" after step {drain.step} of loop '{drain.loops[0]}'" if drain.step is not None else ""
            kept = f", checkpoint {drain.checkpoint}" if drain.checkpoint else ""
            self.echo(f"{drain.device} may leave{at}{kept}")

    def failed_line(self, device: str) -> str:
        """The run's one line when a drained device's departure ends it (``on_device_lost: fail``); "" if it
        was not drained."""
        with self.lock:
            drain = self.done.get(device)
        if drain is None:
            return ""
        if drain.released is None:
            return (f"{device} was drained on notice and left at its deadline, before the window in flight there "
                    "was finished and checkpointed (a longer orchestrate worker --drain-timeout lets it finish)")
        if drain.checkpoint:
            resume = f"; its checkpoint at step {drain.step} of loop '{drain.loops[0]}' is {drain.checkpoint}: " \
                     "run again with --resume to go on from there"
        elif drain.step is not None:
            resume = f" after step {drain.step} of loop '{drain.loops[0]}' (the loop has no checkpoint to resume from)"
        else:
            resume = ""
        return (f"{device} was drained on notice{resume} (set run.on_device_lost: wait to have a new worker of its "
                "task go on instead)")

    def records(self, losses: Sequence[DeviceLoss] = ()) -> tuple[Drain, ...]:
        """The drains, each with the steps run again after it (those of its device's loss that followed)."""
        with self.lock:
            drains = sorted(self.done.values(), key=lambda d: d.seconds)
        return tuple(replace(d, redone=next((loss.steps for loss in losses if loss.device == d.device
                                             and loss.seconds >= d.seconds), None)) for d in drains)

    def close(self) -> None:
        try:
            self.client.unsubscribe_topic(DRAIN_TOPIC)
            self.client.log_event(DRAIN_TOPIC, {"action": "closed", "run": self.run})
        except Exception:  # a client whose scheduler is gone: nobody is left to tell
            pass
