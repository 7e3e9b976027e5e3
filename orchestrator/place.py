"""The placer: which device every op runs on, and why.

Policy (TensorFlow's, DESIGN §4). An op's device starts as the merge of its
scope chain, outermost first, and its own ``device``: an inner string
overrides exactly the fields it sets. Fields still unset are filled, in this
order and never overwritten, by

1. the first placement rule whose ``match`` holds (a device function): its
   ``device`` fields, or for ``round_robin: /job:ps`` the job and the next task
   of that job, as the rule's strategy (``by:``, :mod:`orchestrator.strategies`)
   chooses: by count in graph order (``replica_device_setter``, the default)
   or, with ``by: bytes``, the task holding the fewest bytes so far. An op
   already pinned to another job, or to a task, takes no turn;
2. ``placement.default``;
3. TF's defaults: the default job, replica 0, task 0, and ``GPU:0`` when the
   op has a GPU kernel and its task has a GPU, else ``CPU:0``.

Ops made by constructs to serve a value (a split, a loop's state) are
colocated with that value's producer, as TF's ``colocate_with``. A GPU index
of ``*`` stays open: Dask chooses among that task's GPUs at run time.

The resolved device must exist and the op must have a kernel for its type.
If not, strict placement reports it in TF's words; soft placement falls back
to the same task's GPU:0 (when the op has a GPU kernel and the task a GPU),
else its CPU:0, and records why (an op whose job or task does not exist falls
back to task 0 of the default job). The fields the fallback changed are
attributed to "soft fallback". A fallback that still has no kernel (a
GPU-only ``call`` on a task without GPUs) is an error even when soft.

Each field of the plan names its source: ``op``, ``scope``, the construct
that set it (``replicate 'towers'``), ``rule N`` (``rule N (round_robin)`` for
the task a round-robin rule chose), ``placement.default``, ``default`` (TF's
defaults), ``colocated with 'x'`` or ``soft fallback``. An input read from
another device is a transfer, listed once per consuming op.

State: the placer walks ops in topological order keeping only the devices
already chosen (for colocation and transfers) and, per round-robin rule, its
strategy's state (a counter, or the bytes given to each task). It is deterministic: the same spec
gives the same plan.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .devices import ANY, DeviceSpec
from .errors import Diagnostic
from .model import Cluster, Op, OpRef, Placement, PlacementConfig, Plan, Spec, Transfer
from .ops import kernels_of
from .strategies import DEFAULT, STRATEGIES, TaskStrategy

FIELDS = ("job", "replica", "task", "device_type", "device_index")


@dataclass
class _Resolution:
    spec: DeviceSpec = field(default_factory=DeviceSpec)
    sources: dict[str, str] = field(default_factory=dict)

    def fill(self, other: DeviceSpec | None, source: str) -> None:
        if other is None:
            return
        before = self.spec
        merged = before.fill(other)
        for name in FIELDS:
            if getattr(before, name) is None and getattr(merged, name) is not None:
                self.sources[name] = source
        self.spec = merged

    def override(self, other: DeviceSpec, source: str) -> None:
        merged = self.spec.merge(other)
        for name in FIELDS:
            if getattr(other, name) is not None:
                self.sources[name] = source
        if merged.device_index is None:  # a type change without an index drops the outer index
            self.sources.pop("device_index", None)
        self.spec = merged


@dataclass
class Placer:
    spec: Spec
    diagnostics: list[Diagnostic] = field(default_factory=list)
    chosen: dict[str, DeviceSpec] = field(default_factory=dict)
    round_robin: dict[int, TaskStrategy] = field(default_factory=dict)  # per rule, its strategy's state

    @property
    def cluster(self) -> Cluster:
        return self.spec.cluster

    @property
    def config(self) -> PlacementConfig:
        return self.spec.placement

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
        fallback = self.check(op, res)
        device = res.spec
        self.chosen[op.name] = device
        crossing = dict.fromkeys(ref for ref in op.inputs if ref.op in self.chosen and self.chosen[ref.op] != device)
        transfers = tuple(  # an input read twice (add(a, a)) still moves once
            Transfer(ref, self.chosen[ref.op].to_string(), device.to_string(), self.spec.value(ref).nbytes)
            for ref in crossing
        )
        out_bytes = _sum_known([self.spec.value(_ref(op.name, i, op.outputs)).nbytes for i in range(op.outputs)])
        sources = tuple((name, res.sources.get(name, "default")) for name in FIELDS)
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
            task = strategy.next_task(job.tasks, nbytes)
            res.fill(DeviceSpec(task=task), f"{label} (round_robin{'' if rule.by == DEFAULT else ' by ' + rule.by})")

    def apply_defaults(self, op: Op, res: _Resolution) -> None:
        res.fill(DeviceSpec(job=self.cluster.default_job, replica=0, task=0), "default")
        if res.spec.device_type is None:
            job = self.cluster.job(res.spec.job)
            has_gpu = job is not None and job.logical_gpus > 0
            kind = "GPU" if has_gpu and "GPU" in kernels_of(op.kind, op.params) else "CPU"
            res.fill(DeviceSpec(device_type=kind, device_index=0), "default")
        elif res.spec.device_index is None:
            res.fill(DeviceSpec(device_type=res.spec.device_type, device_index=0), "default")

    def check(self, op: Op, res: _Resolution) -> str:
        """Empty when the device exists and has a kernel; else the soft fallback's reason (or an error)."""
        problem = self.problem(op, res.spec)
        if problem is None:
            return ""
        if not self.config.soft:
            self.diagnostics.append(self.spec.document.diagnostic(
                "placement", _device_path(op), problem,
                "pin it to an existing device with a kernel, or set placement.soft: true"))
            return ""
        requested, fallback = res.spec, self.fallback(op, res.spec)
        changed = [name for name in FIELDS if getattr(fallback, name) != getattr(requested, name)]
        if "device_type" in changed:  # CPU:0 after GPU:0: the index belongs to the new type
            changed.append("device_index")
        for name in changed:
            res.sources[name] = "soft fallback"
        res.spec = fallback
        still = self.problem(op, fallback)
        if still is not None:  # e.g. a GPU-only call op on a task without a GPU
            detail = "it is on the fallback device already" if fallback == requested else still
            self.diagnostics.append(self.spec.document.diagnostic(
                "placement", _device_path(op), f"{problem}; soft placement cannot fall back: {detail}",
                "give the op a kernel for a device the cluster has, or add that device"))
        return problem

    def problem(self, op: Op, spec: DeviceSpec) -> str | None:
        prefix = f"Could not satisfy explicit device specification '{spec}' for op '{op.name}'"
        job = self.cluster.job(spec.job)
        if job is None:
            return f"{prefix}: the cluster has no job '{spec.job}'"
        if spec.task is None or spec.task >= job.tasks:
            return f"{prefix}: job '{job.name}' has tasks 0..{job.tasks - 1}"
        if spec.replica not in (0, None):
            return f"{prefix}: only replica 0 exists"
        if spec.device_type == "GPU":
            n = job.logical_gpus
            if n == 0:
                return f"{prefix}: the cluster has no GPU on that task"
            if spec.device_index != ANY and isinstance(spec.device_index, int) and spec.device_index >= n:
                return f"{prefix}: the cluster has {_gpu_range(n)} on that task"
        elif spec.device_index not in (0, ANY):
            return f"{prefix}: the cluster has only CPU:0 on that task"
        kernels = kernels_of(op.kind, op.params)
        if spec.device_type not in kernels:
            return (f"Could not satisfy explicit device specification '{spec}' because no supported kernel for "
                    f"{spec.device_type} devices is available for op '{op.name}' ({op.kind})")
        return None

    def fallback(self, op: Op, spec: DeviceSpec) -> DeviceSpec:
        job = self.cluster.job(spec.job)
        if job is None or spec.task is None or spec.task >= job.tasks:
            job = self.cluster.job(self.cluster.default_job)
            assert job is not None
            spec = DeviceSpec(job.name, 0, 0)
        has_gpu = job.logical_gpus > 0 and "GPU" in kernels_of(op.kind, op.params)
        return DeviceSpec(job.name, 0, spec.task, "GPU" if has_gpu else "CPU", 0)


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
    return Plan(spec, placements, (), tuple(placer.diagnostics))
