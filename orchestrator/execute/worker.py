"""``orchestrate worker``: the device workers of one task of a spec, on this machine.

For the task ``/job:J/replica:0/task:N`` it starts one Nanny-managed Dask
worker process per device (``CPU:0``, then every GPU or virtual GPU), built
from the very :func:`~orchestrator.execute.cluster.host_worker_options` the
embedded cluster uses: same names (the canonical device strings), identity
resources, memory limits, threads and ``CUDA_VISIBLE_DEVICES``; a job with
``processes: host`` gets one worker for all of the task's devices, named
as ``Cluster.worker_name`` says (the task, or ``/host:local``). ``--gpus``
replaces the job's physical GPUs on this machine (``visible_gpus``): CUDA
ordinals or GPU/MIG UUIDs, as Slurm exports them.

Lifecycle: reach the scheduler (or fail after ``timeout`` seconds), wait for
it to forget workers of the same names (a crashed earlier run of this task),
start the workers (for as long as their processes show progress,
:mod:`.starting`: a busy machine's slow start is not a stuck one) and print
one line per device, then serve until SIGINT (closing the workers cleanly,
exit 0), SIGTERM (a notice: the devices drain first, :mod:`.notice`, then
close; exit 0) or until the workers stop on their own (the scheduler
closed them or went away: exit 1). The worker processes ignore SIGINT
(:func:`dask_setup`, a Dask preload): Ctrl-C reaches the whole process
group, and the launcher closes them. Nothing here calls
``sys.exit``; :func:`serve_task` returns the exit code.

:func:`dask_worker_commands` prints the equivalent ``dask worker`` command of
each device, for deployments that start workers themselves (dask-jobqueue,
dask-kubernetes, dask-cuda's ``dask cuda worker``).
"""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import logging
import os
import shlex
import signal
import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence

from ..devices import GpuId, gpu_id_problem, gpu_mix_problem
from ..errors import UsageError
from ..spec.records import Cluster, Device
from .cluster import host_worker_options
from .notice import DRAIN_SECONDS, drain
from .security import refused
from .starting import CAPPED, QUIET, Progress, cpu_seconds, descendants

Echo = Callable[[str], None]
EXIT_OK, EXIT_FAILED = 0, 1
POLL_SECONDS = 0.5  # how often a start's progress is read


@dataclass(frozen=True)
class TaskWorkers:
    """The devices of one task, and the cluster as this machine sees it (``--gpus`` applied)."""

    cluster: Cluster
    job: str
    task: int
    devices: tuple[Device, ...]

    @property
    def task_name(self) -> str:
        return f"/job:{self.job}/replica:0/task:{self.task}"


def select_task(cluster: Cluster, job: str, task: int, gpus: Sequence[GpuId] | None = None) -> TaskWorkers:
    """The devices of ``/job:job/task:task``; usage errors name what exists.

    ``gpus`` replaces the job's physical GPUs (``CUDA_VISIBLE_DEVICES`` of its GPU
    workers) on this machine; it must list as many GPUs as the job has per task,
    all CUDA ordinals or all GPU/MIG UUIDs.
    """
    names = [j.name for j in cluster.jobs]
    spec_job = cluster.job(job)
    if spec_job is None:
        close = difflib.get_close_matches(job, names, n=1, cutoff=0.6)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        raise UsageError(f"orchestrate worker: --job: the spec has no job '{job}' "
                         f"(jobs: {', '.join(names)}){hint}")
    if not 0 <= task < spec_job.tasks:
        valid = "0" if spec_job.tasks == 1 else f"0..{spec_job.tasks - 1}"
        raise UsageError(f"orchestrate worker: --task: job '{job}' has {spec_job.tasks} task"
                         f"{'s' if spec_job.tasks != 1 else ''}; --task must be {valid}, got {task}")
    if gpus is not None:
        gpus = tuple(gpus)
        have = len(spec_job.physical_gpus)
        if len(gpus) != have or len(set(gpus)) != len(gpus):
            raise UsageError(f"orchestrate worker: --gpus: job '{job}' has {have} physical GPU"
                             f"{'s' if have != 1 else ''} per task; --gpus must list {have} distinct "
                             f"GPU{'s' if have != 1 else ''}, got {','.join(map(str, gpus)) or 'none'}")
        _check_gpu_ids(gpus)
        cluster = _with_gpus(cluster, job, gpus)
    devices = tuple(d for d in cluster.devices if d.spec.job == job and d.spec.task == task)
    return TaskWorkers(cluster, job, task, devices)


def _check_gpu_ids(gpus: tuple[GpuId, ...]) -> None:
    """The checks of the spec's visible_gpus, for callers of the API (the CLI has made them already)."""
    problems = [gpu_id_problem(g) for g in gpus if isinstance(g, str)]
    mixed = gpu_mix_problem(gpus)
    found = next((p for p in problems if p is not None), None) or (mixed[1:] if mixed else None)
    if found is not None:
        raise UsageError(f"orchestrate worker: --gpus: {found[0]} ({found[1]})")


def _with_gpus(cluster: Cluster, job: str, gpus: tuple[GpuId, ...]) -> Cluster:
    old = cluster.job(job)
    assert old is not None
    mapping = dict(zip(old.physical_gpus, gpus))
    jobs = tuple(replace(j, physical_gpus=gpus) if j.name == job else j for j in cluster.jobs)
    devices = tuple(replace(d, physical_gpu=mapping[d.physical_gpu])
                    if d.spec.job == job and d.physical_gpu is not None else d for d in cluster.devices)
    return replace(cluster, jobs=jobs, devices=devices)


def device_options(selected: TaskWorkers, host: str | None, security: Any) -> dict[str, dict[str, Any]]:
    """Nanny options per device name: the embedded cluster's, with this machine's host and TLS."""
    import dask

    preload = [*(dask.config.get("distributed.worker.preload") or ()), __name__]
    options = {}
    for held in _held(selected):  # a device each, or the task's devices in one (processes: host)
        opts = host_worker_options(selected.cluster, held, host, security)
        opts["preload"] = preload  # dask_setup below, in each worker process
        options[opts["name"]] = opts
    return options


def _held(selected: TaskWorkers) -> list[tuple[Device, ...]]:
    """The task's devices as its workers stand for them: a worker's devices, one tuple per worker."""
    workers: dict[str, tuple[Device, ...]] = {}
    for d in selected.devices:
        name = selected.cluster.worker_name(d)
        workers[name] = (*workers.get(name, ()), d)
    return list(workers.values())


def dask_setup(worker: Any) -> None:
    """Preload hook run in each worker process: ignore SIGINT there.

    Ctrl-C in a terminal reaches the whole process group; the launcher then
    closes every worker cleanly through its Nanny, so the worker processes
    must not die of the same SIGINT first (tracebacks, restarts).
    """
    with contextlib.suppress(ValueError):  # only possible in the main thread
        signal.signal(signal.SIGINT, signal.SIG_IGN)


# --------------------------------------------------------------------------- the equivalent dask worker


def dask_worker_commands(selected: TaskWorkers, scheduler: str, tls: Any = None,
                         program: str = "dask worker") -> list[str]:
    """One shell command per device starting the same worker with ``dask worker``.

    ``tls`` is a :class:`~orchestrator.execute.security.TlsFiles` or None.
    """
    out = []
    for held in _held(selected):
        opts = host_worker_options(selected.cluster, held, None)
        env = opts["env"]
        resources = ",".join(f"{name}={_number(value)}" for name, value in opts["resources"].items())
        args = [scheduler, "--name", opts["name"], "--nthreads", str(opts["nthreads"]),
                "--memory-limit", str(opts["memory_limit"]), "--resources", resources, "--no-dashboard"]
        if tls is not None:
            args += ["--tls-ca-file", tls.ca_file, "--tls-cert", tls.cert, "--tls-key", tls.key]
        assignments = [f"{k}={shlex.quote(v) if v else chr(39) * 2}" for k, v in env.items()]
        out.append(" ".join([*assignments, program, *map(shlex.quote, args)]))
    return out


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


# --------------------------------------------------------------------------- serving


def serve_task(selected: TaskWorkers, scheduler: str, *, host: str | None = None, security: Any = None,
               timeout: float = 30.0, echo: Echo = print, warn: Echo = print, verbose: bool = False,
               drain_timeout: float = DRAIN_SECONDS) -> int:
    """Start the task's device workers and serve until a signal; the exit code (0 after a signal).

    Dask's own logging is silenced (our lines say what happens) unless ``verbose``. SIGTERM drains the devices
    within ``drain_timeout`` seconds first (0: no drain).
    """
    from distributed.utils import silence_logging_cmgr

    if verbose:
        return asyncio.run(_serve(selected, scheduler, host, security, timeout, echo, warn, logging.INFO,
                                  drain_timeout))
    with silence_logging_cmgr(logging.CRITICAL), silence_logging_cmgr(logging.CRITICAL, root="bokeh"):
        return asyncio.run(_serve(selected, scheduler, host, security, timeout, echo, warn, logging.CRITICAL,
                                  drain_timeout))


async def _serve(selected: TaskWorkers, scheduler: str, host: str | None, security: Any, timeout: float,
                 echo: Echo, warn: Echo, log_level: int, drain_timeout: float) -> int:
    connection_args = security.get_connection_args("worker") if security is not None else {}
    problem = await _check_scheduler(selected, scheduler, connection_args, timeout, echo, security is not None)
    if problem:
        warn(f"error: {problem}")
        return EXIT_FAILED
    stop, again = asyncio.Event(), asyncio.Event()  # a signal; a second one (leave now)
    received: list[str] = []
    with _signals_set(stop, received, again):
        nannies, problem = await _start(selected, scheduler, host, security, timeout, log_level, stop)
        if problem:
            warn(f"error: cannot start the workers of {selected.task_name}: {problem}")
            return EXIT_FAILED
        if stop.is_set():  # stopped while starting
            await _close(nannies, f"signal-{received[0]}")
            return EXIT_OK
        for nanny in nannies:
            echo(f"started {nanny.name} at {nanny.worker_address}")
        echo(f"serving {len(nannies)} device worker{'s' if len(nannies) != 1 else ''} of {selected.task_name} "
             f"for {scheduler}; Ctrl-C stops them, SIGTERM drains them first")
        finished = asyncio.ensure_future(asyncio.gather(*(n.finished() for n in nannies)))
        waiter = asyncio.ensure_future(stop.wait())
        await asyncio.wait([finished, waiter], return_when=asyncio.FIRST_COMPLETED)
        if waiter.done():
            if received[0] == "SIGTERM" and drain_timeout > 0:
                how = await drain(scheduler, connection_args, [n.name for n in nannies], selected.task_name,
                                  drain_timeout, again, echo)
                echo(f"drained {selected.task_name}: {how}")
            echo(f"stopping the workers of {selected.task_name} ({received[0]})")
            await _close(nannies, f"signal-{received[0]}")
            await _cancel(finished)
            return EXIT_OK
        await _cancel(waiter)
        warn(f"error: the workers of {selected.task_name} stopped: the scheduler at {scheduler} closed them "
             "or went away")
        return EXIT_FAILED


async def _check_scheduler(selected: TaskWorkers, scheduler: str, connection_args: dict[str, Any],
                           timeout: float, echo: Echo, tls: bool) -> str:
    """Reach the scheduler and wait until it lists no worker of our names; the problem, or ``""``.

    The scheduler refuses a second worker of a name it knows. After a crash it
    may list the dead worker for a while (until its connection or heartbeat
    times out): wait up to ``timeout`` for it to go.
    """
    names = {selected.cluster.worker_name(d) for d in selected.devices}
    deadline = time.monotonic() + timeout
    said = False
    if await asyncio.get_running_loop().run_in_executor(None, refused, scheduler):
        return (f"cannot reach the Dask scheduler at {scheduler}: connection refused "
                "(is 'dask scheduler' running there? is the port right?)")
    while True:
        try:
            workers = await _scheduler_workers(scheduler, connection_args, timeout)
        except (OSError, TimeoutError) as exc:
            hint = ("check the certificates: they must be signed by the scheduler's CA" if tls
                    else "is 'dask scheduler' running there? is the port open?")
            return (f"cannot reach the Dask scheduler at {scheduler} within {timeout:g} s: "
                    f"{type(exc).__name__}: {exc} ({hint})")
        taken = sorted(f"{w.get('name')} (at {addr})" for addr, w in workers.items() if str(w.get("name")) in names)
        if not taken:
            return ""
        if time.monotonic() > deadline:
            return (f"the scheduler at {scheduler} already has workers named {', '.join(taken)}: is "
                    f"{selected.task_name} already running elsewhere? (waited {timeout:g} s for them to leave)"
                    + _shared_name_hint(selected, names))
        if not said:
            echo(f"waiting up to {timeout:g} s for the scheduler to release {', '.join(taken)}")
            said = True
        await asyncio.sleep(0.5)


def _shared_name_hint(selected: TaskWorkers, names: set[str]) -> str:
    """Why two tasks may want one worker name: ``processes: host`` with ``scheduler: local`` is one process for
    every such task of the machine (the embedded cluster's), which two ``orchestrate worker`` cannot share."""
    shared = names - {d.name for d in selected.devices} - {selected.task_name}  # neither a device's nor the task's
    if not shared:
        return ""
    return (f"; with processes: host and cluster.scheduler: local, every such task is the one process "
            f"{', '.join(sorted(shared))} of one machine: for a process per task on a cluster of your own, set the "
            "spec's cluster.scheduler to the scheduler's address (docs/clusters.md)")


async def _start(selected: TaskWorkers, scheduler: str, host: str | None, security: Any, timeout: float,
                 log_level: int, stop: asyncio.Event) -> tuple[list[Any], str]:
    """Start one Nanny per device; (nannies, problem). Returns early, all closed, if ``stop`` is set.

    Waits while the start shows progress (:mod:`.starting`): the worker processes use CPU (they import
    and connect, however slowly a busy machine lets them) or another one is up. ``timeout`` seconds
    without either is a stuck start; :data:`~.starting.QUIET_FACTOR` times that in all is the most any
    start gets. Dask's own limit for a Nanny's start is that cap, so that ours decides.
    """
    from distributed import Nanny

    progress = Progress(timeout)
    options = device_options(selected, host, security)
    nannies = [Nanny(scheduler, death_timeout=progress.cap, **{**opts, "silence_logs": log_level})
               for opts in options.values()]
    started = asyncio.ensure_future(asyncio.gather(*nannies))
    waiter = asyncio.ensure_future(stop.wait())
    try:
        while True:
            done, _ = await asyncio.wait([started, waiter], timeout=POLL_SECONDS, return_when=asyncio.FIRST_COMPLETED)
            if started in done:
                started.result()
            if done:
                break
            why = await _start_verdict(progress, nannies)
            if why:
                raise TimeoutError(f"the workers did not start: {why}")
    except Exception as exc:  # whatever kept a worker from starting: report it, stop the others
        await _cancel(started)
        processes = _worker_processes(nannies)  # the nannies forget them as they close
        await _close(nannies, "start-failed")
        await _reap(processes)
        return nannies, f"{type(exc).__name__}: {exc} (run with --debug to see Dask's log)"
    finally:
        await _cancel(waiter)
    if not started.done():
        await _cancel(started)
    return nannies, ""


async def _start_verdict(progress: Progress, nannies: Sequence[Any]) -> str:
    """Why to give up on the start now ("" to wait on): the mark is the CPU seconds of this process's
    children (the worker processes and what they start) and the nannies up."""
    cpu = await asyncio.get_running_loop().run_in_executor(None, lambda: cpu_seconds(descendants(os.getpid())))
    if cpu is None:  # no /proc: only the cap can tell a slow start from a stuck one
        progress.seen()
    else:
        progress.saw(cpu + sum(str(getattr(n, "status", "")).endswith("running") for n in nannies))
    verdict = progress.verdict()
    if verdict == QUIET:
        return f"their processes made no progress (used no CPU) for {progress.quiet:g} s"
    if verdict == CAPPED:
        return f"still starting after {progress.cap:g} s"
    return ""


async def _scheduler_workers(scheduler: str, connection_args: dict[str, Any], timeout: float) -> dict[str, Any]:
    """The scheduler's workers (address -> identity); raises OSError/TimeoutError when unreachable."""
    from distributed.core import rpc

    async with rpc(scheduler, timeout=timeout, connection_args=connection_args) as remote:
        info = await remote.identity()
    return dict(info.get("workers", {}))


async def _cancel(future: asyncio.Future[Any]) -> None:
    """Cancel ``future`` and collect its outcome (no 'exception was never retrieved' on exit)."""
    future.cancel()
    with contextlib.suppress(BaseException):
        await future


async def _close(nannies: Sequence[Any], reason: str) -> None:
    with contextlib.suppress(Exception):
        await asyncio.gather(*(n.close(timeout=10, reason=reason) for n in nannies), return_exceptions=True)


def _worker_processes(nannies: Sequence[Any]) -> list[Any]:
    """The worker processes (Dask's ``AsyncProcess``) the nannies have started so far."""
    found = [getattr(getattr(nanny, "process", None), "process", None) for nanny in nannies]
    return [process for process in found if process is not None]


async def _reap(processes: Sequence[Any]) -> None:
    """Kill the worker processes a failed start leaves: one stuck in its start hears no stop from its
    nanny, and Dask would reap it as this process exits, with a log line after our one-line error."""
    for process in processes:
        with contextlib.suppress(Exception):
            if process.is_alive():
                process.kill()
                await process.join(10)


@contextlib.contextmanager
def _signals_set(stop: asyncio.Event, received: list[str], again: asyncio.Event | None = None) -> Any:
    """SIGINT and SIGTERM set ``stop``, and ``again`` from the second one on (only possible in the main thread;
    elsewhere nothing is installed)."""
    loop = asyncio.get_running_loop()
    installed = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        def handler(sig: signal.Signals = sig) -> None:
            received.append(sig.name)
            stop.set()
            if again is not None and len(received) > 1:
                again.set()
        try:
            loop.add_signal_handler(sig, handler)
            installed.append(sig)
        except (ValueError, RuntimeError, NotImplementedError):
            pass
    try:
        yield
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)
