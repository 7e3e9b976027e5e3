"""The runner: execute a plan on a Dask cluster and check that it ran as planned.

Policy. The plan is law: every task is pinned by identity resources to the
worker standing for its device, and after the run the worker each op really
ran on (reported by the op itself, from inside that worker) is compared with
the plan; any difference fails the run. Nothing is written until every
output has been computed: outputs go to temporary files beside their targets
and are renamed into place only when all of them are ready, so a failed run
leaves earlier files untouched.

State. The runner owns, for one run: the cluster it started (or the client
it connected), a run token that makes this run's keys and events unique, the
futures of the requested values, the owner op of every key (so that Dask's
errors can name the op), and timings per phase. It keeps nothing between
runs; ``--keep-alive`` only leaves the cluster up. Graphs come from
``compile``; plans with loops are driven window by window by
:class:`~orchestrator.execute.loops.StagedRun`, which submits through this
runner.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

from ..atomic import write_text
from ..runtime.backends import backend_entry, cuda_device_count
from ..compile import CompileOptions, choose_task_names, compile_plan
from ..devices import DeviceSpec
from ..errors import OrchestratorError, RunError
from ..compile.records import CompiledGraph
from ..plan.records import Plan
from .records import (LoopNews, LoopOutcome, LoopProgressView, RunReport, RunResult, RunSettings, RunTotals,
                      SearchOutcome, SweepNews, TransferRecord)
from ..perf import frozen_heap, paused_gc
from ..runtime import LOG_TOPIC, discard_saves, drain_records
from .caching import CacheUse, open_for_run, outermost_loop
from .checkpointing import writer_for
from .progress import LoopProgress
from .live import LiveFeed
from .cluster import dask_settings, device_configs, scheduler_config
from .connect import choose_backend, connect, cuda_counter, embedded, prestart, wait_for_devices
from .loops import StagedRun
from .outputs import MetricFiles, OnWorkers, commit_run, flag_writes, refuse_overwrites
from .tracks import Tracks
from .searches import fatal_sweeps, with_sweeps
from .accounting import by_device, device_records, op_records, verify
from .watch import SchedulerWatch, tell_workers, wait_forever
from .losses import LossWatch, Losses, redo_policy
from .waiting import Waiter, dask_error
from .steps import loop_curves, loop_spans, step_pictures, transport
from .draining import Drains
from .exits import ExitWatch

Echo = Callable[[str], None]


class Runner:
    def __init__(self, plan: Plan, settings: RunSettings, echo: Echo):
        self.plan, self.settings, self.echo = plan, settings, echo
        self.spec = plan.spec
        self.token = uuid.uuid4().hex[:12]
        self.task_names, self.task_names_why = choose_task_names(plan, settings.task_names)
        self.base_dir = os.path.abspath(self.spec.document.directory)
        out_dir = settings.output_dir or self.spec.run.output_dir or "."
        self.output_dir = os.path.normpath(os.path.join(self.base_dir, out_dir))
        self.backend, self.backend_why = "simulated", ""  # chosen once connected: see run()
        self.key_owner: dict[str, str] = {}
        self.not_run: dict[str, str] = {}  # ops the driver resolved itself (loop exports), and why
        self.task_count = 0
        self.move_count = 0
        self.phases: dict[str, float] = {}  # seconds per phase of the run, for the report
        self.client: Any = None
        self.partition_ops: dict[str, tuple[str, ...]] = {}  # partition and window keys -> their ops
        self.key_steps: dict[str, tuple[int, int]] = {}  # a loop's keys -> the steps their tasks run
        self.gang_keys: set[str] = set()  # the parts of gang windows: never run again alone
        self.losses: Losses | None = None  # device workers lost during the run (execute.losses)
        self.waiter: Waiter | None = None
        self.drains: Drains | None = None  # device workers drained on notice (execute.draining)
        self.exits: ExitWatch | None = None  # their processes' exit codes, with run.recover_on_exit_codes
        self.loop_modes: dict[str, str] = {}
        self.loop_outcomes: dict[str, LoopOutcome] = {}  # loop -> how it began and ended
        self.search_outcomes: dict[str, SearchOutcome] = {}  # sweep -> its copies' loops: decisions, ends, curves
        self.loop_curves: dict[str, dict[str, Any]] = {}  # loop -> its metrics' curves, for the report
        self.saves_settled = False  # checkpoints of this run committed (or there is nothing left to discard)
        self.cache: CacheUse | None = None
        self.links = False  # loop windows' values go over direct links between workers (else Dask's comms)
        self.feed: LiveFeed | None = None  # the run's news for its live page on the scheduler (execute.page)
        self.progress_line: LoopProgressView | None = settings.progress_view or (  # (the CLI's: a terminal)
            LoopProgress() if settings.progress or (settings.progress is None and sys.stdout.isatty()) else None)

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.phases[name] = self.phases.get(name, 0.0) + time.perf_counter() - started

    def options(self) -> CompileOptions:
        return CompileOptions(self.token, self.base_dir, self.output_dir, self.task_names,
                              host_outputs=backend_entry(self.backend).host_outputs,
                              granularity=self.settings.granularity)

    # ------------------------------------------------------------------ run

    def run(self) -> RunResult:
        prestart(self.plan, self.settings)  # the workers' fork server imports meanwhile (execute.processes)
        # Imported here, not with this module (in-process runs never import distributed), and before
        # dask_settings: distributed adds its config defaults when first imported, and a dask.config.set
        # entered before that would delete them all on exit.
        from .plugin import DeviceRuntimePlugin, open_device_links

        refuse_overwrites(self.spec, self.output_dir, self.base_dir, flag_writes(self.settings))
        retries, self.why_redone = redo_policy(self.spec)
        with dask_settings(scheduler_config(self.no_workers_timeout(retries), retries)):
            requested = self.settings.gpu_backend or self.spec.cluster.gpu_backend
            cluster, client = self._connect(requested)
            self.client = client
            try:
                self.watch_losses(retries)
                if cluster is None:  # counted where the GPU workers run
                    self.backend, self.backend_why = choose_backend(self.plan, requested, cuda_counter(cluster, client))
                simulated = any(d.is_gpu for d in self.spec.cluster.devices) and not backend_entry(self.backend).hardware
                link = client.dashboard_link if "dashboard" in client.scheduler_info().get("services", {}) else None
                self.echo(f"running '{self.spec.name}' on {'an embedded' if cluster else 'a remote'} Dask cluster "
                          f"({len(self.spec.cluster.devices)} devices, GPU backend: {self.backend}"
                          f"{' — simulated GPUs' if simulated else ''}; "
                          f"{self.backend_why})")
                if link:
                    grouped = "op name" if self.task_names == "op" else "op kind"
                    self.echo(f"dashboard: {link} (task stream grouped by {grouped}: {self.task_names_why}); "
                              f"{self.open_page(client, link)}")
                with self.phase("prepare workers"):
                    wait_for_devices(self.plan, self.settings, client)
                    runtime = DeviceRuntimePlugin(device_configs(self.spec.cluster, self.backend))
                    # Named by its content and left registered: the next run of this cluster re-registers the
                    # same name (nothing piles up on a long-lived scheduler), and a worker that joins or
                    # restarts later gets its device runtime from the scheduler without waiting for a run.
                    client.register_plugin(runtime, name=runtime.plugin_name())
                    granularity = self.settings.granularity
                    if any(self.plan.loop_mode(loop.name, granularity).mode == "gang" for loop in self.spec.loops):
                        self.links = open_device_links(client, [d.name for d in self.spec.cluster.devices])
                if cluster is not None:  # the scheduler lives in this process: it cannot be lost alone
                    return self._run_aborting(client, link)
                with SchedulerWatch(client, str(client.scheduler.address)) as watch:
                    try:
                        return self._run_aborting(client, link)
                    except Exception:
                        if watch.lost:
                            raise watch.error() from None
                        raise
            finally:
                for watching in (self.losses, self.drains, self.exits):
                    if watching is not None:
                        watching.close()
                if self.cache is not None:  # what finished is written even when the run failed (for --resume)
                    self.cache.finish(self.saves_settled)
                if not self.saves_settled:  # the run failed or was stopped: every existing file stays as it was
                    tell_workers(client, discard_saves, run=self.token)
                if self.settings.keep_alive and cluster is not None:
                    wait_forever(lambda: self.echo("cluster kept alive (--keep-alive); press Ctrl-C to stop it"))
                client.close()
                if cluster is not None:
                    cluster.close()

    def _connect(self, requested: str) -> tuple[Any, Any]:
        """An embedded cluster's backend is chosen before its workers start: Dask monitors only real GPUs."""
        here = embedded(self.plan, self.settings)
        if here:
            self.backend, self.backend_why = choose_backend(self.plan, requested, cuda_device_count)
        with self.phase("connect"):
            return connect(self.plan, self.settings, self.base_dir,
                           real_gpus=not here or backend_entry(self.backend).hardware)

    def _run_aborting(self, client: Any, link: str | None) -> RunResult:
        """The run; when it fails, the tasks still waiting for a value another device will now never send wake."""
        try:
            with self.feed.ending() if self.feed is not None else contextlib.nullcontext():  # (the page hears)
                result = self._run_on(client, link)
                return self.feed.copies_ended(result) if self.feed is not None else result
        except OrchestratorError as exc:
            if client.status == "running":  # (a lost scheduler: nobody to tell, and the line must come at once)
                self.abort(exc)
            raise

    def open_page(self, client: Any, link: str) -> str:
        """The run's live page on the scheduler (execute.page): where it is, or why there is none."""
        from .page import open_page, page_link
        self.feed, why = open_page(client, self.plan, self.token)
        return f"this run: {page_link(link)}" if self.feed is not None else why

    def no_workers_timeout(self, retries: int) -> float:
        """For a worker lost mid-run (missing ones are caught before submission); with retries, its nanny's time."""
        again = retries or any(s.allow_failures for s in self.spec.sweeps)
        return max(self.spec.run.no_workers_timeout, 60.0) if again else self.spec.run.no_workers_timeout

    def watch_losses(self, retries: int) -> None:
        """From now on a lost device worker is seen (Dask's events) and decided when the run next waits."""
        watch = LossWatch(self.client, [d.name for d in self.spec.cluster.devices])
        self.drains, self.exits = drains, exits = (Drains(self.client, self.plan, self.token, self.echo), ExitWatch(self.client, self.spec.run.recover_on_exit_codes, watch.pids, not embedded(self.plan, self.settings) or self.settings.keep_alive))
        self.losses = Losses(self.plan, self.token, retries, watch, self, self.echo, self.why_redone,
                             lambda device: drains.failed_line(device) or exits.failed_line(device), exits.recoverable)
        self.waiter = Waiter(self.client, self.losses)

    def open_cache(self) -> CacheUse | None:
        return open_for_run(self.plan, self.settings, self.base_dir, self.echo)

    def _run_on(self, client: Any, link: str | None) -> RunResult:
        from distributed import performance_report

        if self.spec.placement.log:
            client.subscribe_topic(LOG_TOPIC, lambda event: self.echo(str(event[1])))
        started = time.time()
        context: Any = performance_report(filename=self.settings.performance_report) \
            if self.settings.performance_report else contextlib.nullcontext()
        with client.as_current(), context, frozen_heap():  # (the plan lives the whole run: see perf)
            self.cache = self.open_cache()
            if self.spec.loops or self.cache is not None:
                values = self.run_staged(StagedRun(self.plan, self.options(), self, cache=self.cache))
            else:
                with self.phase("compile"), paused_gc():
                    compiled = compile_plan(self.plan, self.options())
                with self.phase("submit"):
                    futures = self.submit(compiled, list(compiled.output_keys.values()), progress=True)
                with self.phase("compute"):
                    values = self.gather(compiled.output_keys, futures, compiled.sink_keys)
        elapsed = time.time() - started
        assert self.losses is not None
        self.losses.tell(final=True)
        collecting = time.perf_counter()
        report = self._report(by_device(client.run(drain_records, run=self.token)), started, elapsed)
        self.phases["collect records"] = time.perf_counter() - collecting
        report = replace(report, phases_seconds=dict(self.phases),
                         startup_seconds=self.phases.get("connect", 0.0) + self.phases.get("prepare workers", 0.0))
        return self.finish(report, values, lambda fn, **kw: client.run(fn, **kw).values(), link)

    def run_staged(self, staged: StagedRun) -> dict[str, Any]:
        """The values of a staged run (compiling and submitting window by window); says how each loop ran."""
        staged.checkpoints = writer_for(self.plan, self.settings, self.cache.keys if self.cache else None, self.echo)
        staged.say, staged.drains = self.echo, self.drains
        if self.settings.write_outputs:
            staged.metric_files = MetricFiles(self.spec, self.output_dir)
        staged.tracks = Tracks(self.spec, self.settings, self.token, self.output_dir)  # fed as the CSVs are
        with self.phase("compute"):
            try:
                values = staged.tracks.run(staged.run, self.echo)  # (its folders checked first, its runs ended)
            finally:
                self.loop_modes = dict(staged.modes)
                self.loop_outcomes = dict(staged.outcomes)
                self.search_outcomes = dict(staged.searches)
                self.loop_curves = loop_curves(self.spec, staged.client_values)
                if staged.checkpoints is not None:  # those under way are written, also when the run stopped
                    staged.checkpoints.finish()
                if staged.metric_files is not None:  # the live rows go: the outputs are committed with the others
                    staged.metric_files.close()
        for loop, mode in self.loop_modes.items():
            outcome = self.loop_outcomes.get(loop, LoopOutcome())
            ended = f", stopped at step {outcome.stopped_at_step} ({outcome.stop_reason})" \
                if outcome.stop_reason != "steps" else ""
            began = f", resumed from step {outcome.resumed_from_step}" if outcome.resumed_from_step else ""
            self.echo(f"loop '{loop}' ran {mode}{began}{ended}")
        self.not_run.update(staged.notes)
        return values

    def finish(self, report: RunReport, values: dict[str, Any], on_workers: OnWorkers,
               link: str | None) -> RunResult:
        """After a run: its outputs and its ops' saved files into place together, then the report file."""
        report, tables = with_sweeps(self.plan, report, values, self.loop_outcomes, self.search_outcomes)
        written = commit_run(self.spec, values, self.output_dir, self.echo, tables, on_workers, self.token,
                             self.settings.write_outputs, fatal_sweeps(report))
        self.saves_settled = True
        if self.settings.report_path:
            write_text(self.settings.report_path, json.dumps(report.as_dict(), indent=2, default=str) + "\n")
        return RunResult(self.spec.name, values, report, self.plan, self.backend, link, written)

    # ------------------------------------------------------------------ the submitter of StagedRun

    def submit(self, compiled: CompiledGraph, keys: Sequence[str], progress: bool = False) -> dict[str, Any]:
        """Send a graph; return futures for ``keys`` and for its sinks (ops nothing reads)."""
        wanted = self.account(compiled, keys)
        asked = self.losses.asked(compiled, wanted) if self.losses is not None else wanted
        futures = self.client.get(compiled.graph, asked, sync=False, optimize_graph=False)
        if progress and (self.settings.progress or (self.settings.progress is None and sys.stdout.isatty())):
            from distributed import progress as progress_bar

            progress_bar(futures)
            print()
        if self.losses is not None:
            self.losses.hold(dict(zip(asked, futures)))
        return dict(zip(wanted, futures))

    def account(self, compiled: CompiledGraph, keys: Sequence[str]) -> list[str]:
        """Remember who owns each key (errors name the op) and count the graph; the keys to wait for."""
        self.key_owner.update(compiled.key_owner)
        self.partition_ops.update(compiled.partition_ops)
        self.key_steps.update(compiled.steps)
        self.gang_keys.update(compiled.gang)
        self.task_count += len(compiled.tasks)
        self.move_count += compiled.transfers
        return list(dict.fromkeys([*keys, *compiled.sink_keys]))

    def gather(self, output_keys: Mapping[str, str], futures: Mapping[str, Any],
               sinks: Sequence[str] = ()) -> dict[str, Any]:
        """Fetch the output values; wait for the sinks; turn Dask's errors into ours naming the op."""
        assert self.waiter is not None
        try:
            wanted = [futures[k] for k in output_keys.values()]
            self.waiter.settle(wanted + [futures[k] for k in sinks if k in futures])
            results = self.waiter.fetch(wanted)  # (no outputs: no gather, which would still cost a round trip)
        except OrchestratorError as exc:
            self.abort(exc)
            raise
        except Exception as exc:
            error = self.translate(exc)
            self.abort(error)
            raise error from None
        return dict(zip(output_keys, results))

    def abort(self, error: Exception) -> None:
        """Wake every task of this run waiting for a value another device will now never send."""
        from ..runtime import abort_run

        tell_workers(self.client, abort_run, run=self.token, why=f"the run failed: {str(error).splitlines()[0]}")

    def abort_loop(self, loop: int, why: str) -> None:
        """Wake the tasks of loop ``loop`` (its index in the spec) waiting for values it will never send."""
        from ..runtime import abort_loop
        tell_workers(self.client, abort_loop, run=self.token, loop_index=loop, why=why)

    def wait_for(self, futures: Sequence[Any]) -> None:
        """Wait for futures nobody fetches; the first error as it happens, naming its op (execute.waiting)."""
        # No abort: a copy's failed loop is one failed copy (execute.halving wakes its loop's tasks alone)
        assert self.waiter is not None
        try:
            self.waiter.settle(futures)
        except Exception as exc:
            raise (exc if isinstance(exc, OrchestratorError) else self.translate(exc)) from None

    def scatter(self, value: Any, device: DeviceSpec) -> Any:
        workers = [self.spec.cluster.standing_for(device.to_string())] if device.device_index != "*" else None
        return self.client.scatter(value, workers=workers, broadcast=False)

    def loop_progress(self, loop: str, done: int, steps: int, note: str = "") -> None:
        if self.feed is not None:
            self.feed.loop_progress(loop, done, steps, note)
        if self.settings.on_loop_progress is not None:
            self.settings.on_loop_progress(loop, done, steps)
        if self.progress_line is not None:
            self.progress_line.show(loop, done, steps, note)

    def tell(self, news: LoopNews | SweepNews) -> None:
        if self.feed is not None:
            self.feed.tell(news)

    def translate(self, exc: Exception) -> RunError:
        return dask_error(exc, self.plan, self)

    # ------------------------------------------------------------------ after the run

    def _report(self, drained: Mapping[str, Any], started: float, elapsed: float) -> RunReport:
        events = [r for worker in drained.values() for r in worker["records"]]
        stats = {addr: {"ran_on": worker["ran_on"], **worker["memory"]} for addr, worker in drained.items()}
        restarted = {worker["ran_on"] for worker in drained.values() if worker["created"] > started}
        received = [item for worker in drained.values() for item in worker["received"]]
        names = {address: worker["ran_on"] for address, worker in drained.items()}
        transfers = tuple(TransferRecord(self.key_owner.get(key, str(key)), names.get(source, source), worker["ran_on"],
                                         nbytes, start, stop)
                          for worker in drained.values() for key, nbytes, start, stop, source in worker["received"])
        records, exchanged = op_records(self.plan, events)
        if self.cache is not None:
            records = tuple(replace(r, cache=self.cache.record(r.name) or self.cache.record(outermost_loop(self.spec, r.name)))
                            for r in records)
        checked, unverified = verify(records, self.not_run, restarted)
        if unverified:
            self.echo(f"note: {len(unverified)} op(s) ran on a worker that was restarted later; "
                      f"their placement could not be verified: {', '.join(unverified[:5])}")
        totals = RunTotals(len(checked), self.task_count, self.move_count, sum(item[1] for item in received) + exchanged,
                           len(received), exchanged)
        return RunReport(self.spec.name, self.spec.file, self.token, self.backend,
                         (self.task_names, self.task_names_why), elapsed, checked,
                         device_records(self.plan, stats), totals, tuple(sorted(restarted)), unverified,
                         granularity=self.settings.granularity,
                         loops={name: {"mode": mode, **(self.loop_outcomes[name].as_dict() if name in self.loop_outcomes else {}), **loop_spans(drained, name, self.loop_curves)}
                                for name, mode in self.loop_modes.items()},
                         transfers=tuple(sorted(transfers, key=lambda t: t.start)), params=self.spec.params,
                         loop_steps=step_pictures(worker.get("samples", {}) for worker in drained.values()),
                         transport=transport(self.loop_modes, self.spec.cluster, self.links), losses=tuple(self.losses.decided) if self.losses else (),
                         drains=self.drains.records(self.losses.decided if self.losses else ()) if self.drains else ())


def run_plan(plan: Plan, settings: RunSettings | None = None, echo: Echo | None = None) -> RunResult:
    return Runner(plan, settings or RunSettings(), echo or (lambda text: print(text, flush=True))).run()
