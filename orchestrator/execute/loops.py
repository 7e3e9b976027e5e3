"""Staged execution for specs with ``iterate`` loops.

Policy. A loop's body is planned once (one step's ops) and run ``steps``
times, so the whole unrolled graph is never built: the driver alternates
between *outer stages* — every op outside loops whose inputs are ready,
compiled and submitted as one graph — and *loops*, each run in windows of
``window`` steps, each window compiled by ``compile.compile_window``. The
driver only submits and waits, through a :class:`Submitter` (the runner);
what a window holds is the compiler's business.

State. The driver holds futures for exactly what is still needed: outer
values read later, the carried state of the last finished window, and the
moves of outer values into the loop's devices (made once per device and
reused by every window). Two windows are in flight: the next one is queued
while the previous one's metrics are read, so the cluster never idles at a
window boundary; then the previous window's futures are dropped, so Dask
forgets its keys and client memory stays flat however many steps run.
Metric series (one scalar per step per metric) are the only thing that
grows, on the client.

After a loop, ``NAME.state`` is the final carried value (it stays where the
update op put it) and ``NAME.metric`` is the series, scattered to the device
its plan names.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Protocol, Sequence

import numpy as np

from ..compile import (CompileOptions, LoopState, after_window, compile_fetch, compile_gang_prep, compile_gang_window,
                       compile_plan, compile_window, loop_mode, loop_start, lookup_value)
from ..devices import DeviceSpec
from ..errors import RunError
from ..model import CompiledGraph, CompiledWindow, Located, Loop, OpRef, Plan


class Submitter(Protocol):
    """What the loop driver needs of the runner: send graphs, wait for keys, place a client value."""

    def submit(self, compiled: CompiledGraph, keys: Sequence[str]) -> dict[str, Any]: ...
    def gather(self, output_keys: Mapping[str, str], futures: Mapping[str, Any],
               sinks: Sequence[str] = ()) -> dict[str, Any]: ...
    def scatter(self, value: Any, device: DeviceSpec) -> Any: ...
    def wait_for(self, futures: Sequence[Any]) -> None: ...
    def loop_progress(self, loop: str, done: int, steps: int) -> None: ...


@dataclass
class StagedRun:
    """One staged run of a plan with loops; ``notes`` says which ops the driver resolved itself."""

    plan: Plan
    options: CompileOptions
    submitter: Submitter
    notes: dict[str, str] = field(default_factory=dict)
    known: dict[str, Located] = field(default_factory=dict)
    held: dict[str, Any] = field(default_factory=dict)  # key -> future: what must stay alive on the cluster
    client_values: dict[str, Any] = field(default_factory=dict)
    sinks: list[Any] = field(default_factory=list)
    done: dict[str, Located] = field(default_factory=dict)  # op -> the task that completed it (control edges)
    modes: dict[str, str] = field(default_factory=dict)  # loop -> how its windows ran, and why

    def deps(self, name: str) -> set[str]:
        op = self.plan.spec.op(name)
        return {ref.op for ref in op.inputs} | set(op.after)

    def run(self) -> dict[str, Any]:
        spec, plan = self.plan.spec, self.plan
        loops = spec.loops
        for loop in loops:
            outer = next((o for o in loops if loop is not o and loop.name.startswith(o.name + "/")), None)
            if outer is not None:
                raise RunError(f"iterate '{loop.name}' is inside iterate '{outer.name}'; nested loops cannot run "
                               "(flatten them into one loop with more state)")
        body_of = {name: loop for loop in loops for name in loop.body}
        exports = {op.name for loop in loops for op in spec.ops if op.name.startswith(loop.name + ".")}
        order = [p.op for p in plan.placements]
        outer_ops = [name for name in order if name not in body_of and name not in exports]
        readers: dict[str, set[str]] = {}
        for name in order:
            for dep in self.deps(name):
                readers.setdefault(dep, set()).add(name)
        output_ops = {o.ref.op for o in spec.outputs}
        done: set[str] = set()
        pending = list(loops)
        while True:
            ready: list[str] = []
            for name in outer_ops:
                if name not in done and all(d in done or d in ready for d in self.deps(name)):
                    ready.append(name)
            if ready:
                self.run_outer(ready, readers, output_ops)
                done |= set(ready)
            if not pending:
                break
            next_loop = next((lp for lp in pending if all(
                d in done or d in lp.body for name in lp.body for d in self.deps(name))), None)
            if next_loop is None:
                if ready:
                    continue
                raise RunError("cannot order the loops of this spec: a loop reads a value made after it")
            pending.remove(next_loop)
            self.run_loop(next_loop)
            done |= set(next_loop.body) | {n for n in exports if n.startswith(next_loop.name + ".")}
        return self.outputs()

    def run_outer(self, ready: list[str], readers: Mapping[str, set[str]], output_ops: set[str]) -> None:
        compiled = compile_plan(self.plan, self.options.token, self.options.base_dir, only=ready, known=self.known,
                                outputs=[], out_dir=self.options.out_dir, task_names=self.options.task_names,
                                granularity=self.options.granularity, known_done=self.done)
        chosen = set(ready)
        later = {n for n in ready if readers.get(n, set()) - chosen or n in output_ops}
        needed = list(dict.fromkeys(
            [located.key for text, located in compiled.values.items()
             if text not in self.known and OpRef.parse(text).op in later] +
            [key for name, key in compiled.done.items() if name in later and name not in self.done]))
        futures = self.submitter.submit(compiled, needed)
        self.sinks += [futures[k] for k in compiled.sink_keys]
        self.known.update(compiled.values)
        self.done.update({name: Located(key, self.plan.placement(name).device) for name, key in compiled.done.items()})
        self.held.update({k: futures[k] for k in needed})

    def run_loop(self, loop: Loop) -> None:
        state = loop_start(self.plan, loop, self.known)
        gang = self.window_mode(loop) == "gang"
        if gang:
            state = self.prepare_gang(loop, state)
        series: dict[str, list[Any]] = {name: [] for name, _ in loop.metrics}
        in_flight: tuple[CompiledWindow, dict[str, Any]] | None = None
        carried_futures: dict[str, Any] = {}
        for start in range(0, loop.steps, loop.window):
            window = compile_gang_window(self.plan, loop, start, state, self.options) if gang else \
                compile_window(self.plan, loop, start, state, self.options)
            wanted = [c.key for c in window.carried.values()] + [k for keys in window.metric_keys for k in keys] + \
                list(window.sink_keys) + list(window.persistent_moves.values())
            futures = self.submitter.submit(window.graph, wanted)
            self.held.update({key: futures[key] for key in window.persistent_moves.values()})
            state = after_window(state, window)
            if in_flight is not None:
                self.collect(loop, series, *in_flight)
            in_flight = (window, futures)
            carried_futures = {c.key: futures[c.key] for c in window.carried.values()}
        if in_flight is not None:
            self.collect(loop, series, *in_flight)
        self.held.update(carried_futures)
        for var in loop.state:
            self.notes[var.placeholder] = f"state of loop '{loop.name}': the carried value, read where it lives"
            self.known[f"{loop.name}.{var.name}"] = state.carried[var.name]
            self.notes[f"{loop.name}.{var.name}"] = f"final state of loop '{loop.name}'"
        for name, _ in loop.metrics:
            export = f"{loop.name}.{name}"
            values = np.stack(series[name]) if series[name] else np.zeros((0,))
            self.client_values[export] = values
            device = self.plan.placement(export).device
            future = self.submitter.scatter(values, device)
            self.held[future.key] = future
            self.known[export] = Located(future.key, device)
            self.notes[export] = f"metric series of loop '{loop.name}', gathered by the client"

    def window_mode(self, loop: Loop) -> str:
        """``gang`` (a task per device per window), else ``partition`` or ``op`` (tasks per step); says why."""
        mode, why = loop_mode(self.plan, loop, self.options.granularity)
        self.modes[loop.name] = f"{mode}: {why}"
        return mode

    def prepare_gang(self, loop: Loop, state: LoopState) -> LoopState:
        """Move what the loop reads to its devices, and wait: a window's tasks may wait for nothing else."""
        prep, state = compile_gang_prep(self.plan, loop, state, self.options)
        futures = self.submitter.submit(prep, list(prep.sink_keys))
        self.held.update(futures)
        self.submitter.gather({}, futures, list(futures))
        return state

    def collect(self, loop: Loop, series: dict[str, list[Any]], window: CompiledWindow,
                futures: dict[str, Any]) -> None:
        """Wait for one window: read its metrics (one scalar per step) and surface any error."""
        flat = self.submitter.gather({k: k for keys in window.metric_keys for k in keys}, futures,
                                     list(window.sink_keys))
        if not loop.metrics:  # nothing to read: wait for the window's carried state instead
            self.submitter.gather({}, futures, list(futures))
        for keys in window.metric_keys:
            for (name, _), key in zip(loop.metrics, keys):
                if window.metrics_stacked:  # the window's values, one row per step
                    series[name].extend(np.asarray(flat[key]))
                else:
                    series[name].append(np.asarray(flat[key]))
        self.submitter.loop_progress(loop.name, window.last_step, loop.steps)

    def outputs(self) -> dict[str, Any]:
        spec = self.plan.spec
        from_cluster: dict[str, Located] = {}
        for out in spec.outputs:
            text = str(out.ref)
            if text not in self.client_values:
                try:
                    from_cluster[text] = lookup_value(self.known, out.ref)
                except KeyError:
                    raise RunError(f"output '{text}' was not computed by any stage") from None
        fetch = compile_fetch(self.plan, from_cluster, self.options)
        if fetch is not None:
            wanted = dict(fetch.output_keys)
            futures = {**self.held, **self.submitter.submit(fetch, list(wanted.values()))}
        else:
            wanted = {text: located.key for text, located in from_cluster.items()}
            futures = self.held
        missing = [k for k in wanted.values() if k not in futures]
        if missing:
            raise RunError(f"internal: outputs {missing} were not kept on the cluster")
        values = self.submitter.gather(wanted, futures, [])
        self.submitter.wait_for(self.sinks)
        values.update({k: v for k, v in self.client_values.items() if k in {str(o.ref) for o in spec.outputs}})
        return values
