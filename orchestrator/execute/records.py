"""The records of a run: how to run, and what happened.

:class:`RunSettings` say how to run (flags and API arguments; the spec gives defaults);
:class:`RunReport` says what happened, per op and per device, with totals and timings;
:class:`RunResult` carries the values and the files written.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..errors import UsageError
from ..plan.records import Plan
from ..spec.records import Param


class LoopProgressView(Protocol):
    """What draws the loops' progress instead of the plain line (the CLI's terminal view, execute knows none)."""

    def show(self, loop: str, done: int, steps: int, note: str) -> None: ...


@dataclass(frozen=True)
class RunSettings:
    """How to run (command-line flags and API arguments; the spec gives defaults)."""

    scheduler: str | None = None  # None: the spec's cluster.scheduler ("local" by default)
    keep_alive: bool = False
    output_dir: str | None = None
    report_path: str | None = None
    performance_report: str | None = None
    progress: bool | None = None  # None: only on a terminal
    gpu_backend: str | None = None
    write_outputs: bool = True
    wait_for_workers: float = 30.0
    # TLS files (override the spec's cluster.tls field by field; relative to the current directory)
    tls_ca_file: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    on_loop_progress: Callable[[str, int, int], None] | None = None  # (loop, steps done, steps) per window
    # draws each loop's progress in place of the plain line (whatever ``progress`` says): the CLI's, on a terminal
    progress_view: LoopProgressView | None = None
    task_names: str = "auto"  # how Dask keys are named: auto, op or kind (see orchestrator.compile.dask_keys)
    granularity: str = "partition"  # a Dask task per device partition (loops: per window), or "op": per op
    use_cache: bool = True  # False: neither read nor write the cache (--no-cache)
    cache_dir: str | None = None  # None: .orchestrate/cache beside the spec
    resume: bool = False  # reuse every entry there is, and write every value (a run killed midway resumes)
    resume_revisions: Mapping[str, Any] | None = None  # a re-planned run's loops: the full plan's checkpoints
    cache_files: str = "stat"  # a loaded file's part of a key: "stat" (size, modification time) or "hash"
    sync: bool = False  # every op in this process, in plan order, with no cluster (--sync; docs/running.md)
    tensorboard: str | None = None  # a folder for TensorBoard event files of the loops' metrics (docs/tracking.md)
    mlflow: str | None = None  # an MLflow file store (tracking root) for the loops' params and metrics

    def __post_init__(self) -> None:
        if not self.sync:
            return
        # each names a cluster (or what only a cluster makes): refused, not silently ignored
        conflicts = [(self.scheduler is not None, "--scheduler (scheduler=)"),
                     (self.keep_alive, "--keep-alive (keep_alive=)"),
                     (self.performance_report is not None, "--performance-report (performance_report=)"),
                     (self.gpu_backend == "cupy", "--gpu-backend cupy (gpu_backend=)")]
        for conflict, flag in conflicts:
            if conflict:
                raise UsageError(f"--sync runs every op in this process, with no cluster (and GPUs simulated): "
                                 f"{flag} cannot be used with it")


@dataclass(frozen=True)
class LoopOutcome:
    """How one loop of a run began and ended: kept by the code that runs it (``execute.training``), which
    replaces it as the loop goes, and handed to the run when the loop is done."""

    resumed_from_step: int = 0  # where it started: a checkpoint's step with --resume, else 0
    stopped_at_step: int = 0
    stop_reason: str = "steps"  # "steps": it ran them all; else its early stop's, its sweep rule's, or "failed"
    steps_run: int = 0  # by this run (fewer when resumed)

    @property
    def stopped_early(self) -> bool:
        """Stopped before its last step by its own rule or its sweep's (not failed)."""
        return self.stop_reason not in ("steps", "failed")

    def as_dict(self) -> dict[str, Any]:
        return {"resumed_from_step": self.resumed_from_step, "stopped_at_step": self.stopped_at_step,
                "stop_reason": self.stop_reason, "steps_run": self.steps_run}


@dataclass(frozen=True)
class CopiesRun:
    """What a sweep's copies' loops did, returned by the driver that stepped them (``execute.halving``)."""

    search: SearchOutcome
    outcomes: Mapping[str, LoopOutcome]  # each copy's loop -> how it began and ended


@dataclass(frozen=True)
class OpRecord:
    """One op of a run report: where it was planned, where it ran, when and what it made."""

    name: str
    op: str
    planned_device: str
    worker: str | None
    start: float | None
    duration: float | None
    output_bytes: int | None
    retries: int
    runs: int | None
    why: str
    note: str = ""  # why it has no worker record (a loop's state, resolved by the driver; reused from the cache)
    cache: str = ""  # with its cache on: reused (which entry), or why it ran again
    error: str = ""  # a sweep copy's op that failed, and the copy with it: why (the sweep went on)
    end: float | None = None  # when its last run ended (a loop op's runs are spread over the loop)

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "op": self.op, "planned_device": self.planned_device,
                               "worker": self.worker, "start": self.start, "duration": self.duration,
                               "output_bytes": self.output_bytes, "retries": self.retries, "runs": self.runs,
                               "why": self.why}
        extra = {"end": self.end, "note": self.note, "cache": self.cache, "error": self.error}  # only when there
        out.update((key, value) for key, value in extra.items() if value is not None and value != "")
        return out


@dataclass(frozen=True)
class DeviceRecord:
    """One device of a run report: planned peak memory against the peak its backend saw."""

    device: str
    ops: int
    planned_peak_bytes: int
    limit_bytes: int | None
    peak_bytes_seen: int | None
    backend: str | None

    def as_dict(self) -> dict[str, Any]:
        return {"device": self.device, "ops": self.ops, "planned_peak_bytes": self.planned_peak_bytes,
                "limit_bytes": self.limit_bytes, "peak_bytes_seen": self.peak_bytes_seen, "backend": self.backend}


@dataclass(frozen=True)
class TransferRecord:
    """One value Dask moved between workers during a run (from the receiving worker's transfer log)."""

    value: str  # the op whose value (or control token) it was
    source: str  # the device that sent it
    target: str  # the device that received it
    nbytes: int
    start: float
    stop: float

    def as_dict(self) -> dict[str, Any]:
        return {"value": self.value, "from": self.source, "to": self.target, "bytes": self.nbytes,
                "start": self.start, "stop": self.stop}


@dataclass(frozen=True)
class DeviceLoss:
    """A device's worker lost during a run (its process died or was killed, its machine or network went):
    when, what it was running, and what the run did about it (``execute.losses``)."""

    device: str
    seconds: float  # into the run (the client's clock, when the scheduler's removal reached it)
    running: tuple[str, ...]  # the ops it was running (a sweep's copies: those that had started)
    waiting: int = 0  # tasks it held that had not started (a copy waiting for a slot): Dask runs them again
    values: int = 0  # finished values that lived only there: Dask computes them again
    loop: str = ""  # the loop whose steps it was running
    steps: tuple[int, int] | None = None  # (first, last) of those steps
    outcome: str = ""  # "failed the run", "restarted; redone", "copies failed"
    pid: int | None = None  # its process
    # run.on_device_lost: replan (execute.replanning): devices planned without, plan diff, steps redone, seconds
    replan: Mapping[str, Any] | None = None

    def at(self) -> str:
        """``step 412 of loop 'train'`` (or steps 400-499), or nothing outside loops."""
        if self.steps is None:
            return ""
        first, last = self.steps
        return f"{'step ' + str(first) if first == last else f'steps {first}-{last}'} of loop '{self.loop}'"

    def as_dict(self) -> dict[str, Any]:
        return {"device": self.device, "seconds": self.seconds, "running": list(self.running),
                "waiting": self.waiting, "values": self.values, "loop": self.loop,
                "steps": list(self.steps) if self.steps is not None else None, "outcome": self.outcome,
                "pid": self.pid, **({"replan": dict(self.replan)} if self.replan is not None else {})}


@dataclass(frozen=True)
class Drain:
    """A device worker drained on notice (``execute.draining``): the window its loops finished, the checkpoint."""

    device: str
    seconds: float  # into the run, when the notice reached the client
    loops: tuple[str, ...] = ()  # the loops whose window in flight there it finished
    step: int | None = None  # the last step of that window (the first loop's)
    checkpoint: str = ""  # the checkpoint written at that step ("" where the loop has none)
    released: float | None = None  # into the run, when the worker was told to leave
    redone: tuple[int, int] | None = None  # the loop steps it held when it left, run again elsewhere (its loss's)

    def as_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "loops": list(self.loops), "redone": list(self.redone) if self.redone else None}


@dataclass(frozen=True)
class RunTotals:
    ops: int
    tasks: int  # Dask tasks submitted
    moves: int  # planned transfers: values sent to another device
    bytes_moved: int  # bytes moved between workers for this run: Dask's transfer logs, plus loop windows' sends
    transfers_seen: int
    bytes_exchanged: int = 0  # of which sent worker to worker by loop windows (not through Dask's transfers)

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


RUN_REPORT_FORMAT = 1


@dataclass(frozen=True)
class RunReport:
    """The run report (``run --report``): per op and per device, totals and timings."""

    name: str
    file: str
    run: str  # the run token in every Dask key of the run
    backend: str
    task_names: tuple[str, str]  # (naming, why)
    elapsed_seconds: float
    ops: tuple[OpRecord, ...]
    devices: tuple[DeviceRecord, ...]
    totals: RunTotals
    restarted_devices: tuple[str, ...] = ()
    unverified: tuple[str, ...] = ()  # ops whose record died with a restarted worker
    phases_seconds: Mapping[str, float] = field(default_factory=dict)
    granularity: str = "partition"
    # loop -> {"mode": how its windows ran and why, "resumed_from_step", "stopped_at_step", "stop_reason",
    #          "steps_run": by this run}
    loops: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    transfers: tuple[TransferRecord, ...] = ()
    params: tuple[Param, ...] = ()
    # before elapsed_seconds: starting the embedded cluster (or connecting) until every device's worker is ready
    startup_seconds: float = 0.0
    mode: str = "cluster"  # "sync": every op ran in the client's process (run --sync), no cluster
    # loop -> the step picture of its sampled steps (gang windows): see execute.steps
    loop_steps: Mapping[str, Any] = field(default_factory=dict)
    transport: str = ""  # how loop windows' values went between workers: "links" or "dask-comms"
    # sweep -> its params, each copy (id, values, device, wave, start, stop, status) and its devices' packing
    sweeps: Mapping[str, Any] = field(default_factory=dict)
    losses: tuple[DeviceLoss, ...] = ()  # device workers lost during the run, and what the run did
    drains: tuple[Drain, ...] = ()  # device workers drained on notice (execute.draining)

    @property
    def placement(self) -> dict[str, dict[str, int]]:
        """Ops and output bytes per device the ops ran on."""
        out: dict[str, dict[str, int]] = {}
        for record in self.ops:
            slot = out.setdefault(record.worker or record.planned_device, {"ops": 0, "bytes": 0})
            slot["ops"] += 1
            slot["bytes"] += int(record.output_bytes or 0)
        return out

    def as_dict(self) -> dict[str, Any]:
        return {"format": RUN_REPORT_FORMAT, "name": self.name, "file": self.file, "run": self.run,
                "backend": self.backend, "task_names": {"naming": self.task_names[0], "why": self.task_names[1]},
                "mode": self.mode, "elapsed_seconds": self.elapsed_seconds, "startup_seconds": self.startup_seconds,
                "ops": [r.as_dict() for r in self.ops],
                "devices": [d.as_dict() for d in self.devices], "placement": self.placement,
                "totals": self.totals.as_dict(), "restarted_devices": list(self.restarted_devices),
                "unverified": list(self.unverified), "phases_seconds": dict(self.phases_seconds),
                "granularity": self.granularity, "loops": dict(self.loops),
                "loop_steps": dict(self.loop_steps), "transport": self.transport, "sweeps": dict(self.sweeps),
                "transfers": [t.as_dict() for t in self.transfers], "losses": [loss.as_dict() for loss in self.losses],
                "drains": [drain.as_dict() for drain in self.drains],
                "params": [p.as_dict() for p in self.params]}


@dataclass(frozen=True)
class DecisionRow:
    """One copy at a decision of a sweep's rule: its value at the step, (median) its best so far, its fate."""

    copy: int
    value: float
    kept: bool
    best: float | None = None  # the median rule compares the copy's best value so far
    reference: bool = False  # the median rule: one of its first n_startup copies, never stopped by it

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"copy": self.copy, "value": self.value, "kept": self.kept}
        if self.best is not None:
            out.update(best=self.best, reference=self.reference)
        return out


@dataclass(frozen=True)
class Decision:
    """A decision of a sweep's rule at one step of its copies' loop, on all copies still running there."""

    rule: str  # "halving" | "median"
    number: int  # 1, 2, ...: the rung (halving), the decision (median)
    step: int
    metric: str
    mode: str
    rows: tuple[DecisionRow, ...]  # halving: ranked best first; median: in copy order
    median: float | None = None  # the median rule: the reference copies' median at the step

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"rung" if self.rule == "halving" else "decision": self.number, "step": self.step,
                               "metric": self.metric, "mode": self.mode}
        if self.rule == "median":
            out["median"] = self.median
        out["copies"] = [row.as_dict() for row in self.rows]
        return out


@dataclass(frozen=True)
class CopyEnd:
    """A copy whose loop ended before its last step through the sweep: its rule stopped it, or it failed."""

    copy: int
    step: int  # the last step of its loop that was read (its final state's)
    reason: str
    failed: bool = False  # its loop failed (``reason`` is the error); else the sweep's rule stopped it


@dataclass(frozen=True)
class Curve:
    """A copy's metric as its loop ran: (step, value) pairs, at most ``MAX_CURVE`` of them (evenly thinned);
    a NaN value is None (JSON has no NaN)."""

    metric: str
    steps: tuple[int, ...]
    values: tuple[float | None, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"metric": self.metric, "steps": list(self.steps), "values": list(self.values)}

    @classmethod
    def of(cls, metric: str, points: Sequence[tuple[int, float]]) -> Curve:
        """The curve of (step, value) ``points``, evenly thinned to ``MAX_CURVE`` (first and last kept)."""
        if len(points) > MAX_CURVE:
            keep = sorted({round(i * (len(points) - 1) / (MAX_CURVE - 1)) for i in range(MAX_CURVE)})
            points = [points[i] for i in keep]
        return cls(metric, tuple(s for s, _ in points), tuple(None if math.isnan(v) else v for _, v in points))


MAX_CURVE = 256


@dataclass(frozen=True)
class SearchOutcome:
    """What a sweep's driver (``execute.halving``) decided and saw of its copies' loops."""

    decisions: tuple[Decision, ...] = ()
    ends: Mapping[int, CopyEnd] = field(default_factory=dict)  # by copy
    curves: Mapping[int, tuple[Curve, ...]] = field(default_factory=dict)  # by copy: each metric of its loop


@dataclass(frozen=True)
class RunResult:
    """What a run gives back: the output values, the run report, and the files written."""

    name: str
    values: Mapping[str, Any]
    run_report: RunReport  # the record; ``report`` is the same as the JSON dict ``run --report`` writes
    plan: Plan = field(repr=False)
    backend: str = "simulated"
    dashboard_link: str | None = None
    written: tuple[str, ...] = ()

    @property
    def report(self) -> dict[str, Any]:
        """The run report as the JSON ``run --report`` writes."""
        return self.run_report.as_dict()


@dataclass(frozen=True)
class LoopNews:
    """A loop's window as its driver read it, for the run's live page (``execute.live``), which sends it
    on with the window's other news: never a message per step, never one the driver waits for."""

    loop: str
    step: int  # the last step read
    steps: int
    series: Mapping[str, Sequence[Any]]  # each step metric so far (the driver's own lists, read at once)
    evaluations: Mapping[str, Sequence[tuple[int, float]]]  # each evaluation metric so far: (step, value)
    stopping: Mapping[str, Any]  # early stopping's state (best, best_step, wait, judged); empty without it
    checkpoint: int | None = None  # the step of the last checkpoint handed to the writer
    failed: str = ""  # the loop failed (a sweep's copy, which fails alone): the error's first line


@dataclass(frozen=True)
class SweepNews:
    """A decision of a sweep's rule, as its driver made it: a row of the live page's rung table."""

    sweep: str
    decision: Decision
