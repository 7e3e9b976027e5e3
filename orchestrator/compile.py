"""Compile a plan into a Dask graph whose every task carries its device.

One task per op, in a single ``HighLevelGraph`` layer whose annotations are
key-callables (resources and retries per key); the graph is run with
``optimize_graph=False`` so fusion can never merge tasks of different devices
or drop their annotations (dask#7036).

* Pinning uses identity resources: a pinned op asks for
  ``{"device:<canonical name>": 1}``, which only the worker standing for that
  device offers — restart-proof, unlike worker addresses (distributed#8600).
  An op on ``GPU:*`` asks for ``{"GPU": 1, "task:<job/replica/task>": 1}`` and
  Dask picks the GPU.
* A value used on another pinned device goes through one ``move`` task on
  that device, so it crosses once per consuming device however many ops
  there read it.
* A control edge (``after``) depends on a ``done`` token task that runs on the
  producer's device and returns ``None``: no array moves.
* A multi-output op returns a tuple; ``NAME:i`` is a getitem task beside it.

Keys start with the op's name (``towers/1/c-<token>``), so the dashboard's
task stream groups them by op.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any, Mapping

from .devices import ANY, DeviceSpec
from .execute.cluster import device_resource, task_resource
from .execute.runtime import OpTask, move, run_op, to_host
from .execute.runtime import token as control_token
from .model import OpRef, Plan
from .ops import lookup


def resources_for(device: DeviceSpec) -> dict[str, float]:
    if device.device_index == ANY:
        return {"GPU": 1, task_resource(device): 1}
    return {device_resource(device.to_string()): 1}


def _short(device: DeviceSpec) -> str:
    return f"{device.job}/{device.task}/{device.short()}"


@dataclass(frozen=True)
class CompiledGraph:
    """A Dask graph plus what the runner needs to read it back."""

    graph: Any  # dask.highlevelgraph.HighLevelGraph
    tasks: Mapping[str, Any]
    op_keys: Mapping[str, str]  # op -> key of its value (the tuple for multi-output ops)
    value_keys: Mapping[str, str]  # "op" / "op:i" -> key of that value on its own device
    output_keys: Mapping[str, str]  # output ref -> key to gather (host-side value)
    resources: Mapping[str, Mapping[str, float]]
    retries: Mapping[str, int]
    key_owner: Mapping[str, str]  # key -> op it belongs to (for errors naming the op)
    token: str
    moves: tuple[tuple[str, str, str], ...] = field(default=())  # (value, from device, to device)
    sink_keys: tuple[str, ...] = ()  # ops nothing else waits for: computed, waited for, not fetched


def compile_plan(plan: Plan, token: str, base_dir: str = ".", host_outputs: bool = False,
                 step: int = 0, inject: Mapping[str, str] | None = None) -> CompiledGraph:
    """Build the graph. ``inject`` maps op names to keys already computed (loop state)."""
    from dask.highlevelgraph import HighLevelGraph, MaterializedLayer
    from dask.task_spec import Task, TaskRef

    spec = plan.spec
    suffix = f"-{token}" if step == 0 else f"-{token}-{step}"
    tasks: dict[str, Any] = {}
    resources: dict[str, Mapping[str, float]] = {}
    retries: dict[str, int] = {}
    owner: dict[str, str] = {}
    op_keys: dict[str, str] = dict(inject or {})
    value_keys: dict[str, str] = {}
    moved: dict[tuple[str, str], str] = {}
    moves: list[tuple[str, str, str]] = []
    device_of = {p.op: p.device for p in plan.placements}
    default_retries = spec.run.retries

    def add(key: str, task: Any, device: DeviceSpec, op: str, n_retries: int) -> None:
        tasks[key] = task
        resources[key] = resources_for(device)
        retries[key] = n_retries
        owner[key] = op

    def value_key(ref: OpRef) -> str:
        text = str(ref)
        if text in value_keys:
            return value_keys[text]
        base = op_keys[ref.op]
        if ref.output is None or spec.op(ref.op).outputs == 1:
            value_keys[text] = base
            return base
        key = f"{ref.op}:{ref.output}{suffix}"
        add(key, Task(key, operator.getitem, TaskRef(base), ref.output), device_of[ref.op], ref.op, 0)
        value_keys[text] = key
        return key

    def input_key(ref: OpRef, consumer: DeviceSpec, op_retries: int) -> str:
        key = value_key(ref)
        source = device_of.get(ref.op)
        if source is None or source == consumer or consumer.device_index == ANY:
            return key
        pair = (str(ref), consumer.to_string())
        if pair not in moved:
            move_key = f"move({ref}@{_short(consumer)}){suffix}"
            add(move_key, Task(move_key, move, str(ref), consumer.to_string(), token, TaskRef(key)), consumer, ref.op,
                op_retries)
            moved[pair] = move_key
            moves.append((str(ref), source.to_string(), consumer.to_string()))
        return moved[pair]

    for placement in plan.placements:
        if placement.op in op_keys:
            continue
        op = spec.op(placement.op)
        device = placement.device
        n_retries = op.retries or default_retries
        args = [TaskRef(input_key(ref, device, n_retries)) for ref in op.inputs]
        for name in op.after:
            done_key = f"done({name}){suffix}"
            if done_key not in tasks:
                add(done_key, Task(done_key, control_token, TaskRef(op_keys[name])), device_of[name], name, 0)
            args.append(TaskRef(done_key))
        definition = lookup(op.kind)
        payload = OpTask(
            name=op.name, kind=op.kind, tf_name=definition.tf_name if definition else op.kind,
            device=device.to_string(), params=dict(op.params), n_inputs=len(op.inputs), input_keys=op.input_keys,
            timeout=op.timeout if op.timeout is not None else spec.run.timeout, log=spec.placement.log,
            base_dir=base_dir, step=step, outputs=op.outputs, run=token)
        key = f"{op.name}{suffix}"
        add(key, Task(key, run_op, payload, *args), device, op.name, n_retries)
        op_keys[op.name] = key

    output_keys: dict[str, str] = {}
    for out in spec.outputs:
        key = value_key(out.ref)
        if host_outputs:
            host_key = f"host({out.ref}){suffix}"
            if host_key not in tasks:
                add(host_key, Task(host_key, to_host, TaskRef(key)), device_of[out.ref.op], out.ref.op, 0)
            key = host_key
        output_keys[str(out.ref)] = key

    # Ops nothing reads and no output names still run (a save, a side effect): the runner
    # waits for them without fetching their values.
    consumed = {ref.op for op in spec.ops for ref in op.inputs} | {a for op in spec.ops for a in op.after}
    consumed |= {out.ref.op for out in spec.outputs}
    sink_keys = [op_keys[p.op] for p in plan.placements if p.op not in consumed and p.op not in (inject or {})]

    layer = MaterializedLayer(tasks, annotations={
        "resources": _Lookup(resources, {}),
        "retries": _Lookup(retries, 0),
    })
    graph = HighLevelGraph({f"orchestrator{suffix}": layer}, {f"orchestrator{suffix}": set()})
    return CompiledGraph(graph, tasks, op_keys, value_keys, output_keys, resources, retries, owner, token,
                         tuple(moves), tuple(sink_keys))


@dataclass(frozen=True)
class _Lookup:
    """A picklable key-callable annotation; unknown keys get ``default`` (never None)."""

    table: Mapping[str, Any]
    default: Any

    def __call__(self, key: str) -> Any:
        return self.table.get(key, self.default)
