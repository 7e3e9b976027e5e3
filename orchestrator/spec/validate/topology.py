"""The cluster and placement sections: jobs, tasks, GPUs and memory become devices; rules become records.

Also the check that a device string names something the cluster has (its
job, task and device type; the index is the placer's to judge) (what a run
does when one of those devices is lost, ``run.on_device_lost``, is a plain setting: ``execute.losses``
and ``execute.replanning`` act on it).
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any, Final, Mapping

from ...backend_registry import AUTO, fallback_gpu_backend, gpu_backend_names, gpu_backend_problem, hardware_gpu_backend
from ...devices import SOFT_KEEPS, DeviceSpec, GpuId, canonical_device, gpu_id_problem, gpu_mix_problem
from ...errors import YamlPath, did_you_mean, format_bytes
from ..records import Cluster, Device, GpuMemory, Job, PlacementConfig, Rule, Tls
from ...ops import lookup, user_op_names
from ...strategies import DEFAULT, STRATEGIES
from .checker import Checker

MAX_DEVICES = 10_000
"""Bound on the devices a cluster may have (one Dask worker each); ``tasks: 10**9`` is a slip."""


SCHEDULER_PROTOCOLS: Final = ("tcp", "tls", "ucx", "ws", "wss")
"""Dask's comm protocols that reach another process (``inproc://`` reaches only its own)."""
DASK_PORT: Final = 8786
"""The Dask scheduler's default port, suggested for an address written without one."""
_HOST_RE: Final = re.compile(r"[A-Za-z0-9_.-]+")  # a host name or an IPv4 address

_CLUSTER_SIZE_HINT = ("every device, a task's CPU:0 or one of its GPUs, is a Dask worker; "
                      "check tasks, gpus and virtual_gpus")


def build_cluster(c: Checker, data: Mapping[str, Any]) -> Cluster:
    check_scheduler(c, str(data.get("scheduler", "local")), ("cluster", "scheduler"))
    check_gpu_backend(c, data.get("gpu_backend", AUTO))
    raw_jobs = data.get("jobs") or {"localhost": {}}
    jobs = tuple(build_job(c, str(name), spec or {}, ("cluster", "jobs", name)) for name, spec in raw_jobs.items())
    total = sum(job.tasks * (1 + job.logical_gpus) for job in jobs)
    if c.too_big or total > MAX_DEVICES:
        if not c.too_big:  # each job is small enough, together they are not
            c.too_big = True
            c.error("cluster-size", ("cluster", "jobs"),
                       f"the cluster would have {total:,} devices; at most {MAX_DEVICES:,} are supported",
                       _CLUSTER_SIZE_HINT)
        return Cluster(jobs, (), jobs[0].name)
    devices = tuple(d for job in jobs for d in job_devices(job))
    names = [j.name for j in jobs]
    default_job = names[0] if len(names) == 1 else next(
        (n for n in ("localhost", "worker") if n in names), names[0])
    tls = data.get("tls")
    dashboard = data.get("dashboard", ":0")
    return Cluster(jobs, devices, default_job, str(data.get("scheduler", "local")),
                   str(data.get("gpu_backend", "auto")), None if dashboard is False else str(dashboard),
                   Tls(**tls) if tls else None)


def check_gpu_backend(c: Checker, name: Any) -> None:
    """``gpu_backend`` names an entry of the backends' registry (or ``auto``): the registry is the one list."""
    problem = gpu_backend_problem(str(name))
    if problem is not None:
        hardware, fallback = hardware_gpu_backend(), fallback_gpu_backend()
        auto = f"auto picks {hardware.name} when enough CUDA GPUs are visible, else {fallback.name}" \
            if hardware is not None else f"auto picks {fallback.name}"
        c.error("gpu-backend", ("cluster", "gpu_backend"), problem, did_you_mean(str(name), gpu_backend_names()) or auto)


def build_job(c: Checker, name: str, spec: Mapping[str, Any], path: YamlPath) -> Job:
    tasks = spec.get("tasks", 1)
    addresses = tuple(tasks) if isinstance(tasks, list) else ()
    check_task_addresses(c, name, addresses, (*path, "tasks"))
    visible = tuple(spec.get("visible_gpus") or ())
    check_gpu_ids(c, visible, (*path, "visible_gpus"))
    gpus = spec.get("gpus")
    if visible and gpus is not None and gpus != len(visible):
        c.error("gpus", (*path, "gpus"),
                   f"gpus: {gpus} disagrees with visible_gpus, which lists {len(visible)} "
                   f"GPU{'s' if len(visible) != 1 else ''}",
                   "give one of gpus or visible_gpus; visible_gpus alone implies the count")
    tasks_count = len(addresses) or int(tasks)
    devices = tasks_count * (1 + (len(visible) or int(gpus or 0)) * int(spec.get("virtual_gpus", 1)))
    if devices > MAX_DEVICES:
        # Refused before any device is made: 'tasks: 1000000000' would take minutes and gigabytes.
        factors = {"tasks": tasks_count, "gpus": int(gpus or 0), "visible_gpus": len(visible),
                   "virtual_gpus": int(spec.get("virtual_gpus", 1))}
        field = max((k for k in factors if k in spec), key=lambda k: factors[k], default="tasks")
        c.too_big = True
        c.error("cluster-size", (*path, field),
                   f"job '{name}' would have {devices:,} devices; at most {MAX_DEVICES:,} are supported",
                   _CLUSTER_SIZE_HINT)
        return Job(name, tasks_count, addresses, 1, None, (), 1, GpuMemory(), path)
    physical = visible or tuple(range(int(gpus or 0)))
    mem = spec.get("gpu_memory") or {}
    mpath = (*path, "gpu_memory")
    fraction = mem.get("fraction")
    if fraction is not None and not 0 < fraction <= 1:
        shown = ".nan" if fraction != fraction else fraction  # YAML's spelling, not Python's nan
        c.error("gpu-fraction", (*mpath, "fraction"), f"fraction {shown} is not in (0, 1]",
                   "e.g. fraction: 0.4 for 40% of each GPU")
        fraction = None
    if "limit" in mem and "fraction" in mem:
        c.error("gpu-memory", mpath, "give either limit or fraction, not both",
                   "limit is an absolute size, fraction a share of the GPU's total")
    if mem and not physical:
        c.warn("gpu-memory", mpath, f"job '{name}' has gpu_memory but no GPUs", "add gpus: N or remove it")
    gpu_memory = GpuMemory(c.size(mem.get("limit"), (*mpath, "limit")), fraction, bool(mem.get("growth", False)),
                           c.size(mem.get("total"), (*mpath, "total")) or GpuMemory().total)
    virtual = int(spec.get("virtual_gpus", 1))
    if gpu_memory.limit is not None and gpu_memory.limit * virtual > gpu_memory.total:
        needed = format_bytes(gpu_memory.limit * virtual)
        what = f"{virtual} virtual GPUs x {format_bytes(gpu_memory.limit)} = {needed}" if virtual > 1 \
            else f"limit {format_bytes(gpu_memory.limit)}"
        c.error("gpu-memory", (*mpath, "limit"),
                   f"{what} exceeds the GPU's total of {format_bytes(gpu_memory.total)}",
                   "lower the limit or virtual_gpus, or give the GPU's real size as total:")
    return Job(name, len(addresses) or int(tasks), addresses, int(spec.get("cpu_threads", 1)),
               c.size(spec.get("memory_limit"), (*path, "memory_limit")), physical,
               int(spec.get("virtual_gpus", 1)), gpu_memory, path, int(spec.get("gpu_threads", 1)),
               str(spec.get("processes", "device")))


def check_scheduler(c: Checker, address: str, path: YamlPath) -> None:
    """``local``, or ``[PROTOCOL://]host:port`` as Dask dials it; a slip here once surfaced as a traceback."""
    found = scheduler_problem(address)
    if found is not None:
        c.error("scheduler", path, *found)


def scheduler_problem(address: str) -> tuple[str, str] | None:
    """What is wrong with a scheduler address (the spec's or ``--scheduler``), and what to write; None if fine."""
    if address == "local":
        return None
    protocol, sep, target = address.partition("://")
    if sep and protocol not in SCHEDULER_PROTOCOLS:
        return (f"scheduler address '{address}' has an unknown protocol '{protocol}'",
                f"Dask's protocols are {', '.join(SCHEDULER_PROTOCOLS)}: write e.g. tcp://host:port or "
                f"tls://host:port, or local for an embedded cluster")
    host_port = target if sep else address
    problem = address_problem(host_port)
    if problem is None:
        return None
    if problem == "has no port" and host_port.rstrip(":"):
        hint = (f"write {address.rstrip(':')}:{DASK_PORT}, Dask's default scheduler port, "
                f"or local for an embedded cluster")
    else:
        hint = (f"write local, or host:port such as tcp://10.0.0.1:{DASK_PORT}; "
                f"an IPv6 host goes in brackets: tcp://[::1]:{DASK_PORT}")
    return f"scheduler address '{address}' {problem}", hint


def check_gpu_ids(c: Checker, visible: tuple[GpuId, ...], path: YamlPath) -> None:
    """All CUDA ordinals or all UUIDs, each UUID in nvidia-smi's form.

    The schema's pattern has checked the UUIDs already, but its ``$`` lets a
    trailing newline through, which would end up in CUDA_VISIBLE_DEVICES.
    """
    for i, gpu in enumerate(visible):
        problem = gpu_id_problem(gpu) if isinstance(gpu, str) else None
        if problem is not None:
            c.error("gpus", (*path, i), *problem)
    mixed = gpu_mix_problem(visible)
    if mixed is not None:
        c.error("gpus", (*path, mixed[0]), mixed[1], mixed[2])


def check_task_addresses(c: Checker, job: str, addresses: tuple[str, ...], path: YamlPath) -> None:
    """Each task of a ``tasks: [host:port, ...]`` list is a ``host:port``, as in a TF ``ClusterSpec``."""
    for i, address in enumerate(addresses):  # strings: the schema has checked them
        if "://" in address:
            problem = "has a protocol"
            hint = (f"write {address.partition('://')[2]}: a task is host:port; "
                    f"the protocol belongs to cluster.scheduler")
        else:
            found = address_problem(address)
            if found is None:
                continue
            problem, bare = found, address.rstrip(":")
            hint = (f"write {bare}:PORT, e.g. {bare}:2222" if found == "has no port" and bare
                    else "write host:port, e.g. ps0.example.com:2222, or [::1]:2222 for an IPv6 host")
        c.error("task-address", (*path, i), f"address '{address}' of task {i} of job '{job}' {problem}", hint)


def address_problem(text: str) -> str | None:
    """What is wrong with ``host:port`` (an IPv6 host in brackets), said after the address; None if nothing."""
    if not text:
        return "is empty"
    if any(ch.isspace() for ch in text):
        return "contains a space"
    if text.startswith("["):
        host, closed, rest = text[1:].partition("]")
        if not closed:
            return "has no closing ']'"
        if not _is_ipv6(host):
            return f"has '[{host}]', which is not an IPv6 address"
        if not rest:
            return "has no port"
        if not rest.startswith(":"):
            return f"has '{rest}' after ']' instead of :PORT"
        port = rest[1:]
    else:
        host, colon, port = text.rpartition(":")
        if not colon:
            return "has no port"
        if ":" in host:
            return "is an IPv6 address without brackets"
        if not host:
            return "has an empty host"
        if not _HOST_RE.fullmatch(host):
            return f"has host '{host}', which is not a host name or IP address"
    if not port:
        return "has no port"
    if not (port.isascii() and port.isdigit()):
        return f"has port '{port}', which is not a number"
    if not 1 <= int(port) <= 65535:
        return f"has port {int(port)}, out of range 1..65535"
    return None


def _is_ipv6(text: str) -> bool:
    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        return False
    return True


def build_placement(c: Checker, data: Mapping[str, Any], cluster: Cluster) -> PlacementConfig:
    default = None
    if "default" in data:
        default = c.device(data["default"], ("placement", "default"))
    rules = []
    for i, raw in enumerate(data.get("rules") or []):
        path = ("placement", "rules", i)
        match = raw["match"]
        ops = match.get("op", [])
        ops = (ops,) if isinstance(ops, str) else tuple(ops)
        for kind in ops:
            if lookup(kind) is None or lookup(kind).internal:  # type: ignore[union-attr]
                c.warn("rule-unknown-op", (*path, "match", "op"), f"rule {i + 1} matches unknown op type '{kind}'",
                       did_you_mean(kind, user_op_names()) or
                       "this rule can never match; the op types are listed in docs/spec-language.md")
                c.rules_with_unknown_ops.add(i)
        device = c.device(raw["device"], (*path, "device")) if "device" in raw else None
        rr = c.device(raw["round_robin"], (*path, "round_robin")) if "round_robin" in raw else None
        if rr is not None and rr.job is None:
            c.error("round-robin", (*path, "round_robin"), "round_robin needs a job, e.g. /job:ps",
                    "name the job whose tasks take the matching ops in turn")
        by = str(raw.get("by", DEFAULT))
        if by not in STRATEGIES:
            c.error("strategy", (*path, "by"), f"unknown round_robin strategy '{by}'",
                    did_you_mean(by, STRATEGIES) or f"strategies: {', '.join(STRATEGIES)}")
            by = DEFAULT
        elif "round_robin" not in raw and "by" in raw:
            c.warn("strategy", (*path, "by"), "by applies to round_robin rules only", "remove it, or use round_robin")
        rules.append(Rule(i, ops, match.get("name"), tuple(match.get("tags") or ()), device, rr, by, path))
    return PlacementConfig(default, bool(data.get("soft", False)), bool(data.get("log", False)), tuple(rules))


def device_exists(c: Checker, spec: DeviceSpec, path: YamlPath, cluster: Cluster, soft: bool) -> None:
    """The job, replica, task and device type a string names must exist (the index is the placer's to judge).

    Soft placement relaxes only the device type and index, as TF's does (it keeps
    the job, replica and task of the request): a missing GPU is then a warning,
    a missing job, replica or task an error all the same.
    """
    def keeps(hint: str) -> str:  # under soft placement, say why it does not help
        return f"{hint}{' ' if hint.endswith('?') else '; '}{SOFT_KEEPS}" if soft else hint

    if spec.job is not None and cluster.job(spec.job) is None:
        names = [j.name for j in cluster.jobs]
        hint = did_you_mean(spec.job, names) or f"jobs: {', '.join(names)}"
        c.error("device-job", path, f"device '{spec}' names job '{spec.job}', which the cluster does not have",
                keeps(hint))
        return
    jobs = [j for j in ([cluster.job(spec.job)] if spec.job else cluster.jobs) if j is not None]
    if spec.task is not None and all(spec.task >= j.tasks for j in jobs):
        most = max(j.tasks for j in jobs)
        c.error("device-task", path, f"device '{spec}' names task {spec.task}, but the job has {most} "
                f"task{'s' if most != 1 else ''}", keeps(f"tasks are numbered 0..{most - 1}"))
    if spec.device_type == "GPU" and all(j.logical_gpus == 0 for j in jobs):
        where = f"job '{spec.job}'" if spec.job else "the cluster"
        report = c.warn if soft else c.error
        report("device-type", path, f"device '{spec}' names a GPU, but {where} has no GPUs"
               f"{'; soft placement will fall back' if soft else ''}",
               f"add gpus: N to {where if spec.job else 'a job'}, or pin to /cpu:0")
    if spec.replica not in (None, 0):
        c.error("device-replica", path, f"device '{spec}' names replica {spec.replica}; only replica 0 exists",
                keeps("drop /replica:N"))


def job_devices(job: Job) -> list[Device]:
    """CPU:0 and every logical GPU of every task, in canonical order."""
    out = []
    for task in range(job.tasks):
        out.append(Device(canonical_device(job.name, task, "CPU", 0), job.cpu_threads, job.memory_limit,
                          limit_declared=job.memory_limit is not None))
        declared = job.gpu_memory.limit is not None or job.gpu_memory.fraction is not None
        per_gpu = job.gpu_memory.per_logical_gpu(job.virtual_gpus)
        for i in range(job.logical_gpus):
            physical = job.physical_gpus[i // job.virtual_gpus]
            out.append(Device(canonical_device(job.name, task, "GPU", i), job.gpu_threads, per_gpu, physical,
                              job.gpu_memory.reserve_at_start, declared))
    return out
