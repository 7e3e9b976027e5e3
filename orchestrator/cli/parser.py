"""The ``orchestrate`` command line: its parser, one function per command (parsing apart from running)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Mapping
from importlib.metadata import PackageNotFoundError, version
from typing import Any, NoReturn, TextIO

from .. import report
from ..backend_registry import gpu_backend_names
from ..compile.dask_keys import OP_PREFIX_LIMIT, POLICIES
from ..devices import parse_gpu_ids
from ..errors import UsageError
from ..plan.records import GRANULARITIES

Handler = Callable[[argparse.Namespace, TextIO], int]
Handlers = Mapping[str, Handler]


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


def params_of(args: argparse.Namespace) -> dict[str, str]:
    """``--set NAME=VALUE`` options as a mapping (values stay text: validation reads them as YAML)."""
    params: dict[str, str] = {}
    for item in getattr(args, "set_params", []):
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise UsageError(f"orchestrate {args.command}: --set {item}: write NAME=VALUE, e.g. --set lr=0.01")
        params[name.strip()] = value
    return params


def from_here(path: str | None) -> str | None:
    """A folder given on the command line, taken from the current directory as every other path flag is
    (``--report``, ``--cache-dir``); the spec's own ``run.output_dir`` is taken from the spec's folder."""
    return None if path is None else os.path.abspath(path)


def build_parser(handlers: Handlers) -> argparse.ArgumentParser:
    """The ``orchestrate`` parser; each command's ``handler`` is taken from ``handlers`` by its name."""
    parser = _Parser(prog="orchestrate", description="Declarative job specs for GPU and CPU compute on Dask.")
    parser.add_argument("--version", action="version", version=f"orchestrate {_version()}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks of unexpected errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    _add_validate(sub, handlers)
    _add_plan(sub, handlers)
    _add_run(sub, handlers)
    _add_worker(sub, handlers)
    _add_cache(sub, handlers)
    _add_checkpoints(sub, handlers)
    _add_schema(sub, handlers)
    _add_report(sub, handlers)
    return parser


def _add_validate(sub: Any, handlers: Handlers) -> None:
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
    p.set_defaults(handler=handlers["validate"])


def _add_plan(sub: Any, handlers: Handlers) -> None:
    p = sub.add_parser("plan", help="where every op runs, why, and memory per device",
                       description="Place every op and estimate peak memory per device. "
                                   "Never imports user code, never starts a cluster.")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--format", choices=sorted({*report.PLAN_FORMATS, *report.PLAN_DIFF_FORMATS}),
                   default="text", help="text (default), json or dot; with --diff: text, json or github "
                                        "(annotations and a markdown summary); with --without: text or json")
    p.add_argument("--dot", metavar="FILE", help="write a Graphviz graph: .dot, or .svg/.png (needs 'dot')")
    p.add_argument("--diff", metavar="OLD", help="show what changed from the plan of the spec OLD: ops added, "
                                                 "removed and moved, transfers, peak memory per device")
    p.add_argument("--without", action="append", default=[], metavar="DEVICE",
                   help="plan again without this device (a device string, or a pattern such as /job:worker/task:1 "
                        "for all its devices; repeatable), as a run that lost it would (run.on_device_lost: "
                        "replan), and show what changed from the full plan")
    p.add_argument("--fail-on", action="append", default=[], metavar="moved,memory",
                   help="with --diff, exit 1 when an op moved (moved) or a device's peak memory grew (memory); "
                        "repeat it or give a comma list")
    p.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)
    _add_set(p)
    p.set_defaults(handler=handlers["plan"])


def _add_run(sub: Any, handlers: Handlers) -> None:
    p = sub.add_parser("run", help="run a spec on an embedded or remote Dask cluster",
                       description="Validate, place and run a spec. By default an embedded Dask cluster is built "
                                   "from the spec (one worker per device; simulated GPUs when no CUDA GPU is "
                                   "visible) and shut down afterwards.")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--scheduler", metavar="ADDRESS", help="use a running Dask scheduler instead of the spec's")
    p.add_argument("--output-dir", metavar="DIR", help="directory output paths are relative to (a relative DIR is "
                   "taken from the current directory)")
    p.add_argument("--report", metavar="FILE", help="write a JSON run report (per op: planned device, worker, timings)")
    p.add_argument("--performance-report", metavar="FILE", help="write Dask's HTML performance report")
    p.add_argument("--keep-alive", action="store_true", help="keep the embedded cluster up after the run (Ctrl-C ends)")
    p.add_argument("--tensorboard", metavar="DIR",
                   help="also write each loop's metrics as TensorBoard event files under DIR (docs/tracking.md)")
    p.add_argument("--mlflow", metavar="DIR",
                   help="also record each loop (each sweep copy's loop) as an MLflow run, with its params and "
                        "metrics, in the MLflow file store DIR (docs/tracking.md)")
    p.add_argument("--sync", action="store_true",
                   help="no cluster: every op in this process, in plan order, GPUs simulated (for pdb and quick "
                        "checks; not with --scheduler or --keep-alive)")
    p.add_argument("--gpu-backend", choices=gpu_backend_names(), help="override cluster.gpu_backend")
    p.add_argument("--wait-for-workers", type=float, default=30.0, metavar="SECONDS",
                   help="how long to wait for the devices of a remote cluster without a sign of them coming up "
                        "(a device joining, a worker starting; default 30, ten times that at most)")
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
                       help="reuse every value the cache holds, and keep every value this run makes; a loop "
                            "with checkpoints goes on from its last one (run the same command again to finish "
                            "a run that was stopped)")
    cache.add_argument("--cache-dir", metavar="DIR", help="where entries live (default: .orchestrate/cache beside "
                                                           "the spec)")
    cache.add_argument("--cache-files", choices=["stat", "hash"], default="stat",
                       help="a loaded file's part of a key: its size and modification time (default), or its bytes")
    cache.add_argument("--no-cache", action="store_true", help="neither read nor write the cache")
    _add_tls_flags(p)
    p.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)
    _add_set(p)
    p.set_defaults(handler=handlers["run"])


def _add_worker(sub: Any, handlers: Handlers) -> None:
    p = sub.add_parser("worker", help="start the Dask workers of one task of a spec on this machine",
                       description="Start, on this machine, one Dask worker process per device of one task "
                                   "(CPU:0 and each GPU or virtual GPU), named by the canonical device string, "
                                   "with the identity resources, memory limit, threads and visible GPUs the "
                                   "embedded cluster would give it, connected to a running scheduler. Serves "
                                   "until Ctrl-C, or SIGTERM (a notice: the devices drain first). See "
                                   "docs/clusters.md.")
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
                   help="how long to try to reach the scheduler, and how long the workers' start may go "
                        "without progress (default 30; ten times that at most)")
    p.add_argument("--drain-timeout", type=float, default=25.0, metavar="SECONDS",
                   help="on SIGTERM, how long the devices may take to finish the window in flight, be "
                        "checkpointed and retire before the workers leave anyway (default 25: Kubernetes' 30 s "
                        "grace period less 5 s to close; 0: leave at once)")
    p.add_argument("--dask-commands", action="store_true",
                   help="print the equivalent 'dask worker' command of each device and exit "
                        "(for dask-jobqueue, dask-kubernetes, dask-cuda)")
    _add_tls_flags(p)
    p.add_argument("--debug", action="store_true", help="also show Dask's own log messages")
    _add_set(p)
    p.set_defaults(handler=handlers["worker"])


def _add_cache(sub: Any, handlers: Handlers) -> None:
    p = sub.add_parser("cache", help="list or clear the cache of values",
                       description="The entries of a cache directory: what made each, its size and age (list), "
                                   "or remove them all (clear). See docs/caching.md.")
    p.add_argument("action", choices=["list", "clear"])
    p.add_argument("file", metavar="FILE", nargs="?", help="a spec: its cache directory (.orchestrate/cache beside it)")
    p.add_argument("--cache-dir", metavar="DIR", help="the cache directory (instead of a spec's)")
    p.add_argument("--format", choices=["text", "json"], default="text")
    p.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)
    p.set_defaults(handler=handlers["cache"])


def _add_checkpoints(sub: Any, handlers: Handlers) -> None:
    p = sub.add_parser("checkpoints", help="list or clear the checkpoints of a spec's loops",
                       description="The checkpoint files of a spec's loops, where a run with the same options keeps "
                                   "them (or of a folder, --dir): by loop and revision, with the parameters that "
                                   "made each revision and the time of each step (list); or remove a selection of "
                                   "them (clear). A run removes only older checkpoints of the revision it writes. "
                                   "See docs/running.md.")
    p.add_argument("action", choices=["list", "clear"])
    p.add_argument("file", metavar="FILE", nargs="?", help="a spec: the checkpoint folders of its loops")
    p.add_argument("--dir", metavar="DIR", help="a checkpoint folder (instead of a spec's)")
    p.add_argument("--output-dir", metavar="DIR", help="as given to run: a loop's checkpoint.path is under it")
    p.add_argument("--cache-dir", metavar="DIR", help="as given to run: checkpoints without a path are under it")
    p.add_argument("--cache-files", choices=["stat", "hash"], default="stat",
                   help="as given to run: how a loaded file is part of the revision (default stat)")
    p.add_argument("--loop", action="append", default=[], metavar="NAME", help="only this loop's (repeatable)")
    chosen = p.add_argument_group("clear", "which checkpoints clear removes (one of these is required)")
    chosen.add_argument("--keep-current", action="store_true",
                        help="every revision but the current one (the spec's, with its --set values)")
    chosen.add_argument("--revision", action="append", default=[], metavar="KEY",
                        help="the revision whose key starts with KEY (4 digits or more; repeatable)")
    chosen.add_argument("--all", action="store_true", help="every checkpoint (of the --loop given)")
    chosen.add_argument("--dry-run", action="store_true", help="list what would be removed, remove nothing")
    p.add_argument("--format", choices=["text", "json"], default="text", help="list: text (default) or json")
    p.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)
    _add_set(p)
    p.set_defaults(handler=handlers["checkpoints"])


def _add_schema(sub: Any, handlers: Handlers) -> None:
    p = sub.add_parser("schema", help="print the JSON Schema of the spec language",
                       description="Print the JSON Schema (2020-12) of spec files, for editors and CI.")
    p.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)
    p.set_defaults(handler=handlers["schema"])


def _add_report(sub: Any, handlers: Handlers) -> None:
    p = sub.add_parser("report", help="draw a run report (run --report) as an HTML page",
                       description="Render a JSON run report as one self-contained HTML page (it opens offline): "
                                   "a timeline per device with the values Dask moved between devices, and each "
                                   "device's planned and observed peak memory against its limit. See "
                                   "docs/run-report.md.")
    p.add_argument("file", metavar="RUN.json", help="a report written by 'orchestrate run --report'")
    p.add_argument("--html", metavar="FILE", help="the page to write (default: RUN.json with .html for .json)")
    p.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)
    p.set_defaults(handler=handlers["report"])


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
