"""Drain on notice, the worker's side: what ``orchestrate worker`` does between SIGTERM and its exit.

Policy. SIGTERM is a notice, not an order to drop everything: a spot
instance's interruption notice and Kubernetes deleting a pod both send it,
then SIGKILL after a grace period (Kubernetes: 30 s by default). So the
launcher drains its devices within ``--drain-timeout`` seconds
(:data:`DRAIN_SECONDS` by default: the Kubernetes grace period less five
seconds to close the processes before the SIGKILL):

1. if a run listens (``execute.draining``: runs say so on
   ``runtime.DRAIN_TOPIC`` when they start and when they end), it is
   told which devices drain and by when, and the launcher waits for its
   ``leave``: the run reads the window in flight there and writes a
   checkpoint at its last step first;
2. the workers retire through the scheduler (``retire_workers``): the
   values that live only on them are copied to the other workers, so that
   the run computes nothing finished again; what is queued or running
   there goes back to the scheduler, for the worker that comes back;
3. the launcher closes the workers and exits 0.

Past the deadline each step is cut short and the launcher leaves anyway; a
second SIGTERM or a SIGINT means leave now. No run listening (an idle
cluster): step 1 is skipped. State: none beyond one drain's own
variables.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..runtime import DRAIN_TOPIC

DRAIN_SECONDS = 25.0  # Kubernetes' default grace period (30 s) less 5 s to close the processes
POLL_SECONDS = 0.2  # how often the scheduler's drain topic is read while a run finishes its window
RETIRE_FLOOR = 5.0  # the retirement's share of a deadline already spent waiting for the run


async def drain(scheduler: str, connection_args: dict[str, Any], devices: Sequence[str], task: str,
                deadline: float, again: asyncio.Event, echo: Callable[[str], None]) -> str:
    """Drain ``devices`` (see the module); how it went, in words, for the launcher's closing line."""
    from distributed.core import rpc

    end = time.monotonic() + deadline
    try:
        # (a scheduler gone answers at once, or never: a connect is given a share of the deadline only)
        async with rpc(scheduler, timeout=min(max(1.0, deadline / 2), 10.0), connection_args=connection_args) as remote:
            waited = await _wait_for_runs(remote, devices, task, deadline, end, again, echo)
            if again.is_set():
                return f"{waited}; a second signal: leaving now"
            left = max(end - time.monotonic(), 0.0)
            retired = await _retire(remote, devices, left, again)
            return f"{waited}; {retired}"
    except (OSError, TimeoutError) as exc:
        return f"the scheduler could not be told ({type(exc).__name__}: {exc}); leaving"


async def _wait_for_runs(remote: Any, devices: Sequence[str], task: str, deadline: float, end: float,
                         again: asyncio.Event, echo: Callable[[str], None]) -> str:
    """Tell the runs listening, and wait for their ``leave`` (or the deadline, or a second signal)."""
    if not listening(await remote.events(topic=DRAIN_TOPIC)):
        return "no run was using them"
    notice = uuid.uuid4().hex[:12]
    await remote.log_event(topic=DRAIN_TOPIC, msg={"action": "draining", "notice": notice, "task": task,
                                                   "devices": list(devices), "deadline": deadline})
    echo(f"draining {task}: the run finishes the window in flight on its devices and checkpoints it "
         f"(leaving within {deadline:g} s; a second SIGTERM or Ctrl-C leaves now)")
    wanted, told = set(devices), set()
    while not again.is_set() and time.monotonic() < end:
        told = released(await remote.events(topic=DRAIN_TOPIC), notice) & wanted
        if told == wanted:
            return "the run let them go"
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(again.wait(), POLL_SECONDS)
    if again.is_set():
        return "interrupted while the run finished its window"
    return f"the run did not let {len(wanted - told)} device(s) go within {deadline:g} s"


async def _retire(remote: Any, devices: Sequence[str], left: float, again: asyncio.Event) -> str:
    """Retire the workers through the scheduler, within ``left`` seconds (at least :data:`RETIRE_FLOOR`)."""
    call = asyncio.ensure_future(remote.retire_workers(names=list(devices), close_workers=True, remove=True))
    interrupted = asyncio.ensure_future(again.wait())
    try:
        done, _ = await asyncio.wait([call, interrupted], timeout=max(left, RETIRE_FLOOR),
                                     return_when=asyncio.FIRST_COMPLETED)
    finally:
        for future in (call, interrupted):
            if not future.done():
                future.cancel()
                with contextlib.suppress(BaseException):
                    await future
    if call in done and call.exception() is None:
        retired = call.result() or {}
        if len(retired) == len(devices):
            return "retired through the scheduler (their values moved to other workers)"
        return f"{len(devices) - len(retired)} worker(s) could not retire (no other worker to take their values)"
    if call in done:
        return f"the retirement failed ({type(call.exception()).__name__}): leaving anyway"
    if interrupted in done:
        return "a second signal during the retirement: leaving now"
    return "the retirement did not finish in time: leaving anyway"


def listening(events: Any) -> set[str]:
    """The runs listening for notices, from the topic's events (a run that crashed stays: its deadline bounds
    the wait for it)."""
    runs: set[str] = set()
    for _, said in events or ():
        if isinstance(said, Mapping) and said.get("action") == "listening":
            runs.add(str(said.get("run")))
        elif isinstance(said, Mapping) and said.get("action") == "closed":
            runs.discard(str(said.get("run")))
    return runs


def released(events: Any, notice: str) -> set[str]:
    """The devices a run told to leave in answer to ``notice``."""
    return {str(d) for _, said in events or () if isinstance(said, Mapping) and said.get("action") == "leave"
            and notice in said.get("notices", ()) for d in said.get("devices", ())}
