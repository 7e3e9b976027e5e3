"""The graph builder: tasks for ops, partitions, moves, control edges and fetches, into one Dask graph.

Every task is pinned through its device's identity resource (or, on
``GPU:*``, ``GPU`` and its task's resource); the builder owns the rules by
which values cross devices:

* A value used on another pinned device crosses once per consuming device.
  With one reading task there, Dask fetches it as that task's dependency;
  with several (or, in loops, a value read every step) it goes through one
  ``move`` task on that device, which all readers share — so Dask can never
  fetch it twice, and the copy to a GPU happens once.
* A tuple (a multi-output op, or a partition returning several values) is
  read in place by readers on its device; for another device the one value
  needed is cut out by a getitem task beside it, so only that value crosses.
* A control edge (``after``) depends on a ``done`` token task that runs on
  the producer's device and returns ``None``: no array moves.
* A sweep's gathering op waits for every copy's last ops and reads them as
  markers after its inputs: in place on its own worker, else through a
  ``copy_failed`` task beside the op, which gives the copy's failure or None.
"""

from __future__ import annotations

import hashlib
import operator
import os
from dataclasses import dataclass
from typing import Any, Callable, Collection, Mapping, Sequence

from dask.task_spec import Task, TaskRef

from ..devices import ANY, DeviceSpec
from .dask_keys import KeyNamer, TaskNames
from .records import CompiledGraph, Located
from ..plan.records import Partition, Plan
from ..spec.records import Op, OpRef
from ..ops import lookup
from ..runtime import OpTask, PartitionTask, copy_failed, move, resources_for, run_op, run_partition, slot_resources, \
    to_host
from ..runtime import token as control_token


def copy_role(op: Op) -> str:
    """``copy`` for an op of a sweep's copy outside its loops (it fails alone: a CopyFailed goes on in its place),
    ``gather`` for a sweep's select, pick, gather, combine and table (they read failed copies), else ``""``:
    from the op's scope, which the spec stage decided."""
    scope = op.scope
    if scope.copies and scope.role not in ("step", "state"):
        return "copy"
    return "gather" if scope.part == "gathering" else ""


def copy_sweeps(plan: Plan) -> dict[str, str]:
    """Op of a sweep's copy (as :func:`copy_role` says ``copy``) -> the outermost sweep whose copy made it."""
    return {op.name: op.scope.copies[0][0] for op in plan.spec.ops if copy_role(op) == "copy"}


def copy_marks(plan: Plan) -> dict[str, tuple[int, ...]]:
    """A sweep's gathering op -> the copy of each of its inputs, then of each op it waits for (its ``after``: the
    copies' last ops, whose markers tell the worker which copies failed)."""
    # (a pick nothing reads is pruned: not in the spec's ops)
    return {g.op: g.copies for search in plan.spec.sweeps for g in search.gathering if g.op in plan.spec.op_index}


def thread_slots(plan: Plan) -> tuple[dict[str, float], dict[str, int]]:
    """(copy op -> the slots its task takes, GPU -> the slots every other task takes) on GPUs of several threads.

    A GPU worker offers a slot per thread. Its tasks take them all, so they run
    one at a time as the memory plan counts them; a copy of a sweep packed
    there takes the slots the plan gave it (``CopySlot.slots``, by its size:
    ``plan.memory.packing``), so Dask starts copies beside each other only
    while their sizes fit under the cap. The plan's slots are multiples of
    1/1024, which Dask's sums of floats add and take away exactly. A copy's
    op on another device than its home takes every slot there.
    """
    gpu_slots = {d.name: d.threads for d in plan.spec.cluster.devices if d.is_gpu and d.threads > 1}
    copy_slots: dict[str, float] = {}
    if not gpu_slots:
        return copy_slots, gpu_slots
    for search in plan.spec.sweeps:
        packing = plan.packing_of(search.name)
        if packing is None:
            continue
        for p in plan.placements:
            index = plan.spec.op(p.op).scope.copy_in(search.name)
            slot = packing.copies[index] if index is not None else None
            if slot is not None and slot.device == p.device_name and p.device_name in gpu_slots:
                copy_slots[p.op] = slot.slots
    return copy_slots, gpu_slots


def _short(device: DeviceSpec) -> str:
    return f"{device.job}/{device.task}/{device.short()}"


def _digest(key: str) -> str:
    """A short stable name for a Dask key, to make other keys of."""
    return hashlib.sha1(key.encode()).hexdigest()[:12]


Resolve = Callable[[OpRef], Located]


class GraphBuilder:
    """Accumulates tasks for ops (possibly of several loop steps) into one Dask graph."""

    def __init__(self, plan: Plan, token: str, base_dir: str = ".", suffix: str = "",
                 known_moves: Mapping[tuple[str, str], str] | None = None, shared_keys: Collection[str] = (),
                 out_dir: str | None = None, task_names: TaskNames = "op",
                 readers: Mapping[tuple[str, str], int] | None = None, host_crossings: bool = False):
        self.plan, self.spec, self.token, self.base_dir = plan, plan.spec, token, base_dir
        # a device array (CuPy's) bound for a device without a GPU crosses as a host copy made where it lives:
        # Dask would otherwise rebuild the device array on the receiver, which has no GPU to put it on
        self.host_crossings = host_crossings
        self.names = KeyNamer(task_names)
        self.out_dir = out_dir or base_dir  # save ops write here; load and call read from base_dir
        self.suffix = suffix or f"-{token}"
        self.tasks: dict[str, Any] = {}
        self.resources: dict[str, Mapping[str, float]] = {}
        self.retries: dict[str, int] = {}
        self.owner: dict[str, str] = {}
        self.partition_ops: dict[str, tuple[str, ...]] = {}  # partition key -> its ops (errors name them)
        self.last_key = ""  # the key of the last partition added
        self.step: tuple[int, int] | None = None  # the loop step(s) the tasks added now run (CompiledGraph.steps)
        self.steps: dict[str, tuple[int, int]] = {}
        self.moves: dict[tuple[str, str], str] = dict(known_moves or {})
        self.new_moves: dict[tuple[str, str], str] = {}
        self.crossings: set[tuple[str, str]] = set()  # (source key, device): every value sent somewhere
        self.shared = set(shared_keys)
        self.readers = readers if readers is not None else op_readers(plan)
        self._resources_of: dict[DeviceSpec, Mapping[str, float]] = {}
        self.copy_slots, self.gpu_slots = thread_slots(plan)
        self.marks = copy_marks(plan)  # a sweep's gathering ops: the copy of each input and marker
        self.default_timeout, self.log = plan.spec.run.timeout, plan.spec.placement.log

    def add(self, key: str, task: Any, device: DeviceSpec, op: str, n_retries: int) -> None:
        self.tasks[key] = task
        self.resources[key] = self.task_resources(device, op)
        self.retries[key] = 0 if self.spec.run.retry_on else n_retries  # (retry_on: the op retries in place)
        self.owner[key] = op
        if self.step is not None:
            self.steps[key] = self.step

    def task_resources(self, device: DeviceSpec, op: str) -> Mapping[str, float]:
        """What a task of ``op`` pinned to ``device`` asks for: a packed copy's share of the GPU's slots, else
        one (read-only) mapping per device, shared by its tasks."""
        share = self.copy_slots.get(op)
        if share is not None:
            return slot_resources(device, share)
        resources = self._resources_of.get(device)
        if resources is None:
            slots = self.gpu_slots.get(device.to_string())
            resources = resources_for(device) if slots is None else slot_resources(device, slots)
            self._resources_of[device] = resources
        return resources

    def item(self, base: Located, ref: OpRef, suffix: str = "") -> Located:
        """Output ``ref.output`` of a multi-output op: read in place by readers on its device."""
        if ref.output is None or self.spec.op(ref.op).outputs == 1:
            return base
        return Located(base.key, base.device, ref.output)

    def materialize(self, value: Located, ref: OpRef) -> Located:
        """One output of a tuple as a key of its own (a getitem beside it): what leaves the device."""
        if value.index is None:
            return value
        key = f"{value.key}[{value.index}]"
        if key not in self.tasks:
            self.add(key, Task(key, operator.getitem, TaskRef(value.key), value.index), value.device, ref.op, 0)
        return Located(key, value.device)

    def arrive(self, value: Located, ref: OpRef, consumer: DeviceSpec, n_retries: int) -> tuple[str, int | None]:
        """(key, index) to read ``value`` from on ``consumer``: moved there once, then reused."""
        if value.device == consumer:
            return value.key, value.index  # same worker: index the tuple in place, no task
        value = self.materialize(value, ref)  # only the output needed crosses
        if self.host_crossings and value.device.device_type == "GPU" and consumer.device_type != "GPU":
            value = Located(self.to_host(value, ref), value.device)
        if consumer.device_index == ANY:
            return value.key, None
        pair = (value.key, consumer.to_string())
        if pair in self.moves and pair not in self.new_moves:
            return self.moves[pair], None  # moved by an earlier loop window: not a new crossing
        self.crossings.add(pair)
        if self.readers.get((str(ref), pair[1]), 0) <= 1 and value.key not in self.shared:
            # one reader there: Dask fetches it once as that task's dependency; no extra task
            return value.key, None
        if pair not in self.moves:
            # an outer value read in loops: one key per value and device, whichever loop or window asks, so
            # that the loops of a sweep's copies on one GPU share one copy of the data they all read (Dask
            # keeps a key once; the plan counts it once: plan.memory.loops)
            tail = f"-{self.token}-{_digest(value.key)}" if value.key in self.shared else \
                f"{self.suffix}-{len(self.moves)}"
            key = self.names.helper("move", f"{ref}@{_short(consumer)}", tail)
            self.add(key, Task(key, move, str(ref), consumer.to_string(), self.token, TaskRef(value.key)),
                     consumer, ref.op, n_retries)
            self.moves[pair] = key
            self.new_moves[pair] = key
        return self.moves[pair], None

    def add_op(self, op_name: str, resolve: Resolve, step: int = 0, suffix: str | None = None) -> Located:
        suffix = self.suffix if suffix is None else suffix
        spec, placement = self.spec, self.plan.placement(op_name)
        op, device = spec.op(op_name), placement.device
        n_retries = op.retries or spec.run.retries
        arrivals = [self.arrive(resolve(ref), ref, device, n_retries) for ref in op.inputs]
        args = [TaskRef(key) for key, _ in arrivals]
        indices = tuple(index for _, index in arrivals)
        marked = op_name in self.marks
        for name in op.after:  # one token task per producer, even on the same device (as op graphs always had)
            if marked:  # a copy's last op: whether it failed, read beside it
                args.append(TaskRef(self.marker(name, resolve, None, suffix)[0]))
                continue
            producer = resolve(OpRef(name))
            done_key = self.names.helper("done", name, suffix)
            if done_key not in self.tasks:
                self.add(done_key, Task(done_key, control_token, TaskRef(producer.key)), producer.device, name, 0)
            args.append(TaskRef(done_key))
        payload = self.op_task(op_name, step, indices)
        key = self.names.op(op.name, op.kind, op.params, suffix)
        self.add(key, Task(key, run_op, payload, *args), device, op.name, n_retries)
        return Located(key, device)

    def marker(self, name: str, resolve: Resolve, consumer: DeviceSpec | None, suffix: str) -> tuple[str, int | None]:
        """(key, element) where a gathering op on ``consumer`` reads whether a copy's last op ``name`` failed: the
        value itself on the same worker, else a ``copy_failed`` task beside it (no array moves)."""
        value = resolve(OpRef(name, 0 if self.spec.op(name).outputs > 1 else None))
        if consumer is not None and value.device == consumer and consumer.device_index != ANY:
            return value.key, value.index
        key = self.names.helper("failed", name, suffix)
        if key not in self.tasks:
            element = -1 if value.index is None else value.index
            self.add(key, Task(key, copy_failed, TaskRef(value.key), element), value.device, name, 0)
        return key, None

    def done(self, name: str, producer: Located, consumer: DeviceSpec, suffix: str) -> str:
        """The key a control edge waits for: the producer itself on its own device, else a token beside it."""
        if producer.device == consumer and consumer.device_index != ANY:
            return producer.key  # same worker: waiting for it moves nothing
        done_key = self.names.helper("done", name, suffix)
        if done_key not in self.tasks:
            self.add(done_key, Task(done_key, control_token, TaskRef(producer.key)), producer.device, name, 0)
        return done_key

    def add_partition(self, part: Partition, resolve: Resolve, completes: Callable[[str], Located],
                      publish: Sequence[str], step: int = 0, suffix: str | None = None) -> dict[str, Located]:
        """One task running ``part``'s ops in order; where each of the ``publish`` refs will be.

        ``resolve`` locates values made outside the partition, ``completes`` the
        task that completes an op outside it (for control edges).
        """
        suffix = self.suffix if suffix is None else suffix
        spec, device, by_name = self.spec, part.device, self.spec.op_index
        ops = [by_name[name] for name in part.ops]  # each op looked up once: its record is carried from here
        local = {name: j for j, name in enumerate(part.ops)}
        arg_of: dict[tuple[str, int | None], int] = {}
        args: list[TaskRef] = []
        arg_index: list[int] = []
        controls: list[TaskRef] = []
        wires: list[list[tuple[bool, int, int]]] = []  # per op: (is_local, slot, element)
        last_reader: dict[tuple[bool, int], int] = {}
        for j, op in enumerate(ops):
            name = op.name
            row = []
            for ref in op.inputs:
                element = ref.output if ref.output is not None and by_name[ref.op].outputs > 1 else -1
                if ref.op in local:
                    wire = (True, local[ref.op], element)
                else:
                    key, index = self.arrive(resolve(ref), ref, device, part.retries)
                    slot = arg_of.get((key, index))
                    if slot is None:
                        slot = arg_of[(key, index)] = len(args)
                        args.append(TaskRef(key))
                        arg_index.append(-1 if index is None else index)
                    wire = (False, slot, -1)
                row.append(wire)
                last_reader[(wire[0], wire[1])] = j
            if name in self.marks:  # a gathering op: each copy's last op as a marker after its inputs
                row += [self.marker_wire(producer, local, resolve, device, suffix, arg_of, args, arg_index)
                        for producer in op.after]
                last_reader.update({(wire[0], wire[1]): j for wire in row[len(op.inputs):]})
            wires.append(row)
            for producer in op.after if name not in self.marks else ():
                if producer not in local:
                    controls.append(TaskRef(self.done(producer, completes(producer), device, suffix)))
        n_args = len(args)
        refs = [OpRef.parse(text) for text in publish]
        kept = {(True, local[r.op]) for r in refs}
        frees = _frees(len(part.ops), n_args, last_reader, kept)
        inputs = tuple(tuple((n_args + slot if is_local else slot, element) for is_local, slot, element in row)
                       for row in wires)
        returned = tuple((n_args + local[r.op], r.output if r.output is not None and spec.op(r.op).outputs > 1
                          else -1) for r in refs)
        payload = PartitionTask.from_rows(part.label, [self.values_of(op, step) for op in ops], inputs,
                                          frees, returned, n_args,
                                          tuple(arg_index) if any(i >= 0 for i in arg_index) else ())
        first = ops[0]
        key = self.names.partition(part.label, first.kind, first.params, suffix)
        self.add(key, Task(key, run_partition, payload, *args, *controls), device, part.ops[0], part.retries)
        self.partition_ops[key] = part.ops
        self.last_key = key
        return {publish[0]: Located(key, device)} if len(refs) == 1 else \
            {text: Located(key, device, i) for i, text in enumerate(publish)}

    def marker_wire(self, name: str, local: Mapping[str, int], resolve: Resolve, device: DeviceSpec, suffix: str,
                    arg_of: dict[tuple[str, int | None], int], args: list[TaskRef],
                    arg_index: list[int]) -> tuple[bool, int, int]:
        """The wire of a gathering op's marker of a copy's last op ``name`` in a partition (see ``marker``)."""
        if name in local:
            return True, local[name], -1
        key, index = self.marker(name, resolve, device, suffix)
        slot = arg_of.get((key, index))
        if slot is None:
            slot = arg_of[(key, index)] = len(args)
            args.append(TaskRef(key))
            arg_index.append(-1 if index is None else index)
        return False, slot, -1

    def op_task(self, op_name: str, step: int, indices: tuple[int | None, ...] = ()) -> OpTask:
        """The payload of one op: what its kernel needs on the worker, paths resolved as the op declares."""
        return OpTask.from_values(*self.op_values(op_name, step, indices))

    def op_values(self, op_name: str, step: int, indices: tuple[int | None, ...] = ()) -> tuple[Any, ...]:
        """An op's payload as its values in OpTask's field order (a partition packs them as columns at once)."""
        return self.values_of(self.spec.op(op_name), step, indices)

    def values_of(self, op: Op, step: int, indices: tuple[int | None, ...] = ()) -> tuple[Any, ...]:
        """:meth:`op_values` of the op in hand."""
        definition = lookup(op.kind)
        params = op.params
        if definition is not None and definition.writes:
            params = {**params, **{p: os.path.join(self.out_dir, str(params[p])) for p in definition.writes
                                   if p in params}}
        needs_dir = definition is not None and definition.needs_base_dir
        run = self.spec.run
        return (op.name, op.kind, params, len(op.inputs), self.token, step, op.input_keys,
                op.timeout if op.timeout is not None else self.default_timeout, self.log,
                self.base_dir if needs_dir else "", op.outputs, indices if indices.count(None) != len(indices) else (),
                copy_role(op), op.scope.indices, self.marks.get(op.name, ()),
                (op.retries or run.retries) if run.retry_on else 0, run.retry_on)

    def to_host(self, value: Located, ref: OpRef) -> str:
        value = self.materialize(value, ref)
        key = self.names.helper("host", str(ref), self.suffix)
        if key not in self.tasks:
            self.add(key, Task(key, to_host, TaskRef(value.key)), value.device, ref.op, 0)
        return key

    def build(self, values: Mapping[str, Located], output_keys: Mapping[str, str],
              sink_keys: tuple[str, ...] = ()) -> CompiledGraph:
        from dask.highlevelgraph import HighLevelGraph, MaterializedLayer

        annotations: dict[str, Any] = {"resources": _Lookup(self.resources, {})}
        if any(self.retries.values()):  # (none asked for: no annotation for the scheduler to read per key)
            annotations["retries"] = _Lookup(self.retries, 0)
        layer = MaterializedLayer(self.tasks, annotations=annotations)
        name = f"orchestrator{self.suffix}"
        graph = HighLevelGraph({name: layer}, {name: set()})
        return CompiledGraph(graph, self.tasks, dict(values), dict(output_keys), self.resources, self.retries,
                             self.owner, self.token, dict(self.new_moves), sink_keys, len(self.crossings),
                             dict(self.partition_ops), steps=dict(self.steps))


def op_readers(plan: Plan) -> dict[tuple[str, str], int]:
    """How many ops on each device read each value: one reader needs no move task."""
    spec = plan.spec
    count: dict[tuple[str, str], int] = {}
    for p in plan.placements:
        for text in {str(ref) for ref in spec.op(p.op).inputs}:
            count[(text, p.device_name)] = count.get((text, p.device_name), 0) + 1
    return count


@dataclass(frozen=True)
class _Lookup:
    """A picklable key-callable annotation; unknown keys get ``default`` (never None)."""

    table: Mapping[str, Any]
    default: Any

    def __call__(self, key: str) -> Any:
        return self.table.get(key, self.default)


def _frees(n_ops: int, n_args: int, last_reader: Mapping[tuple[bool, int], int],
           kept: Collection[tuple[bool, int]]) -> tuple[tuple[int, ...], ...]:
    """Per op of a partition, the slots no later op reads (arguments, then the ops' values), to drop at once."""
    frees: list[list[int]] = [[] for _ in range(n_ops)]
    for (is_local, slot), j in last_reader.items():
        if (is_local, slot) not in kept:
            frees[j].append(n_args + slot if is_local else slot)
    for j in range(n_ops):
        if (True, j) not in kept and (True, j) not in last_reader:
            frees[j].append(n_args + j)  # read by no later op here and not returned: drop it at once
    return tuple(tuple(sorted(f)) for f in frees)
