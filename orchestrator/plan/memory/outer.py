"""What a run holds of the values made outside loops: Dask's rules, and the staged run's.

A value a task uses only inside itself is dropped after its last reader
there (a partition frees it). A value other tasks read is a Dask key: its
device holds it, and so does every device that fetched it for a task, until
the last task reading it anywhere has ended (Dask forgets a key at once, not
replica by replica). Devices run side by side, so a device holds it through
each of its tasks that does not wait for all those readers, and through a
task it had ready when its own last reader ended (the release is a message
from the scheduler): :meth:`~.timeline.Timeline.released`. Values a
partition returns together (a tuple) live as long as the longest-lived of
them. Held to the end of the run: the spec's outputs, a sink's value at
``--granularity op`` (the runner waits for its future) and, in a run with
loops, a value read by a later stage or a loop (the driver keeps its future
until the run ends); so are a loop's final states and metric series.

A ``call`` on a GPU holds nothing beyond its inputs and outputs: an input
already on the device is handed to the function as it is (CuPy's ``asarray``
of a device array, and the simulated GPU's ``to_device`` of an array it
holds, copy nothing), and one that arrives from the host is made a device
array once, when the task starts, which is the arrival counted below. (The
simulated GPU charges the array Dask keeps, for as long as Dask keeps it;
CuPy's copy of a host array lives while the task holds it, Dask's own copy
being host memory: the plan counts the longer.)
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

from ..records import Plan
from ...spec.records import Spec
from .timeline import Held, Key, Placed, Scopes, Timeline, key_of, sizes

# Ops are walked in the schedule's order and found by their position there (``Timeline.ops``, ``unit_at``,
# ``device_at``); a value's readers are positions too: each op is looked up by name once, not once per use.


def outside_loops(plan: Plan, granularity: str, line: Timeline, scope: Scopes,
                  unknown: dict[str, list[str]]) -> Iterator[Placed]:
    """What every device holds of the values made outside loops, and of the loops' exports."""
    spec = plan.spec
    readers = _Readers(line)
    kept = {key_of(o.ref) for o in spec.outputs}
    consumed = _consumed(spec) if granularity == "op" else set()
    inside = _inside(line, scope)
    stage = [scope.stage.get(name) for name in line.order] if scope.stage else [None] * len(line.order)
    made: list[tuple[int, Key, int, str, Sequence[int]]] = []  # (position, value, bytes, label, readers)
    stops: list[int] = []
    held: list[bool] = []  # the client keeps its future to the end: no device lets it go
    for position, op in enumerate(line.ops):
        if inside[position]:
            continue  # made by a loop's step, or a loop's state: the loop's to count
        name = op.name
        for i, size in enumerate(sizes(spec, op)):
            if size is None:
                unknown[line.device_at[position]].append(name)
                continue
            key = (name, i)
            reading = readers.of(position, i)
            stop = _stop(line, position, reading, inside, stage)
            whole = key in kept or name in scope.exports or (granularity == "op" and name not in consumed) or \
                stop == line.end
            made.append((position, key, size, name if op.outputs == 1 else f"{name}:{i}", reading))
            stops.append(line.end if whole else stop)
            held.append(whole)
    _together(line, [m[0] for m in made], stops)
    ends = {lp.name: max(line.step_of[n] for n in (*lp.body, *lp.exports)) for lp in spec.loops}
    for (position, key, size, what, reading), stop, whole in zip(made, stops, held):
        yield line.device_at[position], Held(position, stop, size, what, key)
        # its stage starts once the loops before it have ended: nothing of it exists before then
        begins = max([0] + [ends[loop] + 1 for loop in stage[position] or ()])
        yield from _arrivals(line, position, key, size, what, reading, inside, whole, begins)


def _consumed(spec: Spec) -> set[str]:
    """The ops whose values something reads, waits for or outputs (the rest are sinks)."""
    return {ref.op for op in spec.ops for ref in op.inputs} | {a for op in spec.ops for a in op.after} | \
        {o.ref.op for o in spec.outputs}


def _inside(line: Timeline, scope: Scopes) -> list[bool]:
    """Per position: is the op made by a loop's step, or a loop's state (the loop's to count)?"""
    if not scope.loop_of and not scope.placeholders:
        return [False] * len(line.order)
    return [scope.in_loop(name) or name in scope.placeholders for name in line.order]


class _Readers:
    """Per value, by its op's position and its output, the positions of the ops reading it (a loop's state
    placeholder reads its initial value)."""

    def __init__(self, line: Timeline):
        step_of = line.step_of
        self.first: list[list[int]] = [[] for _ in line.order]  # output 0 (or an op's only output)
        self.other: dict[tuple[int, int], list[int]] = {}  # (position, output i > 0)
        for position, op in enumerate(line.ops):
            for ref in op.inputs:
                made = step_of.get(ref.op)
                if made is None:
                    continue  # not scheduled: no value of it is counted
                if ref.output:
                    self.other.setdefault((made, ref.output), []).append(position)
                else:
                    self.first[made].append(position)

    def of(self, position: int, output: int) -> Sequence[int]:
        return self.first[position] if output == 0 else self.other.get((position, output), ())


def _outside(line: Timeline, readers: Sequence[int], home: int) -> set[int]:
    """The tasks reading a value from another task."""
    unit_at = line.unit_at
    return {unit_at[r] for r in readers if unit_at[r] != home}


def _stop(line: Timeline, here: int, readers: Sequence[int], inside: Sequence[bool],
          stage: Sequence[frozenset[str] | None]) -> int:
    """The last position the own device of the value made at ``here`` holds it (outputs and exports aside)."""
    unit_at = line.unit_at
    home = unit_at[here]
    stop = max([here] + [r for r in readers if unit_at[r] == home])
    for r in readers:
        if inside[r] or stage[r] != stage[here]:
            return line.end  # read by a loop, or a later stage: the driver keeps its future to the end
    outside = _outside(line, readers, home)
    return max(stop, line.released(line.device_at[here], here, outside)) if outside else stop


def _together(line: Timeline, positions: Sequence[int], stops: list[int]) -> None:
    """Values a task returns together (it returns a tuple) live as long as the longest-lived of them."""
    returned: dict[int, list[int]] = {}
    for j, (position, stop) in enumerate(zip(positions, stops)):
        unit = line.unit_at[position]
        if stop > line.last[unit]:
            returned.setdefault(unit, []).append(j)
    for values in returned.values():
        longest = max(stops[j] for j in values)
        for j in values:
            stops[j] = longest


def _arrivals(line: Timeline, position: int, key: Key, size: int, what: str, readers: Sequence[int],
              inside: Sequence[bool], held: bool, stage: int) -> Iterator[Placed]:
    """On each other device a task reads it, the value is there from that task's start until Dask forgets it.

    Read by several tasks there, it is moved there once by a task of its own (``compile``'s ``move``),
    which runs as soon as the value exists: during any task of that device the value does not wait for.
    A key the client keeps is never forgotten: its copies stay too (unless Dask's active memory manager
    drops extra copies, every few seconds: not something a plan can know).
    """
    device_at, unit_at = line.device_at, line.unit_at
    source, home = device_at[position], unit_at[position]
    outside = [r for r in readers if not inside[r] and device_at[r] != source]
    if not outside:
        return
    tasks = _outside(line, readers, home)
    reading: dict[str, set[int]] = {}
    for r in outside:
        reading.setdefault(device_at[r], set()).add(unit_at[r])
    for device, units in reading.items():
        start = min(line.first[u] for u in units)
        if len(units) > 1:
            start = min(start, max(stage, line.arrives(device, home)))
        stop = line.end if held else line.released(device, start, tasks)
        yield device, Held(start, stop, size, what + " (arrived)", key)


def transfers(plan: Plan, line: Timeline) -> tuple[Mapping[str, int], Mapping[str, int]]:
    """Bytes into and out of each device: every value once per other device reading it."""
    spec, device_of = plan.spec, line.device_of
    moved: set[tuple[Key, str]] = set()
    into: dict[str, int] = {}
    out: dict[str, int] = {}
    for op, target in zip(line.ops, line.device_at):
        for ref in op.inputs:
            source = device_of[ref.op]
            if source == target:
                continue
            key = key_of(ref)
            size = spec.value(ref).nbytes
            if (key, target) in moved or size is None:
                continue
            moved.add((key, target))
            into[target] = into.get(target, 0) + size
            out[source] = out.get(source, 0) + size
    return into, out
