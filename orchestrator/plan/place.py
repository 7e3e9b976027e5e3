"""The placer: which device every op runs on, and why.

Policy (TensorFlow's; docs/placement.md is the contract, docs/architecture.md the stage). An op's
device starts as the merge of its scope chain, outermost first, and its own
``device``, field by field as TF's ``DeviceSpec.make_merged_spec``: an inner
string overrides exactly the fields it sets. The type and the index are two
fields, so a type without an index keeps the outer index (``/gpu:1`` then
``/cpu`` asks for ``CPU:1``, and the plan says the index was carried over);
an explicit ``*`` is an index too and wins over an outer one (TF would read
``*`` as unset: the plan says so). Fields still unset are filled, in this
order and never overwritten, by

1. the first placement rule whose ``match`` holds (a device function): its
   ``device`` fields, or for ``round_robin: /job:ps`` the job and the next task
   of that job, as the rule's strategy (``by:``, :mod:`orchestrator.strategies`)
   chooses: by count in graph order (``replica_device_setter``, the default)
   or, with ``by: bytes``, the task holding the fewest bytes so far (every op
   placed on it before, pinned or placed by any rule). An op already pinned
   to another job, or to a task, takes no turn;
2. ``placement.default``;
3. TF's defaults: the default job, replica 0, task 0, and ``GPU:0`` when the
   op has a GPU kernel and its task has a GPU, else ``CPU:0``. ``CPU:*`` is
   ``CPU:0``: a task has one CPU.

Ops made by constructs to serve a value (a split, a loop's state) are
colocated with that value's producer, as TF's ``colocate_with``. A GPU index
of ``*`` stays open: Dask chooses among that task's GPUs at run time.

Checks, in TF's order and words:

* an op with no kernel for any device type of the cluster (a ``call`` with
  ``kernels: [gpu]`` on a cluster without GPUs) fails with TF's "No OpKernel
  was registered to support Op ..." whatever the placement mode;
* a device whose job, replica or task the cluster lacks fails with TF's
  "was explicitly assigned to ... but available devices are [...]", also
  with soft placement: TF's soft placement keeps those fields and relaxes
  only the device type and index (``Member::GetSoftDeviceName``);
* a missing device index or a type the op has no kernel for fails in strict
  placement ("Could not satisfy explicit device specification ..."); soft
  placement falls back to the same task's GPU:0 (when the op has a GPU
  kernel and the task a GPU), else its CPU:0, and records why. The fields
  the fallback changed are attributed to "soft fallback". A fallback that
  still has no kernel (a GPU-only ``call`` on a task without GPUs, in a
  cluster with GPUs elsewhere) is an error even when soft.

Each field of the plan names its source: ``op``, ``scope``, the construct
that set it (``replicate 'towers'``), ``rule N`` (``rule N (round_robin)`` for
the task a round-robin rule chose), ``placement.default``, ``default`` (TF's
defaults), ``colocated with 'x'`` or ``soft fallback``; an index carried
across a type change, or a ``*`` that overrode an outer index, says so in
parentheses. An input read from another device is a transfer, listed once
per consuming op.

State: the placer walks ops in topological order keeping only the devices
already chosen (for colocation and transfers), the bytes placed on each task
so far, and per round-robin rule its strategy's state (a counter). It is
deterministic: the same spec gives the same plan.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from ..devices import ANY, SOFT_KEEPS, DeviceSpec
from ..errors import Diagnostic, YamlPath, did_you_mean
from .records import Placement, Plan, Transfer
from ..spec.records import Cluster, Job, Op, OpRef, PlacementConfig, Spec
from ..ops import kernels_of, tf_name
from ..strategies import DEFAULT, STRATEGIES, TaskStrategy

FIELDS = ("job", "replica", "task", "device_type", "device_index")

_LISTED_DEVICES = 8
"""Devices named in "available devices are [...]"; TF lists them all, a 10,000-device cluster would drown the line."""


@dataclass
class _Resolution:
    """The device being resolved, the source of each field, and the type its index was written for."""

    spec: DeviceSpec = field(default_factory=DeviceSpec)
    sources: dict[str, str] = field(default_factory=dict)
    index_type: str | None = None  # the type of the link that set the index (CPU after GPU:1 then /cpu: GPU)

    def fill(self, other: DeviceSpec | None, source: str) -> None:
        """Fields still unset come from ``other`` (a rule, a default)."""
        if other is None:
            return
        before = self.spec
        merged = before.fill(other)
        for name in FIELDS:
            if getattr(before, name) is None and getattr(merged, name) is not None:
                self.sources[name] = source
        if before.device_index is None and merged.device_index is not None:
            self.index_type = other.device_type
        self.spec = merged

    def override(self, other: DeviceSpec, source: str) -> None:
        """``other`` nested inside what is resolved so far: the fields it sets win."""
        before, previous = self.spec, self.sources.get("device_index", "")
        for name in FIELDS:
            if getattr(other, name) is not None:
                self.sources[name] = source
        if other.device_index is not None:
            self.index_type = other.device_type
            if other.device_index == ANY and before.device_index not in (None, ANY):
                # TF parses '*' as "no index" and would keep the outer one; here '*' asks for any GPU
                outer = f"{before.device_type}:{before.device_index}"
                self.sources["device_index"] = (f"{source} (its '*' overrides {outer} from {previous.split(' (')[0]}; "
                                                f"TF reads '*' as no index and would keep {outer})")
        self.spec = before.merge(other)

    def carried(self) -> bool:
        """True when the index was written for another type (``/gpu:1`` then ``/cpu``: CPU:1)."""
        return (self.spec.device_index not in (None, ANY) and self.index_type is not None
                and self.index_type != self.spec.device_type)

    def note_carried_index(self) -> None:
        """Say in the index's source that it was carried over from another type, as TF's merge does."""
        if self.carried():
            source = self.sources.get("device_index", "default")
            self.sources["device_index"] = (f"{source} (kept across the type change from {self.index_type} "
                                            f"to {self.spec.device_type}, as in TF)")


@dataclass
class Placer:
    spec: Spec
    diagnostics: list[Diagnostic] = field(default_factory=list)
    chosen: dict[str, DeviceSpec] = field(default_factory=dict)
    round_robin: dict[int, TaskStrategy] = field(default_factory=dict)  # per rule, its strategy's state
    held: dict[str, dict[int, int]] = field(default_factory=dict)  # job -> task -> bytes placed there so far
    # One mistake, one error: the copies a replicate or sweep makes of an op share its path; the first copy's
    # error is kept (its index in ``diagnostics``) and the others counted.
    repeats: dict[tuple[YamlPath, YamlPath], list[int]] = field(default_factory=dict)

    @property
    def cluster(self) -> Cluster:
        return self.spec.cluster

    @property
    def config(self) -> PlacementConfig:
        return self.spec.placement

    @functools.cached_property  # (asked once per op; the cluster does not change while placing)
    def device_types(self) -> frozenset[str]:
        """The device types the cluster has: CPU (every task has CPU:0), and GPU when a job has one."""
        return frozenset({"CPU"} | ({"GPU"} if any(job.logical_gpus for job in self.cluster.jobs) else set()))

    def place(self, op: Op) -> Placement:
        res = _Resolution()
        if op.colocate_with is not None and op.colocate_with.op in self.chosen:
            res.override(self.chosen[op.colocate_with.op], f"colocated with '{op.colocate_with.op}'")
        else:
            for req in op.device_chain:
                res.override(req.spec, req.source)
            self.apply_rule(op, res)
            res.fill(self.config.default, "placement.default")
            self.apply_defaults(op, res)
        res.note_carried_index()
        fallback = self.check(op, res)
        device = res.spec
        self.chosen[op.name] = device
        crossing: dict[OpRef, DeviceSpec] = {}  # an input read twice (add(a, a)) still moves once
        for ref in op.inputs:
            source = self.chosen.get(ref.op)  # one look-up by name per input
            if source is not None and source != device:
                crossing.setdefault(ref, source)
        transfers = tuple(Transfer(ref, source.to_string(), device.to_string(), self.spec.value(ref).nbytes)
                          for ref, source in crossing.items())
        out_bytes = _sum_known([self.spec.value(_ref(op.name, i, op.outputs)).nbytes for i in range(op.outputs)])
        sources = tuple((name, res.sources.get(name, "default")) for name in FIELDS)
        self.hold(device, out_bytes or 0)
        return Placement(op.name, op.kind, device, sources, fallback, transfers, out_bytes)

    def apply_rule(self, op: Op, res: _Resolution) -> None:
        rule = next((r for r in self.config.rules if r.matches(op)), None)
        if rule is None:
            return
        label = rule.describe()
        res.fill(rule.device, label)
        rr = rule.round_robin
        if rr is None:
            return
        res.fill(rr.replace(task=None), label)
        job = self.cluster.job(res.spec.job)
        if res.spec.task is None and job is not None and res.spec.job == rr.job:
            nbytes = _sum_known([self.spec.value(_ref(op.name, i, op.outputs)).nbytes for i in range(op.outputs)]) or 0
            strategy = self.round_robin.get(rule.index)
            if strategy is None:
                strategy = self.round_robin[rule.index] = STRATEGIES[rule.by]()
            task = strategy.next_task(job.tasks, nbytes, MappingProxyType(self.held.get(job.name, {})))
            res.fill(DeviceSpec(task=task), f"{label} (round_robin{'' if rule.by == DEFAULT else ' by ' + rule.by})")

    def hold(self, device: DeviceSpec, nbytes: int) -> None:
        """Count an op's output on its task, for ``by: bytes``; the task's CPU and GPUs are one load."""
        if device.job is not None and device.task is not None:
            tasks = self.held.setdefault(device.job, {})
            tasks[device.task] = tasks.get(device.task, 0) + nbytes

    def apply_defaults(self, op: Op, res: _Resolution) -> None:
        res.fill(DeviceSpec(job=self.cluster.default_job, replica=0, task=0), "default")
        if res.spec.device_type is None:
            job = self.cluster.job(res.spec.job)
            has_gpu = job is not None and job.logical_gpus > 0
            kind = "GPU" if has_gpu and "GPU" in kernels_of(op.kind, op.params) else "CPU"
            res.fill(DeviceSpec(device_type=kind, device_index=0), "default")
        elif res.spec.device_index is None:
            res.fill(DeviceSpec(device_type=res.spec.device_type, device_index=0), "default")
        elif res.spec.device_type == "CPU" and res.spec.device_index == ANY:
            # Any CPU of a task is its only one. Left open it would ask Dask for a GPU slot (tasks.resources).
            res.spec = res.spec.replace(device_index=0)
            res.sources["device_index"] = "default (a task has one CPU, so CPU:* is CPU:0)"
            res.index_type = "CPU"

    def check(self, op: Op, res: _Resolution) -> str:
        """Empty when the device exists and has a kernel; else the soft fallback's reason (or an error)."""
        if self.no_kernel(op):
            return ""
        problem = self.problem(op, res)
        if problem is None:
            return ""
        message, hint, relaxable = problem
        # A re-plan moves an op the defaults put on a lost device (GPU:0) as soft placement would: no one asked
        defaulted = res.sources.get("device_index") == "default" and self.cluster.is_lost(res.spec)
        if not relaxable or not (self.config.soft or defaulted):
            self.report(op, _device_path(op), message, hint)
            return ""
        requested, fallback = res.spec, self.fallback(op, res.spec)
        changed = [name for name in FIELDS if getattr(fallback, name) != getattr(requested, name)]
        if "device_type" in changed:  # CPU:0 after GPU:0: the index belongs to the new type
            changed.append("device_index")
        for name in changed:
            res.sources[name] = "default, off a device this plan is without" if defaulted else "soft fallback"
        res.spec, res.index_type = fallback, fallback.device_type
        still = self.problem(op, res)
        if still is not None:  # e.g. a GPU-only call op on a task without a GPU, in a cluster with GPUs elsewhere
            detail = "it is on the fallback device already" if fallback == requested else still[0]
            self.report(op, _device_path(op), f"{message}; soft placement cannot fall back: {detail}",
                        f"give op '{op.name}' a kernel for a device its task has, or pin it to a task that has "
                        f"{_kernel_types(op)}")
        return message

    def report(self, op: Op, path: YamlPath, message: str, hint: str) -> None:
        seen = self.repeats.get((op.path, path))
        if seen is not None:
            seen[1] += 1
            return
        self.repeats[(op.path, path)] = [len(self.diagnostics), 0]
        self.diagnostics.append(self.spec.document.diagnostic("placement", path, message, hint))

    def reported(self) -> tuple[Diagnostic, ...]:
        """The diagnostics, each repeated one saying how many more copies of its op have it."""
        out = list(self.diagnostics)
        for index, more in self.repeats.values():
            if more:
                d = out[index]
                out[index] = replace(d, message=f"{d.message} (and in {more} more cop{'y' if more == 1 else 'ies'} "
                                                f"of this op)")
        return tuple(out)

    def no_kernel(self, op: Op) -> bool:
        """TF's first check: an op with no kernel for any device type of the cluster; reported once per op written.

        TF fails here before looking at any device (``ColocationGraph::InitializeMember``), so soft
        placement cannot help; the copies a replicate or sweep makes of one op share its path.
        """
        kernels = kernels_of(op.kind, op.params)
        if kernels & self.device_types:
            return False
        path = (*op.path, "kernels") if "kernels" in op.params else op.path
        if any(d.path == path and d.code == "no-kernel" for d in self.diagnostics):
            return True
        listed = ", ".join(f"device='{kind}'" for kind in sorted(kernels))
        # Every task has CPU:0, so only a GPU-only op gets here (kernels are cpu and gpu only).
        self.diagnostics.append(self.spec.document.diagnostic(
            "no-kernel", path,
            f"No OpKernel was registered to support Op '{tf_name(op.kind)}' used by op '{op.name}'. "
            f"Registered devices: [{', '.join(sorted(self.device_types))}], Registered kernels: {listed}",
            "the cluster has no GPU, and soft placement cannot make one: add gpus: N to a job, or declare "
            "kernels: [cpu, gpu] if the function also runs on NumPy"))
        return True

    def problem(self, op: Op, res: _Resolution) -> tuple[str, str, bool] | None:
        """What is wrong with ``res.spec`` for ``op``: (message, hint, whether soft placement may relax it)."""
        spec = res.spec
        job = self.cluster.job(spec.job)
        if job is None or spec.task is None or spec.task >= job.tasks or spec.replica not in (0, None):
            return self.missing_task(op, spec, job), self.missing_task_hint(spec, job), False
        prefix = "Could not satisfy explicit device specification '{}' for op '{}'"  # (filled only if needed)
        soft = "or set placement.soft: true"
        if self.cluster.lost and self.cluster.is_lost(spec):  # ``plan --without``: the device is gone
            return (f"op '{op.name}' is placed on {spec} (from {res.sources.get('device_index', 'default')}), "
                    f"which this plan is without", f"pin it to a device still there, {soft} to move it", True)
        if spec.device_type == "GPU":
            n = job.logical_gpus
            if n == 0:
                return (f"{prefix.format(spec, op.name)}: the cluster has no GPU on that task",
                        f"add gpus: N to job '{job.name}', pin it to /cpu:0, {soft}", True)
            if spec.device_index != ANY and isinstance(spec.device_index, int) and spec.device_index >= n:
                return (f"{prefix.format(spec, op.name)}: the cluster has {_gpu_range(n)} on that task",
                        self.index_hint(res, f"pin it to {'one of ' if n > 1 else ''}{_gpu_range(n)}, "
                                             f"add GPUs to job '{job.name}', {soft}"), True)
        elif spec.device_index not in (0, ANY):
            return (f"{prefix.format(spec, op.name)}: the cluster has only CPU:0 on that task",
                    self.index_hint(res, f"pin it to /cpu:0, {soft}"), True)
        kernels = kernels_of(op.kind, op.params)
        if spec.device_type not in kernels:
            other = sorted(kernels)[0]  # 'kernels' is never empty: validation checks it
            return (f"Could not satisfy explicit device specification '{spec}' because no supported kernel for "
                    f"{spec.device_type} devices is available for op '{op.name}' ({op.kind})",
                    f"{op.kind} runs on {' and '.join(sorted(kernels))} only: pin it to /{other.lower()}:0, {soft}",
                    True)
        return None

    def missing_task(self, op: Op, spec: DeviceSpec, job: Job | None) -> str:
        """TF's words for a device no task of the cluster has (``ColocationGraph::GetDevicesForNode``)."""
        names = sorted(d.name for d in self.cluster.devices)
        shown = ", ".join(names[:_LISTED_DEVICES]) + (
            f", ... ({len(names) - _LISTED_DEVICES} more)" if len(names) > _LISTED_DEVICES else "")
        return (f"op '{op.name}' was explicitly assigned to {spec} but available devices are [ {shown} ]. "
                f"Make sure the device specification refers to a valid device.")

    def missing_task_hint(self, spec: DeviceSpec, job: Job | None) -> str:
        if job is None:
            names = [j.name for j in self.cluster.jobs]
            what = did_you_mean(str(spec.job), names) or f"the jobs are {', '.join(names)}"
        elif spec.replica not in (0, None):
            what = "only replica 0 exists: drop /replica:N"
        else:
            what = f"job '{job.name}' has tasks 0..{job.tasks - 1}"
        return f"{what}; {SOFT_KEEPS}" if self.config.soft else what

    @staticmethod
    def index_hint(res: _Resolution, otherwise: str) -> str:
        """Why the index is what it is, when TF's merge carried it over from another type."""
        if not res.carried():
            return otherwise
        source = res.sources.get("device_index", "").split(" (")[0]
        kind = res.spec.device_type
        return (f"the index {res.spec.device_index} comes from {res.index_type}:{res.spec.device_index} in {source}, "
                f"kept when the type changed to {kind}, as TF merges type and index separately: write "
                f"/{str(kind).lower()}:0")

    def fallback(self, op: Op, spec: DeviceSpec) -> DeviceSpec:
        """Soft placement: the same task's GPU:0 when the op has a GPU kernel and the task a GPU, else its CPU:0."""
        job = self.cluster.job(spec.job)
        assert job is not None, spec  # a missing job or task is never relaxed (problem)
        gpus = [i for i in range(job.logical_gpus) if not self.cluster.is_lost(DeviceSpec(job.name, 0, spec.task,
                                                                                          "GPU", i))]
        has_gpu = bool(gpus) and "GPU" in kernels_of(op.kind, op.params)  # the first GPU of the task still there
        return DeviceSpec(job.name, 0, spec.task, "GPU" if has_gpu else "CPU", gpus[0] if has_gpu else 0)


def _kernel_types(op: Op) -> str:
    kernels = sorted(kernels_of(op.kind, op.params))
    return " or ".join(f"a {kind}" for kind in kernels)


def _device_path(op: Op) -> tuple[str | int, ...]:
    if op.device_chain:
        return op.device_chain[-1].path
    return op.path


def _gpu_range(n: int) -> str:
    return "GPU:0" if n == 1 else f"GPU:0..GPU:{n - 1}"


def _ref(name: str, index: int, outputs: int) -> OpRef:
    return OpRef(name, index if outputs > 1 else None)


def _sum_known(values: list[int | None]) -> int | None:
    if any(v is None for v in values):
        return None
    return sum(v for v in values if v is not None)


def place(spec: Spec) -> Plan:
    """Place every op of a validated spec; placement errors are in ``plan.diagnostics``."""
    placer = Placer(spec)
    placements = tuple(placer.place(op) for op in spec.ops)
    return Plan(spec, placements, (), placer.reported())
