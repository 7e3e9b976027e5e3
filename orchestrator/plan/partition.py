"""Planning the tasks: device partitions, and how each loop runs. Decided once, kept in the plan.

Memory, compile and the renderers read the plan's :class:`~orchestrator.plan.records.TaskPlan`
(:func:`plan_tasks`); none of them partitions the ops or judges a loop again.

Policy of partitions (TensorFlow partitions a graph by device; so do we, within
what Dask can express). Ops are taken in the plan's order; each joins the
open partition of its device only if that changes nothing a user could
observe or wait for:

* **Inputs enter at the start.** A partition waits for all its inputs from
  other partitions before its first op runs. An op joins only when every
  value it needs from outside is already among those inputs, and all of
  them are its ancestors (it could not have started earlier anyway).
  Otherwise it starts a new partition, so no op waits for a value it does
  not need.
* **Outputs leave at the end.** A partition's values become visible only
  when it finishes. An op whose value is read on another device (or by an
  op on ``GPU:*``, or whose completion another device waits for through
  ``after``) closes its partition, so no reader elsewhere waits for work
  after it.
* **No parallelism is lost.** On a device with one thread (every GPU, and a
  CPU with ``cpu_threads: 1``) the ops run one after the other anyway. On a
  device with more threads only linear chains are joined (an op whose one
  local input is the partition's last op, read by nothing else), so
  independent ops still run side by side.
* **A sweep's copy on a GPU is one task**: its ops there, whatever inputs
  they take (an exception to the first rule). The memory plan counts a copy
  as a whole, one at a time or packed beside others (``plan.memory.packing``);
  as tasks of their own, Dask would start every copy's first ops before any
  copy's last, as they wait for nothing of each other.
* **Exact semantics.** Ops on ``GPU:*`` (Dask picks the GPU) are alone.
  Ops join only partitions of the same ``retries``: Dask retries a
  partition as a whole, from its inputs. (``timeout`` stays per op: the
  runtime times each op inside its partition.)

With these rules the partition graph is acyclic (every value a partition
reads was made before its first op; every value it lends out, after its
ops) and no path through it is longer than through the ops alone. So a run
may take any subset of a partition's ops that its stage needs (the rest
came from the cache), or cut a partition after an op whose value it wants
at once, and still wait for nothing it does not need.

Scopes are partitioned apart, as a run runs them: the ops outside loops (a
loop's exports, ``NAME.state`` and ``NAME.metric``, are the driver's, not
tasks), and each loop's step (its own body: not its state, nor the ops of a
loop inside it).

Policy of loops (:func:`loop_mode`): a loop holding another runs step by
step (``nested``); otherwise a loop runs a task per op per step at
``--granularity op``, else in gang windows (a task per device per window,
``compile.gang``) unless :func:`gang_blocker` names what forbids them, and
then a task per partition per step. The plan keeps the mode of every loop
for both granularities: the granularity is a run setting, and one plan is
shown by ``orchestrate plan`` and run at either.

State: one pass over the ops per scope, keeping per device the open
partition, its inputs and, per op of it, the inputs it depends on. Nothing
is kept between calls.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace

from ..devices import ANY, DeviceSpec
from .records import GRANULARITIES, IN_PROCESS, LoopMode, Partition, Plan, TaskPlan
from ..spec.records import Loop, Op, OpRef, Scope, Spec

__all__ = ["Partition", "gang_blocker", "loop_mode", "partition", "plan_tasks", "published"]


def plan_tasks(plan: Plan) -> Plan:
    """``plan`` with its tasks planned: the partitions of each scope, and every loop's mode at each granularity."""
    spec = plan.spec
    order = [p.op for p in plan.placements]
    in_loops = {name for loop in spec.loops for name in loop.body}
    exports = {name for loop in spec.loops for name in loop.exports}
    top = partition(plan, [name for name in order if name not in in_loops and name not in exports]
                    if in_loops or exports else order)
    loops: dict[str, tuple[Partition, ...]] = {}
    for loop in spec.loops:
        inner = {name for other in spec.descendants(loop) for name in (*other.body, *other.exports)}
        placeholders = {var.placeholder for var in loop.state}
        body = set(loop.body) - inner
        loops[loop.name] = partition(plan, [name for name in order if name in body], external=placeholders)
    modes = {g: {loop.name: LoopMode(*loop_mode(plan, loop, g)) for loop in spec.loops} for g in (*GRANULARITIES,
                                                                                                    IN_PROCESS)}
    return replace(plan, tasks=TaskPlan(top, loops, modes))


def gang_blocker(plan: Plan, loop: Loop) -> str:
    """Why ``loop`` cannot run in gang windows, or ``""`` when it can (what must hold, and why: ``compile.gang``)."""
    spec = plan.spec
    if spec.run.retries or any(op.retries for op in spec.ops):
        return "ops have retries, which Dask gives per task: the loop runs a task per device partition per step"
    if spec.run.on_device_lost != "fail":  # a gang window run again alone waits for peers that sent long ago
        return (f"run.on_device_lost: {spec.run.on_device_lost} redoes a lost device's tasks, and a gang window "
                f"cannot be redone alone: the loop runs a task per device partition per step")
    body = set(loop.body)
    placeholders = {var.placeholder for var in loop.state}
    for name in loop.body:
        if plan.placement(name).device.device_index == ANY and name not in placeholders:
            return f"op '{name}' runs on GPU:* (Dask picks its GPU at run time, so its peers cannot know where)"
    if loop.children:
        return f"it holds the loop '{loop.children[0]}'"
    for var in loop.state:
        if var.update.op not in body or var.update.op in placeholders:
            return f"state '{var.name}' is not updated by an op of the body"
    for name, ref in loop.metrics:
        if ref.op not in body or ref.op in placeholders:
            return f"metric '{name}' is not made by an op of the body"
    return ""


def loop_mode(plan: Plan, loop: Loop, granularity: str) -> tuple[str, str]:
    """How ``loop`` runs at ``granularity`` (or :data:`IN_PROCESS`, ``--sync``'s): ``nested``, ``gang``,
    ``partition`` or ``op``, and in words why."""
    if loop.children:
        return "nested", (f"step by step, because it holds the loop '{loop.children[0]}': each step runs its own "
                          "ops, then that loop")
    if granularity == "op":
        return "op", "a task per op per step (--granularity op)"
    blocker = gang_blocker(plan, loop)
    if blocker:
        return "partition", f"a task per device partition per step, because {blocker}"
    if granularity == IN_PROCESS:  # --sync: no workers to hold windows side by side
        return "partition", ("a task per device partition per step, in this process (--sync): the steps run one "
                             "after another, no windows side by side")
    return "gang", _gang_why(plan, loop)


def _gang_why(plan: Plan, loop: Loop) -> str:
    """A gang loop's windows in words: a task per device, or per worker process where devices share one
    (``processes: host``), and how values go between them."""
    devices = {plan.placement(n).device_name for n in loop.body}
    processes = set(map(plan.spec.cluster.standing_for, devices))
    count = f"{len(devices)} device{'s' if len(devices) != 1 else ''}"
    if len(processes) == len(devices):
        return f"one task per device per window of {loop.window} steps ({count}), values sent worker to worker"
    if len(processes) == 1:
        return (f"one task per window of {loop.window} steps ({count} in one worker process), values handed over "
                "within it")
    return (f"one task per worker process per window of {loop.window} steps ({count} in {len(processes)} "
            "processes), values handed over within a process and sent worker to worker between them")


_NONE: frozenset[str] = frozenset()
CopyKey = tuple[str, int]  # (sweep, copy index): a sweep copy


@dataclass
class _Open:
    ops: list[str]
    imports: frozenset[str]
    retries: int
    depends: dict[str, frozenset[str]] = field(default_factory=dict)  # op -> the imports it depends on
    copy: CopyKey | None = None  # the sweep copy whose ops on a GPU make this partition


def partition(plan: Plan, names: Sequence[str] | None = None, external: Collection[str] = (),
              threads: Mapping[str, int] | None = None, cut_after: Collection[str] = ()) -> tuple[Partition, ...]:
    """Group ``names`` (default: every op; in the plan's order) into device partitions.

    ``external`` names ops whose values come from elsewhere (a loop's carried
    state): they are inputs, never members. ``threads`` maps a device name to
    its threads (default: the cluster's). ``cut_after`` names ops whose value
    is wanted as soon as it is made (the cache writes it at once): each ends
    its partition, as a value read on another device does.
    """
    spec = plan.spec
    chosen = [p.op for p in plan.placements] if names is None else list(names)
    placements = plan.placement_index
    where = {name: p.device_name for name, p in placements.items()}  # canonical names: fast to compare
    if threads is None:
        threads = {d.name: d.threads for d in spec.cluster.devices}
    skip = set(external)
    exports, readers, copy_of = _tables(plan, chosen, skip, where, threads, cut_after)
    parts: list[tuple[DeviceSpec, list[str], int]] = []
    open_on: dict[str, _Open] = {}
    default_retries = spec.run.retries
    for name in chosen:
        if skip and name in skip:
            continue
        device = where[name]
        op = spec.op_index[name]
        retries = op.retries or default_retries
        needs = _needs(op)
        part = open_on.get(device)
        joined = False
        copy = copy_of.get(name)
        if part is not None and (copy is not None or part.copy is not None):
            joined = copy is not None and part.copy == copy and part.retries == retries and \
                _joins_copy(part, needs, copy, spec)
            if joined:
                part.imports = part.imports | frozenset(n for n in needs if n not in part.depends)
                part.ops.append(name)
                part.depends[name] = part.imports
        elif part is not None:
            depends_of = part.depends
            local = [n for n in needs if n in depends_of]
            outside = _NONE if len(local) == len(needs) else frozenset(n for n in needs if n not in depends_of)
            if len(local) == 1 and not outside:  # a chain: the common case, no new set
                depends = depends_of[local[0]]
            else:
                depends = outside.union(*(depends_of[n] for n in local)) if local else outside
            if part.retries == retries and outside <= part.imports and \
                    (depends is part.imports or part.imports <= depends) and \
                    (threads.get(device, 1) <= 1 or _extends_chain(part, local, readers)):
                part.ops.append(name)
                depends_of[name] = part.imports if depends == part.imports else depends
                joined = True
        if not joined:
            imports = frozenset(needs)
            part = _Open([name], imports, retries, {name: imports}, copy)
            parts.append((placements[name].device, part.ops, retries))
            open_on[device] = part
        if device.endswith(":*") or (name in exports and copy is None):
            open_on.pop(device, None)
    return tuple(Partition(i, device, tuple(ops), retries) for i, (device, ops, retries) in enumerate(parts))


def _tables(plan: Plan, chosen: Sequence[str], outside: Collection[str], where: Mapping[str, str],
            threads: Mapping[str, int], cut_after: Collection[str]) \
        -> tuple[set[str], dict[str, int], dict[str, CopyKey]]:
    """The ops wanted elsewhere; the readers of each op (only where a device has several threads, for
    :func:`_extends_chain`); the sweep copy of each op on a GPU (only where the cluster has GPUs).

    Each op's record is looked up once in :func:`partition`, and what it reads taken from it: a table by name
    costs more per look-up the larger the plan (``benchmarks/README.md``, B2), so only those a case needs are made.
    """
    chains = any(n > 1 for n in threads.values())
    gpus = any(d.is_gpu for d in plan.spec.cluster.devices)
    members = set(chosen).difference(outside) if chains or gpus else ()
    readers = _readers(plan, members) if chains else {}
    copy_of = _copies_on_shared_gpus(plan, members, where, threads) if gpus else {}
    return _exports(plan, where, cut_after), readers, copy_of


def _copies_on_shared_gpus(plan: Plan, members: Collection[str], where: Mapping[str, str],
                           threads: Mapping[str, int]) -> dict[str, CopyKey]:
    """Op -> its sweep copy, for copy ops on a GPU: each copy is one task there.

    The plan packs copies on a GPU of several threads (``plan.memory.packing``),
    counting what a copy holds as one whole, and runs them one at a time on a
    GPU of one; either way its ops in one partition keep a copy from being half
    run while others start (as separate tasks, Dask ran every copy's first ops
    before any copy's last, holding all their values at once). Its values leave
    when the copy ends.
    """
    gpus = {d.name for d in plan.spec.cluster.devices if d.is_gpu}
    if not gpus:
        return {}
    out = {}
    for name in members:
        scope = plan.spec.op(name).scope
        if scope.copy is not None and scope.sweep is not None and where[name] in gpus:
            out[name] = (scope.sweep, scope.copy)
    return out


def _joins_copy(part: _Open, needs: Sequence[str], copy: CopyKey, spec: Spec) -> bool:
    """A copy's op joins its copy's open partition unless it needs a value of the copy made elsewhere
    (that value may wait for this partition: joining would make a cycle). Its other inputs join the imports."""
    members = set(part.ops)
    return not any(n not in members and _copy_key(spec.op(n).scope) == copy for n in needs)


def _copy_key(scope: Scope) -> CopyKey | None:
    return (scope.sweep, scope.copy) if scope.sweep is not None and scope.copy is not None else None


def _needs(op: Op) -> tuple[str, ...]:
    """The ops ``op`` reads or waits for, each once, in order."""
    if not op.after and len(op.inputs) == 1:
        return (op.inputs[0].op,)  # the common case: no list, no dict
    return tuple(dict.fromkeys([ref.op for ref in op.inputs] + list(op.after)))


def _exports(plan: Plan, where: Mapping[str, str], cut_after: Collection[str]) -> set[str]:
    """The ops whose value (or completion) is wanted on another device, or at once."""
    exports: set[str] = set(cut_after)
    for op in plan.spec.ops:
        here = where[op.name]
        anywhere = here.endswith(":*")
        for dep in _needs(op):
            if anywhere or where.get(dep, here) != here:
                exports.add(dep)
    return exports


def _readers(plan: Plan, members: Collection[str]) -> dict[str, int]:
    """Per op, how many members read it or wait for it."""
    readers: dict[str, int] = {}
    for op in plan.spec.ops:
        if op.name in members:
            for dep in _needs(op):
                readers[dep] = readers.get(dep, 0) + 1
    return readers


def _extends_chain(part: _Open, local: list[str], readers: Mapping[str, int]) -> bool:
    """On a multi-threaded device: join only the partition's last op, and only if nothing else reads it."""
    last = part.ops[-1]
    return local == [last] and readers.get(last, 0) == 1


def published(plan: Plan, parts: Sequence[Partition], wanted: Collection[str] = (),
              home: Mapping[str, int] | None = None) -> dict[int, tuple[str, ...]]:
    """Per partition, the values (``op`` or ``op:i``) read outside it, in its op order.

    ``wanted`` adds refs the caller needs besides readers (outputs, a loop's
    carried state and metrics). A control edge (``after``) needs no value,
    but for a sweep's gathering op's: it reads whether each copy's last op
    failed from the op's value (beside it, when on another device). ``home``: each op's partition index,
    where the caller has it already (a table of every op is not made twice).
    """
    spec = plan.spec
    if home is None:
        home = {name: part.index for part in parts for name in part.ops}
    needed: dict[int, set[str]] = {}
    gathering = {g.op for search in spec.sweeps for g in search.gathering}
    for op in spec.ops:
        here = home.get(op.name)
        marks = [OpRef(a, 0 if spec.op(a).outputs > 1 else None) for a in op.after] if gathering and op.name in gathering else []
        for ref in (*op.inputs, *marks):
            source = home.get(ref.op)
            if source is not None and source != here:
                needed.setdefault(source, set()).add(str(ref))
    for text in wanted:
        source = home.get(OpRef.parse(text).op)
        if source is not None:
            needed.setdefault(source, set()).add(text)
    out: dict[int, tuple[str, ...]] = {}
    for part in parts:
        refs = needed.get(part.index, set())
        if not refs:
            out[part.index] = ()
            continue
        order = {name: i for i, name in enumerate(part.ops)}
        out[part.index] = tuple(sorted(refs, key=lambda r: (order[OpRef.parse(r).op], r)))
    return out
