"""Reaching a cluster: start the embedded one or connect to a scheduler, wait for the plan's devices,
and choose the GPU backend where the GPU workers run.

An embedded cluster's worker processes are forked from a server that imports
what a worker needs (:mod:`.processes`); :func:`prestart` starts it as the run
begins, so that it imports on another core while this process imports Dask
and starts the scheduler.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Mapping

from ..runtime.backends import (
    AUTO,
    backend_entry,
    cuda_device_count,
    fallback_gpu_backend,
    gpu_backend_problem,
    hardware_gpu_backend,
)
from ..devices import DeviceSpec
from ..errors import NoWorkerError, RunError, UsageError
from ..plan.records import Plan
from .records import RunSettings
from ..runtime import device_resource, task_resource
from .cluster import EmbeddedCluster, server_env
from .processes import start_server
from .security import refused, scheduler_address, security_for
from .starting import QUIET, Progress


def embedded(plan: Plan, settings: RunSettings) -> bool:
    """Whether the run starts a cluster of its own (else it connects to the scheduler named)."""
    return (settings.scheduler or plan.spec.cluster.scheduler) in ("local", "", None)


def prestart(plan: Plan, settings: RunSettings) -> None:
    """For an embedded cluster: start its workers' fork server now, before this process imports Dask."""
    if embedded(plan, settings):
        start_server(server_env())


def connect(plan: Plan, settings: RunSettings, base_dir: str, real_gpus: bool = True) -> tuple[Any, Any]:
    """An embedded cluster and its client, or ``(None, client)`` of the remote scheduler.

    ``real_gpus`` False (a simulated backend): Dask does not monitor the CUDA devices its workers are shown."""
    from distributed import Client

    spec, s = plan.spec, settings
    security = security_for(spec.cluster.tls, base_dir, s.tls_ca_file, s.tls_cert, s.tls_key)
    if embedded(plan, s):
        started: list[Any] = []
        try:  # a stop signal held back during the start arrives when it ends: close what was started
            started.append(EmbeddedCluster(spec.cluster, spec.cluster.dashboard, security=security,
                                           real_gpus=real_gpus).start())
            return started[0], Client(started[0], set_as_default=False, security=security)
        except BaseException:
            if started:
                started[0].close()
            raise
    address = scheduler_address(str(s.scheduler or spec.cluster.scheduler), security)
    if refused(address):
        raise RunError(f"cannot connect to the Dask scheduler at {address}: connection refused (is it running? "
                       "start it with 'dask scheduler', or give the right address)")
    try:
        client = Client(address, set_as_default=False, timeout=s.wait_for_workers, security=security)
    except (OSError, TimeoutError) as exc:
        hint = ("check that the certificates are signed by the scheduler's CA" if security is not None
                else "start it with 'dask scheduler', or give the right address")
        raise RunError(f"cannot connect to the Dask scheduler at {address} within {s.wait_for_workers:g} s: "
                       f"{type(exc).__name__}: {exc} ({hint})") from None
    return None, client


def wait_for_devices(plan: Plan, settings: RunSettings, client: Any) -> None:
    """Every device the plan uses must be offered by a worker of that name (by identity resource).

    A pinned op needs the worker offering ``device:<name>``; an op on
    ``GPU:*`` needs some worker offering ``GPU`` and its task's resource.
    Waits while workers are visibly coming up (:mod:`.starting`): a missing
    device joined, or the scheduler has a worker process starting (a Nanny
    registered whose worker has not joined yet). ``wait_for_workers``
    seconds without either, or ten times that in all, and it fails naming
    what is missing and the ``orchestrate worker`` commands that would
    start it. A worker that has not reached the scheduler yet shows nothing.
    """
    pinned = {p.device_name for p in plan.placements if p.device.device_index != "*"}
    anywhere = {p.device.task_spec() for p in plan.placements if p.device.device_index == "*"}
    progress = Progress(settings.wait_for_workers)
    while True:
        workers = client.scheduler_info(n_workers=-1)["workers"]
        by_resource: dict[str, list[Mapping[str, Any]]] = {}
        for addr, w in workers.items():
            for r in w.get("resources", {}):
                by_resource.setdefault(r, []).append({**w, "address": addr})
        missing = sorted(d for d in pinned if device_resource(d) not in by_resource)
        missing += sorted(f"{t.to_string()}/device:GPU:*" for t in anywhere
                          if not any("GPU" in w.get("resources", {}) for w in by_resource.get(task_resource(t), ())))
        if not missing:
            break
        if _starting_workers(client):
            progress.seen()
        progress.saw(-len(missing))
        why = progress.verdict()
        if why:
            waited = (f"waited {progress.quiet:g} s without a worker coming up" if why == QUIET else
                      f"waited {progress.cap:g} s in all while workers kept starting")
            raise NoWorkerError(_missing_message(plan, settings, missing, waited))
        time.sleep(0.1)
    misnamed = sorted({f"{w.get('name')} at {w.get('address', '?')} offers {d}" for d in pinned
                       for w in by_resource[device_resource(d)] if str(w.get("name")) != plan.spec.cluster.standing_for(d)})
    if misnamed:
        raise NoWorkerError("workers must be named by the device they stand for, or by their task where its job "
                            "has processes: host (dask worker --name): "
                            + "; ".join(misnamed))


def _starting_workers(client: Any) -> int:
    """How many worker processes the scheduler sees starting: Dask keeps a Nanny that registered in the
    scheduler's ``_starting_nannies`` until its worker joins or fails, and forgets it at once if the Nanny
    dies. 0 where that cannot be read (a Dask without it, a scheduler that runs no functions of clients):
    the wait is then for joining devices alone. The function travels by value (a lambda): the scheduler
    need not have this package installed."""
    try:
        return int(client.run_on_scheduler(lambda dask_scheduler: len(getattr(dask_scheduler,
                                                                             "_starting_nannies", ()))))
    except Exception:  # anything the scheduler says instead of a count is no sign of progress
        return 0


def _missing_message(plan: Plan, settings: RunSettings, missing: list[str], why: str) -> str:
    tasks = sorted({(s.job, s.task) for s in (DeviceSpec.parse(m.replace("GPU:*", "GPU:0")) for m in missing)},
                   key=str)
    address = settings.scheduler or plan.spec.cluster.scheduler
    commands = "; ".join(f"orchestrate worker {plan.spec.file} --job {job} --task {task} "
                         f"--scheduler {address}" for job, task in tasks)
    return (f"no worker offers {len(missing)} device(s) the plan uses: {', '.join(missing)} "
            f"({why}; start them with: {commands})")


def choose_backend(plan: Plan, requested: str, visible: Callable[[], int]) -> tuple[str, str]:
    """(backend, why), from the registry. auto: its hardware backend when the GPU workers' machines show
    enough CUDA GPUs, else its fallback (simulated); a hardware backend asked for by name needs them.

    ``visible`` counts the CUDA GPUs where the GPU workers run (this machine for
    the embedded cluster, the workers themselves for a remote one).
    """
    problem = gpu_backend_problem(requested)
    if problem is not None:  # validation and the command line refuse it first; a settings object may not
        raise UsageError(f"gpu_backend: {problem}")
    fallback = fallback_gpu_backend()
    gpus = {d.physical_gpu for d in plan.spec.cluster.devices if d.is_gpu}
    if not gpus:
        return fallback.name, "no GPUs in the spec"
    if requested != AUTO and not backend_entry(requested).hardware:
        return requested, f"gpu_backend: {requested}"
    hardware = hardware_gpu_backend() if requested == AUTO else backend_entry(requested)
    if hardware is None:  # auto, with no backend for real GPUs registered
        return fallback.name, "no backend for real GPUs is registered"
    count = visible()
    # ordinal k needs k + 1 GPUs; UUIDs need as many as they name (their ordinals are the machine's business)
    ordinals = [g for g in gpus if isinstance(g, int)]
    needed = max(max(ordinals, default=-1) + 1, len({g for g in gpus if isinstance(g, str)}))
    if requested != AUTO:
        if count < needed:
            raise RunError(f"gpu_backend: {requested} needs {needed} CUDA GPU(s); {count} visible "
                           f"(install orchestrator[gpu] on a CUDA machine, or use gpu_backend: {fallback.name})")
        return requested, f"gpu_backend: {requested}"
    if count >= needed:
        return hardware.name, f"{count} CUDA GPU(s) visible"
    return fallback.name, f"{count} CUDA GPU(s) visible, {needed} needed"


def cuda_counter(cluster: Any, client: Any) -> Callable[[], int]:
    """Counts CUDA GPUs where the GPU workers run: here for the embedded cluster, on them otherwise."""
    if cluster is not None:
        return cuda_device_count

    def count() -> int:
        gpu_workers = [addr for addr, w in client.scheduler_info(n_workers=-1)["workers"].items()
                       if "GPU" in w.get("resources", {})]
        if not gpu_workers:
            return 0
        counts = client.run(cuda_device_count, workers=gpu_workers)
        # each worker sees its task's GPUs (its own first); enough if each sees as many as the task uses
        return int(min(counts.values()))
    return count
