"""Clusters: one Dask worker process per device, named by its canonical device string (or one per task).

Each device worker advertises identity resources — ``device:<name>`` (its own
device), ``task:<job/replica/task>`` (its task) and, on GPUs, ``GPU`` — so
pinned ops find it by name and survive restarts (docs/architecture.md, "The cluster"). GPU workers see
only their GPU: ``CUDA_VISIBLE_DEVICES`` lists it first, then the others, as
dask-cuda rotates it. BLAS/OpenMP threads match the device's threads.

A job with ``processes: host`` has one worker per machine instead, named
``/host:<host>`` and shared by every such task there (all of an embedded
cluster's): it offers the identity resources of each of its devices, a
thread per device thread, and sees every GPU of its devices (a GPU's CUDA
ordinal in the process is its place in that list). Each Dask task still runs with its own device's runtime
(``plugin``), so memory caps, records and the placement log stay per device.

The embedded cluster is a ``SpecCluster`` on 127.0.0.1 built from the spec;
the scheduler runs in this process, so its settings (no-workers timeout,
allowed failures) come from the spec's options. With ``cluster.tls`` (a Dask
``Security``, see ``security``) the scheduler and every worker speak
``tls://`` only. ``orchestrate worker`` (``worker``) starts the same workers,
from the same :func:`worker_options`, for one task on a remote machine.

The embedded cluster's nannies fork their worker processes from a server
that has imported Dask, NumPy and the device runtime (:mod:`.processes`,
started with :func:`server_env`, SIGINT blocked): a worker is ready in
about a tenth of a second instead of half a second of imports, and it ends
without an interpreter's teardown. Every worker (the remote launcher's
too) has :mod:`.processes` as a Dask preload, which gives NumPy's BLAS its
device's threads: a forked worker inherits the BLAS the server loaded, and a
spawned one loads it before its nanny sets the thread variables.
"""

from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Sequence

from ..runtime.backends import DeviceConfig, backend_entry
from ..devices import GpuId
from ..spec.records import Cluster, Device
from ..runtime import worker_resources
from . import processes
from .processes import deaf_to_sigint

THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS")


def visible_gpus(device: Device, all_physical: tuple[GpuId, ...]) -> str:
    """dask-cuda's rotation: this worker's GPU first, so it is CUDA device 0 (ordinals and UUIDs alike)."""
    if device.physical_gpu is None:
        return ""
    ordered = list(all_physical)
    at = ordered.index(device.physical_gpu)
    return ",".join(str(g) for g in ordered[at:] + ordered[:at])


def worker_env(device: Device, all_physical: tuple[GpuId, ...]) -> dict[str, str]:
    # a GPU's threads run copies side by side, each of whose host work needs one BLAS thread at most
    env = {name: str(device.threads if not device.is_gpu else 1) for name in THREAD_VARIABLES}
    env["CUDA_VISIBLE_DEVICES"] = visible_gpus(device, all_physical) if device.is_gpu else ""
    return env


def host_env(devices: Sequence[Device]) -> dict[str, str]:
    """A host worker's (``processes: host``): its CPUs' BLAS threads, and every GPU of its devices visible, in
    their order, so that a GPU's CUDA ordinal in the process is its place there (``DeviceConfig.ordinal``)."""
    threads = max((d.threads for d in devices if not d.is_gpu), default=1)
    env = {name: str(threads) for name in THREAD_VARIABLES}
    env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in host_gpus(devices))
    return env


def host_gpus(devices: Sequence[Device]) -> tuple[GpuId, ...]:
    """The physical GPUs of ``devices``, each once, in their order: what their shared process sees."""
    return tuple(dict.fromkeys(d.physical_gpu for d in devices if d.is_gpu and d.physical_gpu is not None))


def device_configs(cluster: Cluster, backend: str) -> dict[str, DeviceConfig]:
    """What each device's worker needs, its backend's class included (from this process's registry)."""
    out = {}
    for standing, devices in cluster.workers().items():
        shared = host_gpus(devices) if len(devices) > 1 or standing != devices[0].name else ()
        for d in devices:
            name = backend if d.is_gpu else "host"
            ordinal = shared.index(d.physical_gpu) if d.physical_gpu in shared else 0
            out[d.name] = DeviceConfig(d.name, "GPU" if d.is_gpu else "CPU", name,
                                       d.memory_limit if d.is_gpu else None, d.reserve_at_start, d.physical_gpu,
                                       backend_entry(name).path, "" if standing == d.name else standing, ordinal)
    return out


def worker_options(cluster: Cluster, device: Device, host: str | None = "127.0.0.1",
                   security: Any = None, real_gpus: bool = True) -> dict[str, Any]:
    """Options of the ``Nanny`` standing for ``device`` (host ``None``: Dask picks the interface)."""
    return host_worker_options(cluster, (device,), host, security, real_gpus)


def host_worker_options(cluster: Cluster, devices: Sequence[Device], host: str | None = "127.0.0.1",
                        security: Any = None, real_gpus: bool = True) -> dict[str, Any]:
    """Options of the ``Nanny`` standing for ``devices``: one device, or every device of a task whose job has
    ``processes: host`` (named by the task; each device's resources, a thread per device thread)."""
    first = devices[0]
    job = cluster.job(first.spec.job)
    assert job is not None
    resources: dict[str, float] = {}
    for d in devices:
        for resource, amount in worker_resources(d).items():
            resources[resource] = resources.get(resource, 0.0) + amount
    options: dict[str, Any] = {
        "name": cluster.worker_name(first),
        "nthreads": sum(d.threads for d in devices),
        "resources": resources,
        "memory_limit": job.memory_limit or 0,
        "env": worker_env(first, job.physical_gpus) if len(devices) == 1 and cluster.worker_name(first) == first.name
        else host_env(devices),
        "host": host,
        "dashboard": False,
        # worker chatter (start-up banners, heartbeats during shutdown) is not the user's business;
        # real failures reach the user through the client, naming the op
        "silence_logs": logging.CRITICAL,
        # sets the worker's BLAS threads to its device's (a forked worker inherits NumPy's BLAS loaded)
        "preload": [*_configured_preloads(), processes.__name__],
        # Dask's statistical profiler keeps the task thread's frames, and every value they hold, past their
        # step: a GPU then holds more than the memory plan says (seen: two minibatches where one is planned)
        # and spends CPU sampling. Per-op records and the step picture say where a device's time goes.
        "config": {"distributed.worker.profile.enabled": False,
                   # Dask's GPU monitoring (NVML) opens the first GPU a worker's CUDA_VISIBLE_DEVICES names: with
                   # simulated GPUs that may be none this machine has (ordinal 1 of a one-GPU machine), and the
                   # worker failed to start (seen on an H200). Real GPUs keep it: the dashboard's GPU plots.
                   "distributed.diagnostics.nvml": real_gpus},
    }
    if security is not None:
        options["security"] = security  # the worker's protocol follows the scheduler's address (tls://)
    return options


def _configured_preloads() -> list[str]:
    import dask

    configured = dask.config.get("distributed.worker.preload", default=[]) or []
    return [str(p) for p in ([configured] if isinstance(configured, str) else configured)]


def scheduler_config(no_workers_timeout: float, allowed_failures: int) -> dict[str, Any]:
    """The settings of a run's cluster, held while it runs: a nanny that restarts a lost worker reads them."""
    return {
        **processes.start_method(),
        "distributed.scheduler.no-workers-timeout": f"{no_workers_timeout}s",
        "distributed.scheduler.allowed-failures": allowed_failures,
        # our tasks are tiny and pinned; work stealing could only move them to a wrong device
        "distributed.scheduler.work-stealing": False,
    }


@dataclass
class EmbeddedCluster:
    """A ``SpecCluster`` with one Nanny-managed worker per device of the spec."""

    cluster: Cluster
    dashboard: str | None = ":0"
    host: str = "127.0.0.1"
    devices: tuple[Device, ...] | None = None
    security: Any = None  # a distributed.Security: TLS everywhere (tls:// addresses)
    real_gpus: bool = True  # False: the GPUs are simulated (Dask does not monitor the CUDA devices named)

    def start(self) -> Any:
        import dask
        from distributed import Nanny, Scheduler, SpecCluster

        devices = self.devices if self.devices is not None else self.cluster.devices
        chosen = {d.name for d in devices}
        options = {name: host_worker_options(self.cluster, held, self.host, self.security, self.real_gpus)
                   for name, held in self.cluster.workers().items() if any(d.name in chosen for d in held)}
        for each in options.values():
            each["env"].update(processes.restored_env())
        workers = {name: {"cls": Nanny, "options": each} for name, each in options.items()}
        scheduler_options: dict[str, Any] = {"host": self.host}
        if self.security is not None:
            scheduler_options.update(protocol="tls", security=self.security)
        if self.dashboard is None:
            # no dashboard; Dask still serves /health and /metrics: on a free port, never a taken 8787
            scheduler_options.update(dashboard=False, dashboard_address=f"{self.host}:0")
        else:
            address = self.dashboard if ":" not in self.dashboard[:1] else f"{self.host}{self.dashboard}"
            scheduler_options["dashboard_address"] = address
        # the fork server first: it imports what a worker needs while the scheduler starts here
        processes.start_server(server_env())
        with deaf_to_sigint(), dask.config.set(processes.start_method()):
            return SpecCluster(workers=workers, scheduler={"cls": Scheduler, "options": scheduler_options},
                               name="orchestrator", silence_logs=40, security=self.security)


def server_env() -> dict[str, str]:
    """The fork server's additions to this process's environment: one BLAS/OpenMP thread (each worker
    sets its device's), and what Dask sets before it starts a worker process (glibc's malloc trimming)."""
    import dask

    # Dask's default (distributed.yaml): distributed adds its defaults to dask.config only when imported, and
    # the server may start before that; a setting of the user's own is in dask.config already
    pre_spawn: dict[str, Any] = {"MALLOC_TRIM_THRESHOLD_": 65536}
    pre_spawn.update(dask.config.get("distributed.nanny.pre-spawn-environ", default=None) or {})
    env = {name: "1" for name in THREAD_VARIABLES}
    env.update({str(k): str(v) for k, v in pre_spawn.items() if v is not None and str(k) not in env})
    # as a nanny does for a spawned worker: the same string hashes in every worker (forks share the server's)
    if env.get("PYTHONHASHSEED", os.environ.get("PYTHONHASHSEED")) in (None, "0"):
        env["PYTHONHASHSEED"] = "6640"
    return env


@contextlib.contextmanager
def dask_settings(settings: Mapping[str, Any]) -> Iterator[None]:
    import dask

    with dask.config.set(dict(settings)):
        yield
