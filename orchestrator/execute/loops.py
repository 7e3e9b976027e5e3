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

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ..cache import ref_of
from ..compile import CompileOptions, LoopState, compile_fetch, compile_gang_prep, compile_plan, lookup_value, loop_start
from ..errors import RunError
from ..compile.records import CompiledWindow, Located
from ..plan.records import Plan
from ..spec.records import Loop, OpRef
from ..ops import lookup
from .caching import CacheUse
from .cadence import checkpoint_due, improves
from .checkpointing import CheckpointWriter
from .draining import Drains
from .training import TrainingLoop
from .halving import CopyLoops, copy_loops, group_search
from .records import LoopOutcome, SearchOutcome
from .state import RunValues
from .hits import place_hits, recorded
from .submitter import Submitter
from .outputs import MetricFiles, metric_value
from .tracks import Tracks


def _writes_files(plan: Plan, name: str) -> bool:
    definition = lookup(plan.spec.op(name).kind)
    return definition is not None and bool(definition.writes)


@dataclass
class StagedRun(RunValues):
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
    known_ops: set[str] = field(default_factory=set)  # ops whose values (or completion) are known now
    parent: dict[str, str | None] = field(default_factory=dict)  # loop -> the loop holding it
    readers: dict[str, set[str]] = field(default_factory=dict)  # op -> the ops that read it (or wait for it)
    output_ops: set[str] = field(default_factory=set)
    cache: CacheUse | None = None
    checkpoints: CheckpointWriter | None = None
    drains: Drains | None = None  # drains on notice: a loop's window in flight there is read and checkpointed
    metric_files: MetricFiles | None = None  # metric CSVs written as windows are read
    tracks: Tracks | None = None  # --tensorboard, --mlflow: fed as the metric CSVs are
    say: Callable[[str], None] | None = None  # the run's echo (resumed loops, checkpoints not used)
    outcomes: dict[str, LoopOutcome] = field(default_factory=dict)  # loop -> how it began and ended
    searches: dict[str, SearchOutcome] = field(default_factory=dict)  # sweep -> its copies' loops (execute.halving)

    def echo(self, text: str) -> None:
        if self.say is not None:
            self.say(text)

    def deps(self, name: str) -> set[str]:
        op = self.plan.spec.op(name)
        return {ref.op for ref in op.inputs} | set(op.after)

    def run(self) -> dict[str, Any]:
        spec = self.plan.spec
        self.parent = {loop.name: loop.parent for loop in spec.loops}
        self.readers: dict[str, set[str]] = {}
        for p in self.plan.placements:
            for dep in self.deps(p.op):
                self.readers.setdefault(dep, set()).add(p.op)
        self.output_ops = {o.ref.op for o in spec.outputs}
        if self.cache is not None:
            hits = place_hits(self.plan, self.submitter, self.cache)
            self.held.update(hits.held)
            self.known.update(hits.known)
            self.done.update(hits.done)
            self.known_ops |= hits.known_ops
            self.notes.update(hits.notes)
            self.client_values.update(hits.client_values)
            self.skip_unread()
        self.run_scope(None, None)
        return self.outputs()

    def skip_unread(self) -> None:
        """Ops read only by values that came from the cache are not run (unless they are outputs or write files)."""
        from_cache = set(self.known_ops)
        skipped: set[str] = set()
        changed = True
        while changed:  # from the readers back: an op is skipped once all its readers are
            changed = False
            for placement in self.plan.placements:
                name = placement.op
                if name in from_cache or name in skipped or name in self.output_ops or _writes_files(self.plan, name):
                    continue
                readers = self.readers.get(name, set())
                if readers and readers <= from_cache | skipped:
                    skipped.add(name)
                    changed = True
        for name in skipped:
            self.known_ops.add(name)
            self.notes[name] = "not run: every op reading it came from the cache"

    def scope_ops(self, loop: Loop | None) -> list[str]:
        """The ops a scope runs itself (the top level, or one loop's body), without its loops' bodies."""
        spec = self.plan.spec
        inner = [lp for lp in spec.loops if self.parent[lp.name] == (loop.name if loop else None)]
        taken = {name for lp in inner for name in lp.body + lp.evaluated + spec.loop_exports(lp)}
        if loop is None:
            in_loops = {name for lp in spec.loops for name in lp.body + lp.evaluated}
            exports = {name for lp in spec.loops for name in spec.loop_exports(lp)}
            mine = [p.op for p in self.plan.placements if p.op not in in_loops and p.op not in exports]
        else:
            placeholders = {var.placeholder for var in loop.state}
            mine = [p.op for p in self.plan.placements if p.op in set(loop.body) and p.op not in placeholders]
        return [name for name in mine if name not in taken]

    def run_scope(self, loop: Loop | None, step: int | None) -> None:
        """Run a scope's ops in stages, and its loops in order, each when what it reads is ready.

        ``step``: the step of the enclosing loop (a loop run step by step because it holds others).
        """
        spec = self.plan.spec
        ops = self.scope_ops(loop)
        pending = [lp for lp in spec.loops if self.parent[lp.name] == (loop.name if loop else None)
                   and (self.cache is None or lp.name not in self.cache.hits)]
        done = set(self.known_ops)
        remaining = [name for name in ops if name not in done]
        while True:
            ready: list[str] = []
            for name in remaining:
                if all(d in done or d in ready for d in self.deps(name)):
                    ready.append(name)
            if ready:
                self.run_outer(ready, step)
                done |= set(ready)
                remaining = [name for name in remaining if name not in done]
            if not pending:
                break
            next_loop = next((lp for lp in pending if all(
                d in done or d in lp.body for name in lp.body for d in self.deps(name))), None)
            if next_loop is None:
                if ready:
                    continue
                raise RunError("cannot order the loops of this spec: a loop reads a value made after it")
            group = copy_loops(self, next_loop, pending)
            for member in group or [next_loop]:
                pending.remove(member)
            if group:  # a sweep's copies: stepped side by side in waves (and decided by its rule, if any)
                search = group_search(spec, next_loop)
                copies = CopyLoops(self, search, group).run()
                self.searches[search.name] = copies.search
                self.outcomes.update(copies.outcomes)
            else:
                self.run_loop(next_loop, 0 if step is None else step * next_loop.steps)
            for member in group or [next_loop]:
                finished = set(member.body + member.evaluated + spec.loop_exports(member))
                done |= finished
                self.known_ops |= finished

    def run_outer(self, ready: list[str], step: int | None) -> None:
        stored = [name for name in ready if self.cache is not None and step is None and self.cache.wanted(name)]
        refs = [str(r) for name in stored for r in ref_of(self.plan, name)]
        # the spec's outputs made here must be returned by their partitions, to be fetched at the end
        finals = [str(o.ref) for o in self.plan.spec.outputs if o.ref.op in set(ready) and str(o.ref) not in refs]
        compiled = compile_plan(self.plan, self.options, only=ready, known=self.known, outputs=refs + finals,
                                known_done=self.done, step=step, cut_after=stored)
        chosen = set(ready)
        later = {n for n in ready if self.readers.get(n, set()) - chosen or n in self.output_ops}
        needed = list(dict.fromkeys(
            [located.key for text, located in compiled.values.items()
             if text not in self.known and OpRef.parse(text).op in later] +
            [key for name, key in compiled.done.items() if name in later and name not in self.done]))
        futures = self.submitter.submit(compiled, needed + list(compiled.output_keys.values()))
        self.sinks += [futures[k] for k in compiled.sink_keys]
        if self.cache is not None:
            for name in stored:  # written as soon as each value is ready: a run stopped midway keeps them
                keys = [compiled.output_keys[str(r)] for r in ref_of(self.plan, name)]
                self.cache.store_later(name, [futures[k] for k in keys])
        self.known.update(compiled.values)
        self.done.update({name: Located(key, self.plan.placement(name).device) for name, key in compiled.done.items()})
        self.held.update({k: futures[k] for k in needed})
        self.known_ops |= set(ready)

    def run_loop(self, loop: Loop, offset: int) -> None:
        """Run a loop: in windows of steps, or step by step when it holds loops of its own.

        ``offset``: the number of its first step (inside an outer loop's step s: s x steps), so that
        every step of every pass has keys, random draws and messages of its own.
        """
        state = loop_start(self.plan, loop, self.known)
        mode = self.window_mode(loop)
        series: dict[str, list[Any]] = {name: [] for name, _ in loop.metrics}
        if mode == "nested":
            state = self.run_steps(loop, state, offset, series)
        else:
            state = self.run_windows(loop, state, offset, series, gang=mode == "gang")
        self.export(loop, state, series)
        if self.cache is not None and self.parent[loop.name] is None and self.cache.wanted(loop.name):
            self.store_loop(self.cache, loop)

    def store_loop(self, cache: CacheUse, loop: Loop) -> None:
        """A loop's entry: its final states (fetched from where they live) and its metric series."""
        values = {f"{loop.name}.{var.name}": lookup_value(self.known, OpRef.parse(f"{loop.name}.{var.name}"))
                  for var in loop.state}
        fetch = compile_fetch(self.plan, values, self.options)
        if fetch is not None:
            keys = dict(fetch.output_keys)
            futures = {**self.held, **self.submitter.submit(fetch, list(keys.values()))}
        else:
            keys = {text: located.key for text, located in values.items()}
            futures = self.held
        states = [futures[keys[text]] for text in values]
        series = tuple(self.client_values[f"{loop.name}.{metric}"] for metric, _ in recorded(loop))
        cache.store_later(loop.name, states, series)

    def run_steps(self, loop: Loop, state: LoopState, offset: int, series: dict[str, list[Any]]) -> LoopState:
        """A loop holding loops: each step runs its body's ops and inner loops as stages of their own."""
        training = TrainingLoop(self, loop, offset, False, series)  # its checkpoints: saved, resumed from
        state, begin = training.resume(state)
        carried = dict(state.carried)
        placeholders = {var.placeholder: var for var in loop.state}
        scope = self.plan.spec.inside(loop)  # with inner loops
        for step in range(begin, loop.steps):
            before = set(self.held)
            # every op of the body runs again this step: forget where last step's values were
            self.known_ops -= scope
            for table in (self.known, self.done):
                for text in [t for t in table if OpRef.parse(t).op in scope]:
                    del table[text]
            for name, var in placeholders.items():  # this step's state: what the last step left
                self.known[name] = carried[var.name]
                self.done[name] = carried[var.name]
            self.known_ops |= set(placeholders)
            self.run_scope(loop, offset + step)
            carried = {var.name: lookup_value(self.known, var.update) for var in loop.state}
            for (name, ref), value in zip(loop.metrics, self.fetch([str(ref) for _, ref in loop.metrics])):
                series[name].append(metric_value(loop.name, name, value, step + 1))
            keep = {located.key for located in carried.values()}
            for key in set(self.held) - before - keep:  # this step's values: done with, but for the state
                del self.held[key]
            self.submitter.loop_progress(loop.name, step + 1, loop.steps)
            training.track()  # (its steps are stages of their own: a step's metrics are on the client already)
            if checkpoint_due(loop, step + 1):
                better, training.monitored = improves(loop, {}, series, training.monitored)
                if better:
                    training.save(step + 1, carried, self.held)
        self.outcomes[loop.name] = replace(training.outcome, steps_run=loop.steps - begin)
        return LoopState(carried, state.known, state.outer_moves)

    def fetch(self, refs: list[str]) -> list[Any]:
        """Values of this step on the client (a loop's metrics, read step by step)."""
        if not refs:
            return []
        values = {text: lookup_value(self.known, OpRef.parse(text)) for text in refs}
        fetch = compile_fetch(self.plan, values, self.options)
        if fetch is not None:
            wanted = dict(fetch.output_keys)
            futures = {**self.held, **self.submitter.submit(fetch, list(wanted.values()))}
        else:
            wanted = {text: located.key for text, located in values.items()}
            futures = self.held
        got = self.submitter.gather(wanted, futures, [])
        return [got[text] for text in refs]

    def run_windows(self, loop: Loop, state: LoopState, offset: int, series: dict[str, list[Any]],
                    gang: bool) -> LoopState:
        """A loop of ops only: windows of steps, two in flight, with its evaluations, stopping and checkpoints."""
        training = TrainingLoop(self, loop, offset, gang, series)
        state = training.run(state)
        self.client_values.update(training.tables())
        self.outcomes[loop.name] = training.outcome
        return state

    def export(self, loop: Loop, state: LoopState, series: dict[str, list[Any]]) -> None:
        """After a loop: its final states where they live, its metric series from the client."""
        for var in loop.state:
            self.notes[var.placeholder] = f"state of loop '{loop.name}': the carried value, read where it lives"
            self.known[f"{loop.name}.{var.name}"] = state.carried[var.name]
            self.notes[f"{loop.name}.{var.name}"] = f"final state of loop '{loop.name}'"
        tables = {f"{loop.name}.{name}" for name, _ in loop.evaluation.metrics} if loop.evaluation else set()
        for export in [f"{loop.name}.{name}" for name, _ in loop.metrics] + sorted(tables):
            name = export[len(loop.name) + 1:]
            if export in tables:  # an evaluation's (step, value) rows, set by its windows' driver
                values = self.client_values.get(export, np.zeros((0, 2)))
            else:
                values = np.stack(series[name]) if series[name] else np.zeros((0,))
            self.client_values[export] = values
            device = self.plan.placement(export).device
            future = self.submitter.scatter(values, device)
            self.held[future.key] = future
            self.known[export] = Located(future.key, device)
            self.notes[export] = f"metric series of loop '{loop.name}', gathered by the client"

    def window_mode(self, loop: Loop) -> str:
        """``nested`` (step by step), ``gang`` (a task per device per window), else ``partition`` or ``op``."""
        planned = self.plan.loop_mode(loop.name, self.options.granularity)  # planning decided; the driver obeys
        self.modes[loop.name] = planned.describe()
        return planned.mode

    def prepare_gang(self, loop: Loop, state: LoopState, offset: int) -> LoopState:
        """Move what the loop reads to its devices, and wait: a window's tasks may wait for nothing else."""
        prep, state = compile_gang_prep(self.plan, loop, state, self.options, offset)
        futures = self.submitter.submit(prep, list(prep.sink_keys))
        self.held.update(futures)
        self.submitter.gather({}, futures, list(futures))
        return state

    def collect(self, loop: Loop, series: dict[str, list[Any]], window: CompiledWindow,
                futures: dict[str, Any], extra: str = "", also: Sequence[str] = ()) -> list[Any]:
        """Wait for one window: read its metrics (one scalar per step) and surface any error; the values of
        the keys ``also`` (a checkpoint's states), fetched with the metrics in one gather."""
        self.submitter.wait_for(list(futures.values()))  # the first error of any device, as it happens
        flat = self.submitter.gather({k: k for k in [*(k for keys in window.metric_keys for k in keys), *also]},
                                     futures, list(window.sink_keys))
        if not loop.metrics:  # nothing to read: wait for the window's carried state instead
            self.submitter.gather({}, futures, list(futures))
        elements = window.metric_elements or (-1,) * len(loop.metrics)
        for keys in window.metric_keys:
            for (name, _), key, element in zip(loop.metrics, keys, elements):
                value = flat[key] if element < 0 else flat[key][element]
                rows = np.asarray(value) if window.metrics_stacked else [value]  # stacked: a row per step
                for row in rows:
                    series[name].append(metric_value(loop.name, name, row, len(series[name]) + 1))
        latest = ", ".join(f"{name} {float(np.asarray(values[-1])):.4g}" for name, values in series.items() if values)
        self.submitter.loop_progress(loop.name, window.last_step, loop.steps, ", ".join(filter(None, [latest, extra])))
        return [flat[k] for k in also]

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
