"""Stage 4, graphs -> RunResult, the client: clusters, running plans, remote worker launchers.

``compile`` (the stage below) turns a plan into Dask graphs; this package
starts or connects to a cluster, runs those graphs there, checks where every
op ran and writes the outputs — or runs them in this process with no cluster
(:mod:`.sync`, ``run --sync``). It installs the device runtime (stage 5,
:mod:`orchestrator.runtime`) on every worker through a Dask worker plugin
(:mod:`.plugin`). It is the only stage importing
``distributed``, and only where a cluster is used (importing the package
does not); ``api`` imports it only when something runs.

The names below are imported on first use: a worker process imports
:mod:`.plugin` (it installs the device runtime), and that must not drag in the client's
machinery (the runner, the compiler, the spec's checks: half a second per
worker), and ``orchestrate validate`` or ``plan`` never needs any of it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .replanning import Replanned, run_replanning
    from .run import run_plan
    from .security import make_security, scheduler_address, tls_files
    from .sync import run_in_process
    from .worker import TaskWorkers, dask_worker_commands, select_task, serve_task

__all__ = ["Replanned", "TaskWorkers", "dask_worker_commands", "make_security", "run_in_process", "run_plan", "run_replanning", "scheduler_address",
           "select_task", "serve_task", "tls_files"]

_HOMES = {"run_plan": "run", "run_replanning": "replanning", "Replanned": "replanning", "run_in_process": "sync", "make_security": "security", "scheduler_address": "security",
          "tls_files": "security", "TaskWorkers": "worker", "dask_worker_commands": "worker",
          "select_task": "worker", "serve_task": "worker"}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module '{__name__}' has no attribute '{name}'")
    return getattr(importlib.import_module(f".{home}", __name__), name)
