"""The public Python API: compose the stages, nothing else.

    load -> validate -> place -> tasks -> memory         (check_file, plan_file)
    two plans -> what changed between them               (diff_plans, diff_files)
    the plan without some devices, and its diff          (replan_file)
    ... -> compile -> execute                            (run_file, run_plan)
    the device workers of one task of a remote cluster   (select_worker_task, serve_worker, worker_commands)

``check_file`` never raises for a bad spec: it returns every diagnostic.
``plan_file`` raises :class:`~orchestrator.errors.SpecError` when the spec
has errors. Neither imports user code nor starts a cluster; the execution
stage (and with it ``distributed``) is imported only by the functions that run.
The command line (``orchestrate``) calls nothing but this module.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .backend_registry import gpu_backend_problem
from .errors import Diagnostic, OrchestratorError, SpecError, UsageError
from .spec.load import load_file
from .plan.memory import plan_memory
from .plan.records import Plan
from .execute.records import RunResult, RunSettings
from .spec.records import Spec
from .plan.partition import plan_tasks
from .perf import paused_gc
from .plan.place import place
from .plan.replan import PLACEMENT_CODES, lost_devices
from .plan.diff import FAIL_CONDITIONS, PlanDiff
from .plan.diff import diff_plans as _diff_plans
from .spec.validate import schema_text, validate

if TYPE_CHECKING:
    from .cache import Cache
    from .cache import Listing
    from .execute import Replanned, TaskWorkers

__all__ = [
    "Checked",
    "FAIL_CONDITIONS",
    "Plan",
    "PlanDiff",
    "Replan",
    "RunResult",
    "RunSettings",
    "cache_directory",
    "cache_entries",
    "check_file",
    "checkpoint_listing",
    "clear_cache",
    "remove_checkpoints",
    "diff_files",
    "diff_plans",
    "plan_file",
    "render_run_report",
    "replan_file",
    "run_file",
    "run_plan",
    "schema_text",
    "select_worker_task",
    "serve_worker",
    "worker_commands",
]


@dataclass(frozen=True)
class Checked:
    """The outcome of checking one file: all diagnostics, and the spec and plan when they could be made."""

    file: str
    diagnostics: tuple[Diagnostic, ...]
    spec: Spec | None = None
    plan: Plan | None = None

    @property
    def errors(self) -> tuple[Diagnostic, ...]:
        return tuple(d for d in self.diagnostics if d.is_error)

    @property
    def warnings(self) -> tuple[Diagnostic, ...]:
        return tuple(d for d in self.diagnostics if not d.is_error)

    def ok(self, strict: bool = False) -> bool:
        return not self.errors and not (strict and self.warnings)


Params = Mapping[str, object] | None
"""``--set`` values for a spec's ``params:``: text is read as YAML (``"1e-3"`` is a float), other values used as is."""


def check_file(path: str | os.PathLike[str], display_name: str | None = None, params: Params = None,
               without: Sequence[str] = ()) -> Checked:
    """Load, validate, place, plan the tasks and memory; collect every diagnostic on the way.

    ``without``: canonical names of devices to plan without (a re-plan, ``replan_file``)."""
    name = display_name or os.fspath(path)
    with paused_gc():
        try:
            doc = load_file(path, name)
        except SpecError as exc:
            return Checked(name, exc.diagnostics)
        spec, diagnostics = validate(doc, params, without)
        if spec is None:
            return Checked(name, tuple(diagnostics))
        plan = place(spec)
        if not any(d.is_error for d in plan.diagnostics):
            plan = plan_memory(plan_tasks(plan))
    all_diags = tuple(sorted([*diagnostics, *plan.diagnostics], key=lambda d: (not d.is_error, d.line, d.column)))
    return Checked(name, all_diags, spec, plan)


def plan_file(path: str | os.PathLike[str], display_name: str | None = None, params: Params = None) -> Plan:
    """The plan of a valid spec; raises :class:`SpecError` with every error otherwise."""
    checked = check_file(path, display_name, params)
    if checked.errors or checked.plan is None:
        raise SpecError(checked.errors or checked.diagnostics)
    return checked.plan


def diff_plans(new: Plan, old: Plan) -> PlanDiff:
    """What changed from ``old`` to ``new``: ops added, removed and moved (with the new plan's why),
    planned transfers added and removed, peak memory per device before and after."""
    return _diff_plans(new, old)


def diff_files(new_path: str | os.PathLike[str], old_path: str | os.PathLike[str], params: Params = None) -> PlanDiff:
    """The diff of two specs' plans (``params`` set in both); raises :class:`SpecError` with the errors of both
    when either is invalid."""
    new, old = check_file(new_path, params=params), check_file(old_path, params=params)
    if new.errors or old.errors or new.plan is None or old.plan is None:
        raise SpecError([*new.errors, *old.errors] or [*new.diagnostics, *old.diagnostics])
    return _diff_plans(new.plan, old.plan)


@dataclass(frozen=True)
class Replan:
    """The plan of a spec without some devices, beside its full plan: what a re-plan on loss would do.

    ``checked`` has the re-plan's diagnostics (an op pinned to a lost device, what no longer fits);
    ``diff`` is from the full plan to the re-plan, when the re-plan placed every op."""

    full: Plan
    lost: tuple[str, ...]
    checked: Checked
    diff: PlanDiff | None


def replan_file(path: str | os.PathLike[str], without: Sequence[str], params: Params = None,
                full: Plan | None = None) -> Replan:
    """``orchestrate plan SPEC --without DEVICE...``: the spec planned again on the devices left.

    ``without``: device strings or patterns (``/job:worker/task:0/device:GPU:3``, ``/job:worker/task:1``).
    Raises :class:`SpecError` when the spec itself has errors, :class:`UsageError` for a device the cluster
    does not have (with the closest name). ``full``: the spec's plan with these params, when it is at hand."""
    full = full or plan_file(path, params=params)
    lost = lost_devices(full.spec.cluster, without)
    checked = check_file(path, params=params, without=lost)
    placed = checked.plan is not None and not any(d.is_error and d.code in PLACEMENT_CODES
                                                  for d in checked.diagnostics)
    diff = _diff_plans(checked.plan, full) if placed and checked.plan is not None else None
    return Replan(full, lost, checked, diff)


def run_plan(plan: Plan, settings: RunSettings | None = None,
             echo: Callable[[str], None] | None = None) -> RunResult:
    """Run a plan on the cluster its spec (or ``settings``) names, or in this process with ``sync=True``;
    its values and run report."""
    from .cache import check_checkpoint_paths, check_settings

    check_settings(plan, settings or RunSettings())  # before the execution stage is even imported
    check_checkpoint_paths(plan, settings.output_dir if settings is not None else None)
    if settings is not None and settings.granularity != "partition":
        # the memory plan follows the granularity (a task per op holds values longer): the report's planned
        # peaks are those of the granularity the run uses
        plan = _memory_plan(plan, settings.granularity)
    problem = gpu_backend_problem(settings.gpu_backend) if settings and settings.gpu_backend is not None else None
    if problem is not None:  # the registry's names, before a cluster starts
        raise UsageError(f"--gpu-backend: {problem}")
    if settings is not None and settings.sync:
        from .execute import run_in_process

        return run_in_process(plan, settings, echo)
    if plan.spec.run.on_device_lost == "replan":
        from .execute import run_replanning

        chosen = settings or RunSettings()
        return run_replanning(plan, chosen, echo or (lambda text: print(text, flush=True)),
                              lambda lost: _replanned(plan, chosen.granularity, lost))
    from .execute import run_plan as execute

    return execute(plan, settings, echo)


def _memory_plan(plan: Plan, granularity: str) -> Plan:
    """``plan``'s memory planned again at ``granularity``, with the collector paused as ``check_file`` pauses it:
    a plan is millions of objects that live on, and a full pass over them came round every few thousand ops."""
    with paused_gc():
        return plan_memory(plan, granularity)


def _replanned(full: Plan, granularity: str, lost: Sequence[str]) -> Replanned:
    """A run's re-plan without the devices it lost for good: ``replan_file``'s, with the run's params and
    granularity, as ``orchestrate plan --without`` shows it (execute.replanning goes on with it)."""
    from .execute import Replanned
    from .report.diff import plan_diff_dict
    from .report.replan import ReplanView, replan_text

    params = {p.name: p.value for p in full.spec.params if p.source != "default"}
    try:
        replan = replan_file(full.spec.document.file, lost, params, full=full)
    except OrchestratorError as exc:  # nothing left to plan on, or the spec file changed under the run
        return Replanned(None, "", None, str(exc).splitlines()[0])
    checked = replan.checked
    view = ReplanView(full, replan.lost, checked.plan, checked.diagnostics, replan.diff)
    text = replan_text(view, with_plan=False)
    if not view.ok or checked.plan is None or replan.diff is None:
        first = next((d for d in checked.diagnostics if d.is_error), None)
        return Replanned(None, text, None, first.render() if first is not None else "no plan could be made")
    plan = checked.plan if granularity == "partition" else _memory_plan(checked.plan, granularity)
    return Replanned(plan, text, plan_diff_dict(replan.diff))


def run_file(path: str | os.PathLike[str], settings: RunSettings | None = None, *,
             echo: Callable[[str], None] | None = None, params: Params = None, **overrides: object) -> RunResult:
    """Check, plan and run a spec; return its values and run report.

    ``params`` set the spec's ``params:`` (as ``--set`` does). ``overrides`` are fields of
    :class:`~orchestrator.execute.records.RunSettings` (``scheduler``, ``output_dir``, ``report_path``, ...).
    """
    from dataclasses import replace as _replace

    plan = plan_file(path, params=params)
    chosen = _replace(settings or RunSettings(), **overrides)  # type: ignore[arg-type]
    return run_plan(plan, chosen, echo)


def cache_directory(spec_path: str | os.PathLike[str]) -> str:
    """The default cache directory of a spec: ``.orchestrate/cache`` beside it. The spec must exist: a
    mistyped name would otherwise list (or clear) the cache of whatever folder it points into."""
    from .cache import default_directory

    if not os.path.isfile(spec_path):
        what = "is not a file" if os.path.exists(spec_path) else "does not exist"
        raise OrchestratorError(f"spec {os.fspath(spec_path)} {what} (give a spec, or --cache-dir DIR)")
    return default_directory(os.path.dirname(os.path.abspath(spec_path)))


def _cache(directory: str) -> Cache:
    """An existing cache directory, or one not made yet (it holds nothing); a file in its place is refused."""
    from .cache import Cache, directory_problem

    problem = directory_problem(directory, write=False) if directory.strip() else "the cache directory is empty"
    if problem is not None:
        raise OrchestratorError(problem)
    return Cache(directory)


def cache_entries(directory: str) -> list[dict[str, object]]:
    """Every entry of a cache directory: its key, what made it, its size and when."""
    return list(_cache(directory).entries())


def clear_cache(directory: str) -> int:
    """Remove every entry of a cache directory; how many."""
    cache = _cache(directory)
    try:
        return cache.clear()
    except OSError as exc:
        raise OrchestratorError(f"cannot clear {directory}: {exc.filename or directory}: "
                                f"{exc.strerror or exc}") from None


def checkpoint_listing(spec: str | os.PathLike[str] | Plan | None = None, directory: str | None = None, *,
                       params: Params = None, output_dir: str | None = None, cache_dir: str | None = None,
                       cache_files: str = "stat") -> Listing:
    """The checkpoints of a spec's loops (a file, or its plan; where a run with these options keeps them, with
    each loop's current revision), or of a folder (``directory``: no revision is current). Raises
    :class:`SpecError` for a spec with errors."""
    from .cache import compute_keys, scan
    from .paths import checkpoint_root, output_directory

    if directory is not None:
        if not os.path.isdir(directory):
            what = "is not a folder" if os.path.exists(directory) else "does not exist"
            raise OrchestratorError(f"checkpoint folder {directory} {what}")
        return scan([directory])
    assert spec is not None
    plan = spec if isinstance(spec, Plan) else plan_file(spec, params=params)
    loops, name = plan.spec.loops, plan.spec.name
    base = os.path.abspath(plan.spec.document.directory)
    out = output_directory(base, output_dir, plan.spec.run.output_dir)
    roots = [checkpoint_root(base, name, None, out, cache_dir)]  # loops that once had no path: here too
    roots += [checkpoint_root(base, name, loop.checkpoint.path, out, cache_dir) for loop in loops
              if loop.checkpoint is not None and loop.checkpoint.path is not None]
    revisions = compute_keys(plan, base, cache_files).revisions
    current = {loop.name: revisions[loop.name] for loop in loops
               if loop.checkpoint is not None and loop.name in revisions}
    return scan(list(dict.fromkeys(roots)), current)


def remove_checkpoints(paths: Sequence[str]) -> tuple[int, int]:
    """Remove checkpoint files (and temporaries of unfinished writes) named by a listing; (files, bytes)."""
    from .cache import remove

    try:
        return remove(paths)
    except OSError as exc:
        raise OrchestratorError(f"cannot remove {exc.filename}: {exc.strerror or exc}") from None


def select_worker_task(spec: Spec, job: str, task: int, gpus: Sequence[int | str] | None = None) -> TaskWorkers:
    """The devices of ``/job:job/task:task`` (``gpus``: this machine's physical GPUs, ordinals or UUIDs)."""
    from .execute import select_task

    return select_task(spec.cluster, job, task, gpus)


def worker_commands(spec: Spec, selected: TaskWorkers, scheduler: str, tls: Mapping[str, str | None]) -> list[str]:
    """The ``dask worker`` command of each device of ``selected`` (for dask-jobqueue, Kubernetes, ...)."""
    from .execute import dask_worker_commands, scheduler_address, tls_files

    files = tls_files(spec.cluster.tls, spec.document.directory, tls.get("ca_file"), tls.get("cert"), tls.get("key"))
    return dask_worker_commands(selected, scheduler_address(scheduler, files), files)


def serve_worker(spec: Spec, selected: TaskWorkers, scheduler: str, tls: Mapping[str, str | None], *,
                 host: str | None = None, timeout: float = 30.0, echo: Callable[[str], None] = print,
                 warn: Callable[[str], None] = print, verbose: bool = False, drain_timeout: float = 25.0) -> int:
    """Start the task's device workers, connected to ``scheduler``; serve until a signal (SIGTERM: the devices
    drain first, within ``drain_timeout`` seconds). The exit code."""
    from .execute import make_security, scheduler_address, serve_task, tls_files

    files = tls_files(spec.cluster.tls, spec.document.directory, tls.get("ca_file"), tls.get("cert"), tls.get("key"))
    return serve_task(selected, scheduler_address(scheduler, files), host=host, security=make_security(files),
                      timeout=timeout, echo=echo, warn=warn, verbose=verbose, drain_timeout=drain_timeout)


def render_run_report(path: str | os.PathLike[str]) -> str:
    """The HTML page of a run report file (``run --report``): a timeline per device, memory per device, tables.

    Every resource is inline, so the page opens offline. Raises
    :class:`~orchestrator.errors.OrchestratorError` when the file cannot be read or is not a run report.
    """
    from .report.html import render_run_report_file  # bokeh is imported only to draw

    return render_run_report_file(path)
