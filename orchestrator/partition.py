"""Device partitions: which ops of one device run together, as one Dask task.

Policy (TensorFlow partitions a graph by device; so do we, within what Dask
can express). Ops are taken in the plan's order; each joins the open
partition of its device only if that changes nothing a user could observe
or wait for:

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
* **Exact semantics.** Ops on ``GPU:*`` (Dask picks the GPU) are alone.
  Ops join only partitions of the same ``retries``: Dask retries a
  partition as a whole, from its inputs. (``timeout`` stays per op: the
  runtime times each op inside its partition.)

With these rules the partition graph is acyclic (every value a partition
reads was made before its first op; every value it lends out, after its
ops) and no path through it is longer than through the ops alone.

State: one pass over the ops, keeping per device the open partition, its
inputs and, per op of it, the inputs it depends on.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from .devices import DeviceSpec
from .model import Plan


@dataclass(frozen=True)
class Partition:
    """Ops of one device that run as one task, in this order."""

    index: int
    device: DeviceSpec
    ops: tuple[str, ...]
    retries: int = 0

    @property
    def label(self) -> str:
        """``first op`` or ``first op+N``: how keys and pictures name it."""
        return self.ops[0] if len(self.ops) == 1 else f"{self.ops[0]}+{len(self.ops) - 1}"


_NONE: frozenset[str] = frozenset()


@dataclass
class _Open:
    ops: list[str]
    imports: frozenset[str]
    retries: int
    depends: dict[str, frozenset[str]] = field(default_factory=dict)  # op -> the imports it depends on


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
    members = set(chosen).difference(external)
    placements = plan.placement_index
    where = {name: p.device_name for name, p in placements.items()}  # canonical names: fast to compare
    if threads is None:
        threads = {d.name: d.threads for d in spec.cluster.devices}
    needs_of: dict[str, tuple[str, ...]] = {}
    exports: set[str] = set(cut_after)  # ops whose value (or completion) is wanted elsewhere, or at once
    readers: dict[str, int] = {}
    for op in spec.ops:
        needs = tuple(dict.fromkeys([ref.op for ref in op.inputs] + list(op.after)))
        here = where[op.name]
        anywhere = here.endswith(":*")
        for dep in needs:
            if where.get(dep, here) != here or anywhere:
                exports.add(dep)
        if op.name in members:
            needs_of[op.name] = needs
            for dep in needs:
                readers[dep] = readers.get(dep, 0) + 1
    parts: list[tuple[DeviceSpec, list[str], int]] = []
    open_on: dict[str, _Open] = {}
    default_retries = spec.run.retries
    for name in chosen:
        if name not in members:
            continue
        device = where[name]
        retries = spec.op(name).retries or default_retries
        needs = needs_of[name]
        part = open_on.get(device)
        joined = False
        if part is not None:
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
            part = _Open([name], imports, retries, {name: imports})
            parts.append((placements[name].device, part.ops, retries))
            open_on[device] = part
        if device.endswith(":*") or name in exports:
            open_on.pop(device, None)
    return tuple(Partition(i, device, tuple(ops), retries) for i, (device, ops, retries) in enumerate(parts))


def _extends_chain(part: _Open, local: list[str], readers: Mapping[str, int]) -> bool:
    """On a multi-threaded device: join only the partition's last op, and only if nothing else reads it."""
    last = part.ops[-1]
    return local == [last] and readers.get(last, 0) == 1


def published(plan: Plan, parts: Sequence[Partition], wanted: Collection[str] = ()) -> dict[int, tuple[str, ...]]:
    """Per partition, the values (``op`` or ``op:i``) read outside it, in its op order.

    ``wanted`` adds refs the caller needs besides readers (outputs, a loop's
    carried state and metrics). A control edge (``after``) needs no value.
    """
    spec = plan.spec
    home = {name: part.index for part in parts for name in part.ops}
    needed: dict[int, set[str]] = {}
    for op in spec.ops:
        here = home.get(op.name)
        for ref in op.inputs:
            source = home.get(ref.op)
            if source is not None and source != here:
                needed.setdefault(source, set()).add(str(ref))
    for text in wanted:
        op_name = text.rpartition(":")[0] if text.rpartition(":")[2].isdigit() else text
        source = home.get(op_name)
        if source is not None:
            needed.setdefault(source, set()).add(text)
    out: dict[int, tuple[str, ...]] = {}
    for part in parts:
        refs = needed.get(part.index, set())
        order = {name: i for i, name in enumerate(part.ops)}
        out[part.index] = tuple(sorted(refs, key=lambda r: (order[r.rpartition(":")[0] if r.rpartition(":")[2].isdigit()
                                                                  else r], r)))
    return out
