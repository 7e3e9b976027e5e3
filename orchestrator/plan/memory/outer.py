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

from collections.abc import Iterator, Mapping

from ..records import Plan
from .timeline import Held, Key, Placed, Scopes, Timeline, key_of, label, size_of


def outside_loops(plan: Plan, granularity: str, line: Timeline, scope: Scopes,
                  unknown: dict[str, list[str]]) -> Iterator[Placed]:
    """What every device holds of the values made outside loops, and of the loops' exports."""
    spec = plan.spec
    readers = _readers(plan, line)
    kept = {key_of(o.ref) for o in spec.outputs}
    consumed = {ref.op for op in spec.ops for ref in op.inputs} | {a for op in spec.ops for a in op.after} | \
        {o.ref.op for o in spec.outputs}
    stops: dict[Key, int] = {}
    held: set[Key] = set()  # values whose future the client keeps to the end: no device lets them go
    for name in line.order:
        if scope.in_loop(name) or name in scope.placeholders:
            continue  # made by a loop's step, or a loop's state: the loop's to count
        op = spec.op(name)
        for i in range(op.outputs):
            key = (name, i)
            if size_of(spec, key) is None:
                unknown[line.device_of[name]].append(name)
                continue
            stops[key] = _stop(line, key, readers.get(key, ()), scope)
            if key in kept or name in scope.exports or (granularity == "op" and name not in consumed) or \
                    stops[key] == line.end:
                stops[key] = line.end
                held.add(key)
    _together(line, stops)
    ends = {lp.name: max(line.step_of[n] for n in (*lp.body, *lp.exports)) for lp in spec.loops}
    for key, stop in stops.items():
        yield line.device_of[key[0]], Held(line.step_of[key[0]], stop, size_of(spec, key) or 0, label(spec, key), key)
        # its stage starts once the loops before it have ended: nothing of it exists before then
        stage = max([0] + [ends[loop] + 1 for loop in scope.stage.get(key[0], ())])
        yield from _arrivals(plan, line, key, readers.get(key, ()), scope, key in held, stage)


def _readers(plan: Plan, line: Timeline) -> dict[Key, list[str]]:
    """Per value, the ops reading it (a loop's state placeholder reads its initial value)."""
    readers: dict[Key, list[str]] = {}
    for name in line.order:
        for ref in plan.spec.op(name).inputs:
            readers.setdefault(key_of(ref), []).append(name)
    return readers


def _outside(line: Timeline, readers: list[str] | tuple[str, ...], home: int) -> set[int]:
    """The tasks reading a value from another task."""
    return {line.unit_of[r] for r in readers if line.unit_of[r] != home}


def _stop(line: Timeline, key: Key, readers: list[str] | tuple[str, ...], scope: Scopes) -> int:
    """The last position the value's own device holds it (outputs and exports aside)."""
    name = key[0]
    here = line.step_of[name]
    home = line.unit_of[name]
    stop = max([here] + [line.step_of[r] for r in readers if line.unit_of[r] == home])
    for r in readers:
        if scope.in_loop(r) or r in scope.placeholders or scope.stage.get(r) != scope.stage.get(name):
            return line.end  # read by a loop, or a later stage: the driver keeps its future to the end
    outside = _outside(line, readers, home)
    return max(stop, line.released(line.device_of[name], here, outside)) if outside else stop


def _together(line: Timeline, stops: dict[Key, int]) -> None:
    """Values a task returns together (it returns a tuple) live as long as the longest-lived of them."""
    returned: dict[int, list[Key]] = {}
    for key, stop in stops.items():
        if stop > line.last[line.unit_of[key[0]]]:
            returned.setdefault(line.unit_of[key[0]], []).append(key)
    for keys in returned.values():
        longest = max(stops[k] for k in keys)
        for k in keys:
            stops[k] = longest


def _arrivals(plan: Plan, line: Timeline, key: Key, readers: list[str] | tuple[str, ...],
              scope: Scopes, held: bool, stage: int) -> Iterator[Placed]:
    """On each other device a task reads it, the value is there from that task's start until Dask forgets it.

    Read by several tasks there, it is moved there once by a task of its own (``compile``'s ``move``),
    which runs as soon as the value exists: during any task of that device the value does not wait for.
    A key the client keeps is never forgotten: its copies stay too (unless Dask's active memory manager
    drops extra copies, every few seconds: not something a plan can know).
    """
    source, home = line.device_of[key[0]], line.unit_of[key[0]]
    outside = [r for r in readers if not scope.in_loop(r) and r not in scope.placeholders
               and line.device_of[r] != source]
    if not outside:
        return
    tasks = _outside(line, readers, home)
    size = size_of(plan.spec, key) or 0
    reading: dict[str, set[int]] = {}
    for r in outside:
        reading.setdefault(line.device_of[r], set()).add(line.unit_of[r])
    for device, units in reading.items():
        start = min(line.first[u] for u in units)
        if len(units) > 1:
            start = min(start, max(stage, line.arrives(device, home)))
        stop = line.end if held else line.released(device, start, tasks)
        yield device, Held(start, stop, size, label(plan.spec, key) + " (arrived)", key)


def transfers(plan: Plan, line: Timeline) -> tuple[Mapping[str, int], Mapping[str, int]]:
    """Bytes into and out of each device: every value once per other device reading it."""
    spec = plan.spec
    moved: set[tuple[Key, str]] = set()
    into: dict[str, int] = {}
    out: dict[str, int] = {}
    for name in line.order:
        for ref in spec.op(name).inputs:
            key, target = key_of(ref), line.device_of[name]
            source = line.device_of[ref.op]
            size = spec.value(ref).nbytes
            if source == target or (key, target) in moved or size is None:
                continue
            moved.add((key, target))
            into[target] = into.get(target, 0) + size
            out[source] = out.get(source, 0) + size
    return into, out
