"""What each ``orchestrate`` command does: call the API, render, return an exit code (never ``sys.exit``)."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, TextIO

from .. import api, report
from ..atomic import write_bytes, write_text
from ..errors import OrchestratorError, UsageError, format_bytes
from ..paths import PathUse, clashes
from .checkpoints import cmd_checkpoints
from .parser import from_here, params_of

if TYPE_CHECKING:
    from .progress import TerminalProgress

EXIT_OK, EXIT_INVALID, EXIT_USAGE = 0, 1, 2
EXIT_RUN_FAILED = 1  # as a run that raised: a sweep's copies failed and the sweep does not allow it


def cmd_validate(args: argparse.Namespace, out: TextIO) -> int:
    params = params_of(args)
    results = [api.check_file(path, params=params) for path in args.files]
    files = [(r.file, r.diagnostics) for r in results]
    out.write(report.DIAGNOSTIC_FORMATS[args.format](files, args.strict))
    return EXIT_OK if all(r.ok(args.strict) for r in results) else EXIT_INVALID


def _checked(path: str, params: dict[str, str] | None = None) -> api.Plan | None:
    """The plan of a spec for plan/run/worker: diagnostics to stderr; ``None`` when it has errors."""
    checked = api.check_file(path, params=params)
    if checked.errors or checked.plan is None:
        sys.stderr.write(report.diagnostics_text([(checked.file, checked.diagnostics)]))
        return None
    for d in checked.warnings:
        sys.stderr.write(d.render() + "\n")
    return checked.plan


def cmd_plan(args: argparse.Namespace, out: TextIO) -> int:
    if args.without and args.diff is not None:
        raise UsageError("orchestrate plan: --without and --diff OLD cannot be combined (--without shows its own "
                         "diff: from the full plan)")
    if args.without:
        return _plan_without(args, out)
    if args.diff is not None:
        return _plan_diff(args, out)
    if args.fail_on:
        raise UsageError("orchestrate plan: --fail-on needs --diff OLD or --without DEVICE")
    if args.format not in report.PLAN_FORMATS:
        raise UsageError(f"orchestrate plan: --format {args.format} needs --diff OLD")
    plan = _checked(args.file, params_of(args))
    if plan is None:
        return EXIT_INVALID
    if args.dot:
        _refuse_clashes("plan", [PathUse(args.file, "the spec")], [PathUse(args.dot, "the graph (--dot)")])
        _write_dot(args.dot, report.plan_dot(plan))
    out.write(report.PLAN_FORMATS[args.format](plan))
    return EXIT_OK


def _fail_conditions(given: Sequence[str]) -> set[str]:
    """``--fail-on moved --fail-on memory`` or ``--fail-on moved,memory``: the set of conditions."""
    conditions = {word.strip() for value in given for word in value.split(",") if word.strip()}
    unknown = sorted(conditions - set(api.FAIL_CONDITIONS))
    if unknown:
        raise UsageError(f"orchestrate plan: --fail-on: unknown condition '{unknown[0]}' "
                         f"(choose from {', '.join(api.FAIL_CONDITIONS)})")
    return conditions


def _plan_diff(args: argparse.Namespace, out: TextIO) -> int:
    """``plan NEW --diff OLD``: an invalid spec gets its diagnostics as ``validate --format`` prints them."""
    if args.format not in report.PLAN_DIFF_FORMATS:
        raise UsageError(f"orchestrate plan: --diff cannot render --format {args.format} "
                         f"(choose from {', '.join(report.PLAN_DIFF_FORMATS)})")
    conditions = _fail_conditions(args.fail_on)
    params = params_of(args)
    checked = [api.check_file(args.file, params=params), api.check_file(args.diff, params=params)]
    new, old = checked[0].plan, checked[1].plan
    invalid = [(c.file, c.diagnostics) for c in checked if c.errors or c.plan is None]
    if invalid or new is None or old is None:
        out.write(report.DIAGNOSTIC_FORMATS[args.format](invalid, False))
        return EXIT_INVALID
    for c in checked:
        for d in c.warnings:
            sys.stderr.write(d.render() + "\n")
    if args.dot:
        _refuse_clashes("plan", [PathUse(args.file, "the spec"), PathUse(args.diff, "the spec it is compared with")],
                        [PathUse(args.dot, "the graph (--dot)")])
        _write_dot(args.dot, report.plan_dot(new))
    diff = api.diff_plans(new, old)
    out.write(report.PLAN_DIFF_FORMATS[args.format](diff))
    return EXIT_INVALID if diff.fails(conditions) else EXIT_OK


def _plan_without(args: argparse.Namespace, out: TextIO) -> int:
    """``plan SPEC --without DEVICE...``: the re-plan on the devices left and its diff from the full plan; exit 1
    when it does not hold (an op pinned to a lost device, a peak that no longer fits) or a ``--fail-on`` holds."""
    if args.format not in report.REPLAN_FORMATS:
        raise UsageError(f"orchestrate plan: --without cannot render --format {args.format} "
                         f"(choose from {', '.join(report.REPLAN_FORMATS)})")
    if args.dot:
        raise UsageError("orchestrate plan: --dot draws the full plan; leave --without out for it")
    conditions = _fail_conditions(args.fail_on)
    full = _checked(args.file, params_of(args))
    if full is None:
        return EXIT_INVALID
    replan = api.replan_file(args.file, args.without, params_of(args), full)
    view = report.ReplanView(replan.full, replan.lost, replan.checked.plan, replan.checked.diagnostics, replan.diff)
    out.write(report.REPLAN_FORMATS[args.format](view))
    failed = not view.ok or (replan.diff is not None and replan.diff.fails(conditions))
    return EXIT_INVALID if failed else EXIT_OK


def _refuse_clashes(command: str, reads: Sequence[PathUse], writes: Sequence[PathUse]) -> None:
    """Before writing: never two things to one path, never over a file the command reads."""
    problems = clashes(reads, writes)
    if problems:
        raise UsageError(f"orchestrate {command}: {problems[0]}")


def _write_dot(target: str, dot_source: str) -> None:
    suffix = os.path.splitext(target)[1].removeprefix(".").lower()
    if suffix not in ("svg", "png"):
        write_text(target, dot_source)
        return
    exe = shutil.which("dot")
    if exe is None:
        raise UsageError(f"cannot render {target}: Graphviz 'dot' is not installed (write a .dot file instead)")
    done = subprocess.run([exe, f"-T{suffix}"], input=dot_source.encode(), capture_output=True, timeout=120)
    if done.returncode != 0:
        raise UsageError(f"dot failed to render {target}: {done.stderr.decode(errors='replace').strip()}")
    write_bytes(target, done.stdout)


def cmd_run(args: argparse.Namespace, out: TextIO) -> int:
    settings = api.RunSettings(scheduler=args.scheduler, keep_alive=args.keep_alive, output_dir=from_here(args.output_dir),
                               report_path=args.report, performance_report=args.performance_report,
                               progress=args.progress, gpu_backend=args.gpu_backend,
                               wait_for_workers=args.wait_for_workers, tls_ca_file=args.tls_ca_file,
                               tls_cert=args.tls_cert, tls_key=args.tls_key, task_names=args.task_names,
                               granularity=args.granularity, use_cache=not args.no_cache, cache_dir=args.cache_dir,
                               resume=args.resume, cache_files=args.cache_files, sync=args.sync,
                               tensorboard=args.tensorboard, mlflow=args.mlflow)
    plan = _checked(args.file, params_of(args))  # after the flags: a usage error needs no spec
    if plan is None:
        return EXIT_INVALID

    view = terminal_progress(out, args.progress)
    if view is None:
        result = api.run_plan(plan, settings, _echo_to(out))
    else:
        with view:  # stopped however the run ends (a Ctrl-C included), its last picture left on the screen
            result = api.run_plan(plan, replace(settings, progress_view=view), view.echo)
    out.write(report.placement_summary(result.report))
    failed, fatal = report.failed_copies(result.report)
    for line in failed:
        out.write(line + "\n")
    return EXIT_RUN_FAILED if fatal else EXIT_OK


def terminal_progress(out: TextIO, asked: bool | None) -> TerminalProgress | None:
    """The loops' view for ``orchestrate run``: on a terminal only, unless ``--no-progress`` (``asked`` False)."""
    isatty = getattr(out, "isatty", None)
    if asked is False or isatty is None or not isatty():
        return None  # the run prints as it always has (the plain line with --progress): pipes, CI, tests
    from .progress import TerminalProgress  # rich is imported only where it draws

    return TerminalProgress(out)


def _echo_to(out: TextIO) -> Callable[[str], None]:
    def echo(text: str) -> None:
        out.write(text + "\n")
        out.flush()

    return echo


def cmd_worker(args: argparse.Namespace, out: TextIO) -> int:
    plan = _checked(args.file, params_of(args))
    if plan is None:
        return EXIT_INVALID
    spec = plan.spec
    selected = api.select_worker_task(spec, args.job, args.task, args.gpus)
    tls = {"ca_file": args.tls_ca_file, "cert": args.tls_cert, "key": args.tls_key}
    address = args.scheduler or spec.cluster.scheduler
    if address in ("local", "", None):
        if not args.dask_commands:
            raise UsageError("orchestrate worker: --scheduler ADDRESS is required "
                             "(the spec's cluster.scheduler is 'local')")
        address = "SCHEDULER_HOST:8786"  # a placeholder for the printed commands, shaped as an address
    if args.dask_commands:
        out.writelines(command + "\n" for command in api.worker_commands(spec, selected, address, tls))
        return EXIT_OK

    def echo(text: str) -> None:
        out.write(text + "\n")
        out.flush()

    def warn(text: str) -> None:
        sys.stderr.write(text + "\n")
        sys.stderr.flush()

    if not args.drain_timeout >= 0:
        raise UsageError(f"orchestrate worker: --drain-timeout must be 0 or more seconds, got {args.drain_timeout:g}")
    return api.serve_worker(spec, selected, address, tls, host=args.host, timeout=args.timeout, echo=echo,
                            warn=warn, verbose=args.debug, drain_timeout=args.drain_timeout)


def cmd_cache(args: argparse.Namespace, out: TextIO) -> int:
    if (args.file is None) == (args.cache_dir is None):
        raise UsageError("orchestrate cache: give a spec FILE or --cache-dir DIR (one of them)")
    if args.cache_dir is not None and not args.cache_dir.strip():
        raise UsageError("orchestrate cache: --cache-dir is empty: give a directory")
    directory = args.cache_dir or api.cache_directory(args.file)
    if args.action == "clear":
        removed = api.clear_cache(directory)
        out.write(f"removed {removed} entr{'y' if removed == 1 else 'ies'} from {directory}\n")
        return EXIT_OK
    entries = api.cache_entries(directory)
    if args.format == "json":
        import json

        out.write(json.dumps(entries, indent=2, default=str) + "\n")
        return EXIT_OK
    total = sum(int(str(e.get("file_bytes", 0))) for e in entries)
    for e in entries:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(float(str(e.get("created", 0)))))
        size = format_bytes(int(str(e.get("file_bytes", 0))))
        out.write(f"{str(e.get('key', '?'))[:12]}  {when}  {size:>10}  {e.get('what', '?')}\n")
    out.write(f"{len(entries)} entr{'y' if len(entries) == 1 else 'ies'}, {format_bytes(total)}, in {directory}\n")
    return EXIT_OK


def cmd_schema(args: argparse.Namespace, out: TextIO) -> int:
    text = api.schema_text()
    out.write(text)
    if not text.endswith("\n"):
        out.write("\n")
    return EXIT_OK


def cmd_report(args: argparse.Namespace, out: TextIO) -> int:
    file: str = args.file
    target: str = args.html or (file.removesuffix(".json")) + ".html"
    _refuse_clashes("report", [PathUse(file, "the run report it reads")], [PathUse(target, "the page (--html)")])
    page = api.render_run_report(file)  # a file that is not a run report raises before anything is written
    try:
        write_text(target, page)
    except OSError as exc:
        raise OrchestratorError(f"cannot write {target}: {exc.strerror or exc}") from None
    out.write(f"wrote {target}\n")
    return EXIT_OK


HANDLERS: Mapping[str, Callable[[argparse.Namespace, TextIO], int]] = {
    "validate": cmd_validate, "plan": cmd_plan, "run": cmd_run, "worker": cmd_worker, "cache": cmd_cache,
    "checkpoints": cmd_checkpoints, "schema": cmd_schema, "report": cmd_report,
}
