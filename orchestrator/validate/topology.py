"""The cluster and placement sections: jobs, tasks, GPUs and memory become devices; rules become records.

Also the check that a device string names something the cluster has (its
job, task and device type; the index is the placer's to judge).
"""

from __future__ import annotations

from typing import Any, Mapping

from ..devices import DeviceSpec, canonical_device
from ..errors import YamlPath, did_you_mean, format_bytes
from ..model import Cluster, Device, GpuMemory, Job, PlacementConfig, Rule, Tls
from ..ops import lookup, user_op_names
from ..strategies import DEFAULT, STRATEGIES
from .checker import Checker

MAX_DEVICES = 10_000
"""Bound on the devices a cluster may have (one Dask worker each); ``tasks: 10**9`` is a slip."""


_CLUSTER_SIZE_HINT = ("every device, a task's CPU:0 or one of its GPUs, is a Dask worker; "
                      "check tasks, gpus and virtual_gpus")


def build_cluster(c: Checker, data: Mapping[str, Any]) -> Cluster:
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


def build_job(c: Checker, name: str, spec: Mapping[str, Any], path: YamlPath) -> Job:
    tasks = spec.get("tasks", 1)
    addresses = tuple(tasks) if isinstance(tasks, list) else ()
    visible = tuple(spec.get("visible_gpus") or ())
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
        c.error("gpu-fraction", (*mpath, "fraction"), f"fraction {fraction} is not in (0, 1]",
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
               int(spec.get("virtual_gpus", 1)), gpu_memory, path)


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
                       did_you_mean(kind, user_op_names()) or "this rule can never match")
                c.rules_with_unknown_ops.add(i)
        device = c.device(raw["device"], (*path, "device")) if "device" in raw else None
        rr = c.device(raw["round_robin"], (*path, "round_robin")) if "round_robin" in raw else None
        if rr is not None and rr.job is None:
            c.error("round-robin", (*path, "round_robin"), "round_robin needs a job, e.g. /job:ps",
                    "it spreads ops over that job's tasks")
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
    """Strict: the job, task and device type a string names must exist (index is the placer's)."""
    report = c.warn if soft else c.error
    suffix = "; soft placement will fall back" if soft else ""
    if spec.job is not None and cluster.job(spec.job) is None:
        hint = did_you_mean(spec.job, [j.name for j in cluster.jobs]) or \
            f"jobs: {', '.join(j.name for j in cluster.jobs)}"
        report("device-job", path, f"device '{spec}' names job '{spec.job}', which the cluster does not have{suffix}",
               hint)
        return
    jobs = [cluster.job(spec.job)] if spec.job else list(cluster.jobs)
    if spec.task is not None and all(spec.task >= j.tasks for j in jobs if j):
        most = max(j.tasks for j in jobs if j)
        report("device-task", path, f"device '{spec}' names task {spec.task}, but the job has {most} "
               f"task{'s' if most != 1 else ''}{suffix}", f"tasks are numbered 0..{most - 1}")
    if spec.device_type == "GPU" and all(j.logical_gpus == 0 for j in jobs if j):
        where = f"job '{spec.job}'" if spec.job else "the cluster"
        report("device-type", path, f"device '{spec}' names a GPU, but {where} has no GPUs{suffix}",
               "add gpus: N to the job, or pin to /cpu:0")
    if spec.replica not in (None, 0):
        report("device-replica", path, f"device '{spec}' names replica {spec.replica}; only replica 0 exists"
               f"{suffix}", "drop /replica:N")


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
            out.append(Device(canonical_device(job.name, task, "GPU", i), 1, per_gpu, physical,
                              job.gpu_memory.reserve_at_start, declared))
    return out
