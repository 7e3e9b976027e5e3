"""One loop of ops run in windows: evaluations, stopping, checkpoints and resuming around the windows.

Policy. The windows are the loop's (``Loop.window_starts``: every
``window`` steps, cut at every checkpoint and evaluation step). Two are in
flight: window k+1 is submitted before window k is read. An evaluation of
the states after window k is submitted right after window k (it reads
nothing of window k+1), so the cluster does not idle while the client
judges it. Reading window k gives its metrics, then its evaluation's
values, which the :class:`~.stopping.Judge` weighs; a stop there ends the
loop at window k's last step (window k+1's values are dropped, unread) and
the loop's outputs are that step's states, or the best evaluation's with
``restore_best``. A checkpoint is handed to the writer once window k has
been read (its series and the judge's state are then those of its last
step). On ``--resume`` a loop with a checkpoint starts from its step: its
states are placed where they start, its series and the judge are restored,
and the windows from there on are those an uninterrupted run submits.

State: the series (on the client), the evaluations' (step, value) rows, the
judge, the best states' futures (held while they may be restored) and how
the loop began and ended (``outcome``, for the run report).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Generator, Iterable, Mapping, Protocol, Sequence

import numpy as np

from ..compile import CompileOptions, LoopState, after_window, compile_fetch, compile_gang_window, compile_plan, \
    compile_window
from ..compile.records import CompiledWindow, Located
from ..ops.training import evaluation_steps
from ..plan.records import Plan
from ..spec.records import Loop
from .cadence import checkpoint_due, improves
from .checkpointing import CheckpointWriter
from .draining import Drains
from .outputs import MetricFiles
from .records import LoopNews, LoopOutcome
from .stopping import Judge
from .submitter import Submitter
from .tracks import Tracks


class Driver(Protocol):
    """What a loop needs of the staged run driving it: its values read-only, changed through the run's own
    methods (``execute.state``: the run is their one owner)."""

    @property
    def plan(self) -> Plan: ...
    @property
    def options(self) -> CompileOptions: ...
    @property
    def submitter(self) -> Submitter: ...
    @property
    def held(self) -> Mapping[str, Any]: ...
    @property
    def known(self) -> Mapping[str, Located]: ...
    @property
    def done(self) -> Mapping[str, Located]: ...
    @property
    def checkpoints(self) -> CheckpointWriter | None: ...
    @property
    def metric_files(self) -> MetricFiles | None: ...
    @property
    def tracks(self) -> Tracks | None: ...
    @property
    def drains(self) -> Drains | None: ...

    def hold(self, futures: Mapping[str, Any]) -> None: ...

    def release(self, keys: Iterable[str]) -> None: ...

    def note(self, op: str, text: str, unless_said: bool = False) -> None: ...

    def wait_for_sinks(self, futures: Iterable[Any]) -> None: ...

    def collect(self, loop: Loop, series: dict[str, list[Any]], window: CompiledWindow,
                futures: dict[str, Any], extra: str = "", also: Sequence[str] = ()) -> list[Any]: ...

    def prepare_gang(self, loop: Loop, state: LoopState, offset: int) -> LoopState: ...

    def echo(self, text: str) -> None: ...


def drive(steps: Generator[int, str | None, LoopState]) -> LoopState:
    """Run a loop's windows to its end (or its own stop), never stopping it from outside."""
    try:
        next(steps)
        while True:
            steps.send(None)
    except StopIteration as end:
        result: LoopState = end.value
        return result


@dataclass(frozen=True)
class _Ready:
    """A value already on the client, read as a future is."""

    value: Any

    def result(self) -> Any:
        return self.value


@dataclass
class _Submitted:
    window: CompiledWindow
    futures: dict[str, Any]
    state: LoopState  # the loop's state after this window
    stop: int  # the window's last step + 1
    evaluation: tuple[dict[str, str], dict[str, Any]] | None  # its output keys and futures


@dataclass
class TrainingLoop:
    driver: Driver
    loop: Loop
    offset: int
    gang: bool
    series: dict[str, list[Any]]
    evaluations: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    judge: Judge | None = None
    best: LoopState | None = None
    outcome: LoopOutcome = LoopOutcome()
    monitored: float | None = None  # checkpoint best_only: the best value of its metric checkpointed so far
    # a sweep's decision steps (``execute.halving``): the loop is read there, and goes on only when told
    holds: frozenset[int] = frozenset()
    sinks: list[Any] = field(default_factory=list)  # its evaluations' sinks (a failed copy's are not waited for)
    saved_at: int | None = None  # the step of the last checkpoint handed to the writer (for the live page)

    def __post_init__(self) -> None:
        evaluation = self.loop.evaluation
        self.evaluations = {name: [] for name, _ in evaluation.metrics} if evaluation else {}
        self.judge = Judge(self.loop.stopping) if self.loop.stopping else None
        self.points = set(evaluation_steps(self.loop.steps, evaluation.every)) if evaluation else set()
        self.outcome = LoopOutcome(0, self.loop.steps, "steps", self.loop.steps)

    def run(self, state: LoopState) -> LoopState:
        return drive(self.stepwise(state))

    def stepwise(self, state: LoopState) -> Generator[int, str | None, LoopState]:
        """The loop, window by window: yields the step it starts from once its first window is submitted
        (nothing read yet), then the last step of each window read (its metrics are in the series); what is
        sent back is a reason to stop there, or None to go on. Returns the final state.

        A sweep's driver (``execute.halving``) steps its copies' loops this way side by side. At a step of
        ``holds`` nothing past it is submitted before the driver says to go on: a copy its rule stops there
        runs nothing after that step.
        """
        state, begin = self.resume(state)
        if begin >= self.loop.steps:  # resumed from a checkpoint at its last step: nothing is left to run
            self.outcome = replace(self.outcome, steps_run=0)
            for name in self.loop.body + self.loop.evaluated:
                self.driver.note(name, f"not run: loop '{self.loop.name}' resumed from its checkpoint at its last "
                                       "step", unless_said=True)
            return replace(state, carried=self.best.carried) if self.best is not None else state
        if self.gang:
            state = self.driver.prepare_gang(self.loop, state, self.offset)
        starts = [s for s in self.loop.window_starts() if s > begin]
        starts.insert(0, begin)
        in_flight: _Submitted | None = None
        begun = state
        for i, start in enumerate(starts):
            stop = starts[i + 1] if i + 1 < len(starts) else self.loop.steps
            if in_flight is not None and start in self.holds:  # a decision step: read it, and wait to be told
                if self.read(in_flight):
                    return self.finish(in_flight)
                told = yield in_flight.stop
                if told is not None:
                    self.outcome = replace(self.outcome, stopped_at_step=in_flight.stop, stop_reason=told)
                    return self.finish(in_flight)
                in_flight = None
            current = self.submit(state, start, stop, first=start == begin)
            state = current.state
            if in_flight is not None:
                if self.read(in_flight):
                    return self.finish(in_flight)
                told = yield in_flight.stop
                if told is not None:  # window ``current`` ran ahead: its values are dropped, unread
                    self.outcome = replace(self.outcome, stopped_at_step=in_flight.stop, stop_reason=told)
                    return self.finish(in_flight)
            in_flight = current
            if i == 0:  # a driver of several loops submits each one's first window before it reads any
                told = yield begin
                if told is not None:  # resumed past a decision that stops it: it ends where it resumed
                    self.outcome = replace(self.outcome, stopped_at_step=begin, stop_reason=told, steps_run=0)
                    return begun
        assert in_flight is not None
        self.read(in_flight)
        yield in_flight.stop
        return self.finish(in_flight)

    def submit(self, state: LoopState, start: int, stop: int, first: bool) -> _Submitted:
        d, loop = self.driver, self.loop
        window = compile_gang_window(d.plan, loop, start, state, d.options, self.offset, stop, first) if self.gang \
            else compile_window(d.plan, loop, start, state, d.options, self.offset, stop)
        wanted = [c.key for c in window.carried.values()] + [k for keys in window.metric_keys for k in keys] + \
            list(window.sink_keys) + list(window.persistent_moves.values())
        futures = d.submitter.submit(window.graph, wanted)
        if first and d.drains is not None:
            d.drains.begin(loop)
        d.hold({key: futures[key] for key in window.persistent_moves.values()})
        after = after_window(state, window)
        return _Submitted(window, futures, after, stop, self.evaluate(after, stop))

    def evaluate(self, state: LoopState, stop: int) -> tuple[dict[str, str], dict[str, Any]] | None:
        """Submit the evaluation of the states after step ``stop`` (when it is an evaluation step)."""
        evaluation, d = self.loop.evaluation, self.driver
        if evaluation is None or stop not in self.points:
            return None
        known = {**d.known, **{var.placeholder: state.carried[var.name] for var in self.loop.state}}
        compiled = compile_plan(d.plan, d.options, only=evaluation.body, known=known, known_done=d.done,
                                outputs=[str(ref) for _, ref in evaluation.metrics], step=self.offset + stop)
        futures = d.submitter.submit(compiled, list(compiled.output_keys.values()))
        self.sinks += [futures[k] for k in compiled.sink_keys]
        d.wait_for_sinks(futures[k] for k in compiled.sink_keys)
        return dict(compiled.output_keys), futures

    def read(self, sub: _Submitted) -> bool:
        """Read a window (and its evaluation); True when the loop stops there. The live page hears (no round trip)."""
        stops = self._read(sub)
        self.driver.submitter.tell(LoopNews(self.loop.name, sub.stop, self.loop.steps, self.series, self.evaluations,
                                            self.judge.state() if self.judge is not None else {}, self.saved_at))
        return stops

    def _read(self, sub: _Submitted) -> bool:
        if sub.evaluation:  # the window's error, if any, before the evaluation's (which a failed window fails)
            self.driver.submitter.wait_for([*sub.futures.values(), *sub.evaluation[1].values()])
        values = self.driver.submitter.gather(*sub.evaluation) if sub.evaluation else {}
        scores = {}
        for name, ref in self.loop.evaluation.metrics if self.loop.evaluation and sub.evaluation else ():
            scores[name] = float(np.asarray(values[str(ref)]))
            self.evaluations[name].append((sub.stop, scores[name]))
        shown = ", ".join(f"{k} {v:.4g}" for k, v in scores.items())
        drains = self.driver.drains
        drain = drains is not None and drains.due(self.loop)  # a drain on notice waits for this window: checkpoint it
        due = checkpoint_due(self.loop, sub.stop) or drain
        # a checkpoint's host states come with the metrics, in one gather: a gather of their own from a
        # worker busy with the next window cost ~5 ms each (10% of polyfit's loop at every 100 steps)
        fetch = due and not self.driver.options.host_outputs and self.driver.checkpoints is not None
        keys = list(dict.fromkeys(c.key for c in sub.state.carried.values())) if fetch else []
        got = dict(zip(keys, self.driver.collect(self.loop, self.series, sub.window, sub.futures, shown, keys)))
        self.write_metrics()
        reason = None
        if self.judge is not None and scores:
            for name in self.series:  # a step metric watched by a rule: its value at the evaluation step
                scores.setdefault(name, float(np.asarray(self.series[name][-1])))
            reason = self.judge.judge(sub.stop, scores)
            if self.judge.improved and any(rule.restore_best for rule in self.loop.stopping):
                self.keep_best(sub)
        if reason is not None:
            self.outcome = replace(self.outcome, stopped_at_step=sub.stop, stop_reason=reason)
            return True
        better, self.monitored = improves(self.loop, scores, self.series, self.monitored) if due else (False, self.monitored)
        if due and (better or drain):
            self.save(sub.stop, sub.state.carried, {**sub.futures, **{k: _Ready(v) for k, v in got.items()}})
        if drains is not None and drain:
            drains.read(self.loop, sub.stop, self.driver.checkpoints if self.saved_at == sub.stop else None)
        return False

    def keep_best(self, sub: _Submitted) -> None:
        """Hold the new best evaluation's states on the cluster, and let the previous best's go."""
        previous = self.best
        kept = {c.key for c in sub.state.carried.values()}
        if previous is not None:
            self.driver.release(c.key for c in previous.carried.values() if c.key not in kept)
        self.best = sub.state
        self.driver.hold({key: sub.futures[key] for key in kept})

    def finish(self, last: _Submitted) -> LoopState:
        """The loop's final state: its last window's (or, with ``restore_best``, the best evaluation's)."""
        state = last.state
        if self.driver.drains is not None:
            self.driver.drains.end(self.loop)
        self.driver.hold({c.key: last.futures[c.key] for c in state.carried.values()})
        if self.best is not None:
            state = replace(state, carried=self.best.carried)
        steps = self.outcome.stopped_at_step
        self.outcome = replace(self.outcome, steps_run=steps - self.outcome.resumed_from_step)
        for name in self.series:  # a window submitted after the stop ran ahead: its steps are not the loop's
            del self.series[name][steps:]
        if self.outcome.stop_reason != "steps":
            self.driver.submitter.loop_progress(self.loop.name, steps, self.loop.steps,
                                                f"stopped ({self.outcome.stop_reason})")
        return state

    def resume(self, state: LoopState) -> tuple[LoopState, int]:
        """With --resume and a checkpoint: its states where the loop starts them, its series, its step."""
        d, loop = self.driver, self.loop
        saved = d.checkpoints.latest(loop, lambda: self.infos(state)) if d.checkpoints is not None else None
        if saved is None:
            return state, 0
        carried = self.placed(saved.states)
        if saved.best:  # restore_best's states, as they were when the checkpoint was written
            self.best = LoopState(self.placed(saved.best), state.known, state.outer_moves)
        for name in self.series:
            self.series[name] = list(np.asarray(saved.series.get(name, np.zeros(0))))
        for name in self.evaluations:
            rows = np.asarray(saved.evaluations.get(name, np.zeros((0, 2)))).reshape(-1, 2)
            self.evaluations[name] = [(int(step), float(value)) for step, value in rows]
        if self.judge is not None:
            self.judge.restore(saved.stopping)
        monitored = saved.header.get("monitored")
        self.monitored = float(monitored) if isinstance(monitored, (int, float)) else None
        self.outcome = replace(self.outcome, resumed_from_step=saved.step)
        steps = saved.header.get("steps")
        longer = f"; written by a run of {steps} steps, it goes on to step {loop.steps}" \
            if isinstance(steps, int) and steps != loop.steps else ""
        d.echo(f"loop '{loop.name}' resumes from its checkpoint at step {saved.step} ({saved.path}{longer})")
        return LoopState(carried, state.known, state.outer_moves), saved.step

    def infos(self, state: LoopState) -> list[tuple[tuple[int, ...] | None, str | None]]:
        """The shapes and dtypes of the loop's initial states, read from the values themselves (for states
        whose shapes the spec does not declare); unknown where the value is not held."""
        if any(state.carried[var.name].key not in self.driver.held for var in self.loop.state):
            return [(None, None)] * len(self.loop.state)
        values = [future.result() if element is None else future.result()[element]
                  for future, element in self.fetched(state.carried, self.driver.held)]
        return [(np.asarray(value).shape, str(np.asarray(value).dtype)) for value in values]

    def placed(self, values: Sequence[Any]) -> dict[str, Located]:
        """States read from a checkpoint, each on the device where the loop starts it."""
        d, carried = self.driver, {}
        for var, value in zip(self.loop.state, values):
            device = d.plan.placement(var.placeholder).device
            future = d.submitter.scatter(value, device)
            d.hold({future.key: future})
            carried[var.name] = Located(future.key, device)
        return carried

    def save(self, step: int, carried: Mapping[str, Located], futures: Mapping[str, Any]) -> None:
        """Hand the checkpoint at ``step`` to the writer: the states fetched from where they live."""
        d, loop = self.driver, self.loop
        if d.checkpoints is None or not d.checkpoints.usable(loop):
            return  # (said once, when the loop began)
        states = self.fetched(carried, futures)
        best = self.fetched(self.best.carried, d.held) if self.best is not None else []  # restore_best's
        # np.array of the 0-d values: a tenth of the time np.stack takes (every checkpoint copies the series)
        series = {name: np.array(values_) if values_ else np.zeros(0) for name, values_ in self.series.items()}
        evaluations = {name: np.asarray(rows, dtype=float).reshape(-1, 2) for name, rows in self.evaluations.items()}
        d.checkpoints.save_later(loop, step, states, series, evaluations,
                                 self.judge.state() if self.judge is not None else {}, best,
                                 {"monitored": self.monitored})
        self.saved_at = step

    def fetched(self, carried: Mapping[str, Located], futures: Mapping[str, Any]) -> list[tuple[Any, int | None]]:
        """(future, element) of each state ``carried``: read by the writer's thread, element cut on the client.

        Host arrays are read as they are (a gang window's result is its states and its metrics, a few
        hundred bytes): no graph per checkpoint. Device arrays (CuPy) go through a small graph that copies
        them to the host where they live.
        """
        d = self.driver
        values = {f"{self.loop.name}.{var.name}": carried[var.name] for var in self.loop.state}
        if not d.options.host_outputs:
            return [(futures[located.key], located.index) for located in values.values()]
        fetch = compile_fetch(d.plan, values, d.options)
        assert fetch is not None  # host outputs: every value is copied to the host
        got = d.submitter.submit(fetch, list(fetch.output_keys.values()))
        return [(got[fetch.output_keys[text]], None) for text in values]

    def write_metrics(self) -> None:
        """The metric CSVs so far (a stopped run keeps what it computed); not past a stop, which ``finish`` cuts."""
        self.track()
        files = self.driver.metric_files
        if files is None:
            return
        for name, values in self.series.items():
            if values:
                files.update(f"{self.loop.name}.{name}", values)
        for name, rows in self.evaluations.items():
            if rows:
                files.update(f"{self.loop.name}.{name}", [[float(step), value] for step, value in rows])

    def track(self) -> None:
        """The metrics so far to the sinks asked for (``--tensorboard``, ``--mlflow``): the rows not sent yet."""
        if self.driver.tracks is not None:
            self.driver.tracks.rows(self.loop, self.offset, self.series, self.evaluations)

    def tables(self) -> dict[str, np.ndarray]:
        """Each evaluation metric as (step, value) rows: ``LOOP.metric``."""
        return {f"{self.loop.name}.{name}": np.asarray(rows, dtype=float).reshape(-1, 2)
                for name, rows in self.evaluations.items()}
