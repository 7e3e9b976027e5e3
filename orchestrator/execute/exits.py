"""``run.recover_on_exit_codes``: which exits of a device worker's process are worth recovering from.

Policy. A device worker whose process exits is lost; with ``retries`` or
``run.on_device_lost: wait`` the run has its work redone on the worker its
nanny restarts (``execute.losses``). Some exits are not worth it: a
process that exits with the code of a bug will exit with it again. With
``run.recover_on_exit_codes`` (SkyPilot's key) only the listed codes are
recovered from; any other ends the run in one line naming the code. A
signal's death is the negative signal number, as Python's
``multiprocessing`` gives it (-9: SIGKILL, the kernel's OOM killer too). A
worker lost without an exit code (its machine or network gone: nothing
saw its process end) is recovered from as before.

Who knows the code: only the process's nanny (Dask's ``Nanny``, in the
embedded cluster and in ``orchestrate worker``). :class:`ExitCodes`, a
nanny plugin the run registers, makes each nanny say it on
:data:`EXIT_TOPIC` as it sees its process end, before it tells the
scheduler (Dask's own ``Nanny._on_worker_exit``, which it then calls); the
run hears it (:class:`ExitWatch`) and, deciding a loss, waits for it a
little (:data:`EXIT_WAIT_SECONDS`: the scheduler may remove the worker on
its connection's end first).

Why the nanny holds the restart of an exit not listed. Dask hands a lost
worker's tasks to the worker its nanny restarts, at once: the restarted
process could run the op again (and write what it writes) before the run
heard the code and ended. The nanny knows the code first, so it decides:
an exit the spec does not list is not handled (no restart) until the run
lets the worker go, by unregistering the plugin as it ends, directly on
the nannies holding one, which the scheduler no longer lists. A cluster
that closes with the run (the embedded one) restarts nothing; a run that
never lets go (its client died) is waited for :data:`HOLD_SECONDS`.

State: the plugin keeps the codes and the event its teardown sets; the
watch keeps the codes heard (worker address -> (code, pid)) and the
nannies holding a restart.
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

EXIT_TOPIC = "orchestrator-exit"  # a nanny's word on its worker process's exit code
EXIT_WAIT_SECONDS = 5.0  # how long a loss's decision waits for the exit code (a lost machine never says one)
HOLD_SECONDS = 120.0  # the longest a nanny holds a restart for a run that never lets go (its client died)


class ExitCodes:
    """A Dask nanny plugin: the nanny says its worker process's exit code before it handles the exit, and holds
    the restart of a process whose code ``codes`` does not list until the run lets it go."""

    name = "orchestrator-exit-codes"

    def __init__(self, codes: Sequence[int] = ()):
        self.codes = tuple(codes)
        self.released: asyncio.Event | None = None  # set by teardown: the run is over, restart what was held

    def setup(self, nanny: Any) -> None:
        self.released = asyncio.Event()

        def said(handler: Any) -> Any:
            def exited(exitcode: Any) -> Any:
                if not str(nanny.status).endswith("running"):  # closing: an exit asked for, nobody to tell
                    return handler(exitcode)
                try:
                    nanny.log_event(EXIT_TOPIC, {"device": str(nanny.name), "address": str(nanny.worker_address),
                                                 "pid": _pid(nanny), "exitcode": exitcode, "nanny": str(nanny.address)})
                except Exception:  # (a nanny closing: the loss is decided without the code)
                    pass
                plugin = nanny.plugins.get(ExitCodes.name)
                if isinstance(plugin, ExitCodes) and plugin.holds(exitcode):
                    return nanny._ongoing_background_tasks.call_soon(plugin.restart_later, handler, exitcode)
                return handler(exitcode)
            exited.orchestrator_exit = True  # type: ignore[attr-defined]
            return exited

        # the running process's callback, and the one each restart's process is given
        if not getattr(nanny._on_worker_exit_sync, "orchestrator_exit", False):
            nanny._on_worker_exit_sync = said(nanny._on_worker_exit_sync)
        process = getattr(nanny, "process", None)
        if process is not None and not getattr(process.on_exit, "orchestrator_exit", False):
            process.on_exit = said(process.on_exit)

    def holds(self, exitcode: Any) -> bool:
        """Is this an exit the run will not recover from (so its work must not run again before the run ends)?"""
        return not_listed(self.codes, exitcode)

    async def restart_later(self, handler: Any, exitcode: int) -> None:
        """Dask's own handling of the exit (which restarts the process), once the run has let go of the worker."""
        if self.released is not None:
            try:
                await asyncio.wait_for(self.released.wait(), HOLD_SECONDS)
            except asyncio.TimeoutError:  # (a run that never said: its client died)
                pass
        handler(exitcode)

    def teardown(self, nanny: Any) -> None:
        if self.released is not None:
            self.released.set()


def not_listed(codes: Sequence[int], exitcode: Any) -> bool:
    """An exit code ``run.recover_on_exit_codes`` (``codes``; none: every exit is recovered from) does not list."""
    return bool(codes) and isinstance(exitcode, int) and exitcode not in codes


async def _let_go(client: Any, nanny: str) -> None:
    """Unregister the plugin on one nanny (which restarts the worker process it held)."""
    await client.rpc(nanny).plugin_remove(name=ExitCodes.name)


def _pid(nanny: Any) -> int:
    """The exited process's id, where the nanny still knows it (Dask forgets it before the exit is handled)."""
    try:
        return int(getattr(getattr(nanny.process, "process", None), "pid", 0) or 0)
    except Exception:
        return 0


def register(client: Any, codes: Sequence[int]) -> None:
    """Every nanny of the cluster, and each that joins later, says its worker's exit codes."""
    from distributed.diagnostics.plugin import NannyPlugin

    plugin = type("ExitCodesPlugin", (ExitCodes, NannyPlugin), {})(codes)
    client.register_plugin(plugin, name=ExitCodes.name)


class ExitWatch:
    """The exit codes the nannies said (handler on the client's event loop; read on the driver's thread)."""

    def __init__(self, client: Any, codes: Sequence[int], pids: Mapping[str, int] | None = None,
                 restart_held: bool = True):
        self.client, self.codes = client, tuple(codes)
        self.restart_held = restart_held  # at the end: the cluster outlives the run (the embedded one closes with it)
        self.pids = pids if pids is not None else {}  # worker address -> its process, as it said when it joined
        self.lock = threading.Lock()
        self.heard: dict[str, tuple[int, int]] = {}  # worker address -> (exit code, pid)
        self.holding: set[str] = set()  # the nannies holding a restart (the scheduler no longer knows them)
        self.failed: dict[str, str] = {}  # device -> its one line, for an exit not worth recovering from
        if self.codes:  # (without the key every exit is recovered from, as retries and on_device_lost say)
            client.subscribe_topic(EXIT_TOPIC, self._heard)
            register(client, self.codes)

    def _heard(self, event: tuple[float, Any]) -> None:
        said = event[1]
        if isinstance(said, Mapping) and isinstance(said.get("exitcode"), int):
            with self.lock:
                self.heard[str(said.get("address"))] = (int(said["exitcode"]), int(said.get("pid") or 0))
                if said.get("nanny") and not_listed(self.codes, said["exitcode"]):
                    self.holding.add(str(said["nanny"]))

    def recoverable(self, address: str, device: str) -> bool:
        """Is the exit of the worker at ``address`` worth recovering from? Waits a little for its code; none
        (a lost machine) is."""
        if not self.codes:
            return True
        deadline = time.monotonic() + EXIT_WAIT_SECONDS
        while True:
            with self.lock:
                code = self.heard.get(address)
            if code is not None or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        if code is None or not not_listed(self.codes, code[0]):
            return True
        listed, pid = ", ".join(map(str, self.codes)), code[1] or self.pids.get(address, 0)
        process = f" (process {pid})" if pid else ""
        self.failed[device] = (f"lost {device}: its worker's process{process} exited with code {code[0]}, "
                               f"which run.recover_on_exit_codes does not list ({listed}): not recovered from")
        return False

    def failed_line(self, device: str) -> str:
        return self.failed.get(device, "")

    def close(self) -> None:
        """Stop hearing codes; the nannies restart the processes they held, where the cluster outlives the run."""
        if not self.codes:
            return
        calls: list[Callable[[], Any]] = [lambda: self.client.unsubscribe_topic(EXIT_TOPIC)]
        if self.restart_held:  # the live nannies through the scheduler; those holding, which it lost, directly
            calls.append(lambda: self.client.unregister_worker_plugin(ExitCodes.name, nanny=True))
            calls += [functools.partial(self.client.sync, _let_go, self.client, nanny) for nanny in sorted(self.holding)]
        for call in calls:
            try:
                call()
            except Exception:  # a client whose scheduler is gone, a nanny gone with its machine
                pass
