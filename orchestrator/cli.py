"""``orchestrate``: parse arguments, call the API, render, return an exit code.

Exit codes: 0 ok; 1 the spec is invalid or the run failed; 2 usage error.
No traceback reaches the user unless ``--debug`` is given.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import Any, NoReturn, TextIO

from . import api, report, report_diff
from .atomic import write_bytes, write_text
from .backends import gpu_backend_names
from .devices import parse_gpu_ids
from .errors import OrchestratorError, Terminated, UsageError, format_bytes
from .paths import PathUse, clashes
from .keys import OP_PREFIX_LIMIT, POLICIES
from .model import GRANULARITIES

EXIT_OK, EXIT_INVALID, EXIT_USAGE = 0, 1, 2


def _version() -> str:
    try:
        return version("orchestrator")
    except PackageNotFoundError:
        return "unknown"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # argparse exits; we return exit codes instead
        raise UsageError(f"{self.prog}: {message}")


def _add_set(p: argparse.ArgumentParser) -> None:
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", dest="set_params",
                   help="set a parameter of the spec's params: block (repeatable; VALUE is read as YAML: "
                        "--set lr=1e-3, --set sizes=[2,4])")


def _params(args: argparse.Namespace) -> dict[str, str]:
    """``--set NAME=VALUE`` options as a mapping (values stay text: validation reads them as YAML)."""
    params: dict[str, str] = {}
    for item in getattr(args, "set_params", []):
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise UsageError(f"orchestrate {args.command}: --set {item}: write NAME=VALUE, e.g. --set lr=0.01")
        params[name.strip()] = value
    return params


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="orchestrate", description="Declarative job specs for GPU and CPU compute on Dask.")
    parser.add_argument("--version", action="version", version=f"orchestrate {_version()}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks of unexpected errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    p = sub.add_parser("validate", help="check specs; executes nothing (for CI and pre-commit)",
                       description="Check specs against the schema, the cluster, placement and memory limits. "
                                   "Never imports user code, never starts a cluster.")
    p.add_argument("files", nargs="+", metavar="FILE")
    p.add_argument("--format", choices=sorted(report.DIAGNOSTIC_FORMATS), default="text",
                   help="text (default), json, github (GitHub Actions annotations) or sarif (SARIF 2.1.0 for "
                        "code scanning)")
    p.add_argument("--strict", action="store_true", help="warnings fail too")
    p.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)
    _add_set(p)
    p.set_defaults(handler=cmd_validate)

    p = sub.add_parser("plan", help="where every op runs, why, and memory per device",
                       description="Place every op and estimate peak memory per device. "
                                   "Never imports user code, never starts a cluster.")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--format", choices=sorted({*report.PLAN_FORMATS, *report_diff.PLAN_DIFF_FORMATS}),
                   default="text", help="text (default), json or dot; with --diff: text, json or github "
                                        "(annotations and a markdown summary)")
    p.add_argument("--dot", metavar="FILE", help="write a Graphviz graph: .dot, or .svg/.png (needs 'dot')")
    p.add_argument("--diff", metavar="OLD", help="show what changed from the plan of the spec OLD: ops added, "
                                                 "removed and moved, transfers, peak memory per device")
    p.add_argument("--fail-on", action="append", default=[], metavar="moved,memory",
                   help="with --diff, exit 1 when an op moved (moved) or a device's peak memory grew (memory); "
                        "repeat it or give a comma list")
    p.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)
    _add_set(p)
    p.set_defaults(handler=cmd_plan)

    p = sub.add_parser("run", help="run a spec on an embedded or remote Dask cluster",
                       description="Validate, place and run a spec. By default an embedded Dask cluster is built "
                                   "from the spec (one worker per device; simulated GPUs when no CUDA GPU is "
                                   "visible) and shut down afterwards.")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--scheduler", metavar="ADDRESS", help="use a running Dask scheduler instead of the spec's")
    p.add_argument("--output-dir", metavar="DIR", help="directory output paths are relative to")
    p.add_argument("--report", metavar="FILE", help="write a JSON run report (per op: planned device, worker, timings)")
    p.add_argument("--performance-report", metavar="FILE", help="write Dask's HTML performance report")
    p.add_argument("--keep-alive", action="store_true", help="keep the embedded cluster up after the run (Ctrl-C ends)")
    p.add_argument("--sync", action="store_true",
                   help="no cluster: every op in this process, in plan order, GPUs simulated (for pdb and quick "
                        "checks; not with --scheduler or --keep-alive)")
    p.add_argument("--gpu-backend", choices=gpu_backend_names(), help="override cluster.gpu_backend")
    p.add_argument("--wait-for-workers", type=float, default=30.0, metavar="SECONDS",
                   help="how long to wait for the devices of a remote cluster (default 30)")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="show a progress bar (default: on a terminal)")
    p.add_argument("--granularity", choices=GRANULARITIES, default="partition",
                   help="a Dask task per device partition (loops: per device and window; the default), or per op "
                        "(for debugging: every op its own task in the dashboard)")
    p.add_argument("--task-names", choices=POLICIES, default="auto",
                   help=f"how the dashboard groups tasks: by op name, or by op kind; auto: by name up to "
                        f"{OP_PREFIX_LIMIT} ops, by kind above (Dask's bookkeeping grows with the number of groups)")
    cache = p.add_argument_group("cache", "values kept on disk, keyed by what made them (docs/caching.md)")
    cache.add_argument("--resume", action="store_true",
                       help="reuse every value the cache holds, and keep every value this run makes "
                            "(run the same command again to finish a run that was stopped)")
    cache.add_argument("--cache-dir", metavar="DIR", help="where entries live (default: .orchestrate/cache beside "
                                                           "the spec)")
    cache.add_argument("--cache-files", choices=["stat", "hash"], default="stat",
                       help="a loaded file's part of a key: its size and modification time (default), or its bytes")
    cache.add_argument("--no-cache", action="store_true", help="neither read nor write the cache")
    _add_tls_flags(p)
    p.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)
    _add_set(p)
    p.set_defaults(handler=cmd_run)

    p = sub.add_parser("worker", help="start the Dask workers of one task of a spec on this machine",
                       description="Start, on this machine, one Dask worker process per device of one task "
                                   "(CPU:0 and each GPU or virtual GPU), named by the canonical device string, "
                                   "with the identity resources, memory limit, threads and visible GPUs the "
                                   "embedded cluster would give it, connected to a running scheduler. Serves "
                                   "until Ctrl-C or SIGTERM. See docs/clusters.md.")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--job", required=True, metavar="NAME", help="the job of the task (a key of cluster.jobs)")
    p.add_argument("--task", required=True, type=int, metavar="N", help="the task index within the job")
    p.add_argument("--scheduler", metavar="ADDRESS",
                   help="the scheduler, e.g. tcp://10.0.0.1:8786 (default: the spec's cluster.scheduler)")
    p.add_argument("--gpus", metavar="LIST", type=_gpu_list,
                   help="physical GPUs this task uses on this machine, e.g. 0,1 or GPU/MIG UUIDs as in "
                        "CUDA_VISIBLE_DEVICES (overrides gpus/visible_gpus)")
    p.add_argument("--host", metavar="HOST",
                   help="address the workers listen on and advertise (default: chosen by Dask)")
    p.add_argument("--timeout", type=float, default=30.0, metavar="SECONDS",
                   help="how long to try to reach the scheduler and start the workers (default 30)")
    p.add_argument("--dask-commands", action="store_true",
                   help="print the equivalent 'dask worker' command of each device and exit "
                        "(for dask-jobqueue, dask-kubernetes, dask-cuda)")
    _add_tls_flags(p)
    p.add_argument("--debug", action="store_true", help="also show Dask's own log messages")
    _add_set(p)
    p.set_defaults(handler=cmd_worker)

    p = sub.add_parser("cache", help="list or clear the cache of values",
                       description="The entries of a cache directory: what made each, its size and age (list), "
                                   "or remove them all (clear). See docs/caching.md.")
    p.add_argument("action", choices=["list", "clear"])
    p.add_argument("file", metavar="FILE", nargs="?", help="a spec: its cache directory (.orchestrate/cache beside it)")
    p.add_argument("--cache-dir", metavar="DIR", help="the cache directory (instead of a spec's)")
    p.add_argument("--format", choices=["text", "json"], default="text")
    p.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)
    p.set_defaults(handler=cmd_cache)

    p = sub.add_parser("schema", help="print the JSON Schema of the spec language",
                       description="Print the JSON Schema (2020-12) of spec files, for editors and CI.")
    p.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)
    p.set_defaults(handler=cmd_schema)

    p = sub.add_parser("report", help="draw a run report (run --report) as an HTML page",
                       description="Render a JSON run report as one self-contained HTML page (it opens offline): "
                                   "a timeline per device with the values Dask moved between devices, and each "
                                   "device's planned and observed peak memory against its limit. See "
                                   "docs/run-report.md.")
    p.add_argument("file", metavar="RUN.json", help="a report written by 'orchestrate run --report'")
    p.add_argument("--html", metavar="FILE", help="the page to write (default: RUN.json with .html for .json)")
    p.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)
    p.set_defaults(handler=cmd_report)
    return parser


def _add_tls_flags(p: argparse.ArgumentParser) -> None:
    group = p.add_argument_group("TLS", "mutual TLS through Dask's Security; override the spec's cluster.tls "
                                        "(paths relative to the current directory)")
    group.add_argument("--tls-ca-file", metavar="PEM", help="CA certificate that signed every certificate")
    group.add_argument("--tls-cert", metavar="PEM", help="this side's certificate")
    group.add_argument("--tls-key", metavar="PEM", help="this side's private key")


def _gpu_list(text: str) -> tuple[int | str, ...]:
    try:
        return parse_gpu_ids(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def cmd_validate(args: argparse.Namespace, out: TextIO) -> int:
    params = _params(args)
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
    if args.diff is not None:
        return _plan_diff(args, out)
    if args.fail_on:
        raise UsageError("orchestrate plan: --fail-on needs --diff OLD")
    if args.format not in report.PLAN_FORMATS:
        raise UsageError(f"orchestrate plan: --format {args.format} needs --diff OLD")
    plan = _checked(args.file, _params(args))
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
    if args.format not in report_diff.PLAN_DIFF_FORMATS:
        raise UsageError(f"orchestrate plan: --diff cannot render --format {args.format} "
                         f"(choose from {', '.join(report_diff.PLAN_DIFF_FORMATS)})")
    conditions = _fail_conditions(args.fail_on)
    params = _params(args)
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
    out.write(report_diff.PLAN_DIFF_FORMATS[args.format](diff))
    return EXIT_INVALID if diff.fails(conditions) else EXIT_OK


def _refuse_clashes(command: str, reads: Sequence[PathUse], writes: Sequence[PathUse]) -> None:
    """Before writing: never two things to one path, never over a file the command reads."""
    problems = clashes(reads, writes)
    if problems:
        raise UsageError(f"orchestrate {command}: {problems[0]}")


def _write_dot(target: str, dot_source: str) -> None:
    suffix = target.rsplit(".", 1)[-1].lower() if "." in target else ""
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
    settings = api.RunSettings(scheduler=args.scheduler, keep_alive=args.keep_alive, output_dir=args.output_dir,
                               report_path=args.report, performance_report=args.performance_report,
                               progress=args.progress, gpu_backend=args.gpu_backend,
                               wait_for_workers=args.wait_for_workers, tls_ca_file=args.tls_ca_file,
                               tls_cert=args.tls_cert, tls_key=args.tls_key, task_names=args.task_names,
                               granularity=args.granularity, use_cache=not args.no_cache, cache_dir=args.cache_dir,
                               resume=args.resume, cache_files=args.cache_files, sync=args.sync)
    plan = _checked(args.file, _params(args))  # after the flags: a usage error needs no spec
    if plan is None:
        return EXIT_INVALID

    def echo(text: str) -> None:
        out.write(text + "\n")
        out.flush()

    result = api.run_plan(plan, settings, echo)
    out.write(report.placement_summary(result.report))
    return EXIT_OK


def cmd_worker(args: argparse.Namespace, out: TextIO) -> int:
    plan = _checked(args.file, _params(args))
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

    return api.serve_worker(spec, selected, address, tls, host=args.host, timeout=args.timeout, echo=echo,
                            warn=warn, verbose=args.debug)


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


def run_cli(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    debug = "--debug" in (argv if argv is not None else sys.argv[1:])
    try:
        args = build_parser().parse_args(argv)
        if args.command is None:
            build_parser().print_help(out)
            return EXIT_USAGE
        handler: Callable[[argparse.Namespace, TextIO], int] = args.handler
        return handler(args, out)
    except UsageError as exc:
        sys.stderr.write(f"{exc}\n")
        return EXIT_USAGE
    except OrchestratorError as exc:
        if debug:
            raise
        sys.stderr.write(f"error: {exc}\n")
        return EXIT_INVALID
    except SystemExit as exc:  # argparse's --help and --version
        return int(exc.code or 0) if not isinstance(exc.code, str) else EXIT_USAGE
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        return 130
    except Terminated:
        sys.stderr.write("terminated\n")
        return 143
    except Exception as exc:  # a bug of ours: say so briefly, never a traceback without --debug
        if debug:
            raise
        sys.stderr.write(f"internal error: {type(exc).__name__}: {exc} (run with --debug for the traceback)\n")
        return EXIT_INVALID
