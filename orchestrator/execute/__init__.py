"""Execution: clusters, the device runtime on workers, running plans, remote worker launchers.

``compile`` (a sibling stage) turns a plan into Dask graphs; this package
starts or connects to a cluster, runs those graphs there, checks where every
op ran and writes the outputs — or runs them in this process with no cluster
(:mod:`.sync`, ``run --sync``). It is the only stage importing
``distributed``, and only where a cluster is used (importing the package
does not); ``api`` imports it only when something runs.
"""

from .run import run_plan
from .sync import run_in_process
from .security import make_security, scheduler_address, tls_files
from .worker import TaskWorkers, dask_worker_commands, select_task, serve_task

__all__ = ["TaskWorkers", "dask_worker_commands", "make_security", "run_in_process", "run_plan", "scheduler_address",
           "select_task", "serve_task", "tls_files"]
