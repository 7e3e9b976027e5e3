"""Worker processes: forked from a server that has already imported what a worker needs.

Dask's nannies start each worker process with multiprocessing's ``spawn``
by default: a fresh interpreter that imports Dask, NumPy and the device
runtime all over again — half a second of CPU per worker, and the four
workers of a small spec starting at once on two cores took two seconds.
The embedded cluster's nannies use ``forkserver`` instead
(:func:`start_method`): one server process imports those modules once
(:data:`PRELOAD`), and every worker, restarts included, is a fork of it,
ready in about a tenth of a second (four at once on two cores: 0.17 s,
against 2 s spawned). Its workers also end without
tearing an interpreter down (a forked child leaves with ``os._exit``), so a
cluster closes in tens of milliseconds instead of hundreds.

Three things a fork inherits instead of setting afresh, and how each is kept
right:

* SIGINT. The server is started with SIGINT blocked (:func:`deaf_to_sigint`),
  and a signal mask survives exec and fork, so neither it (which also ignores
  SIGINT once it serves) nor any worker forked from it dies of a Ctrl-C sent to
  the process group: this process closes them.
* The environment. The server starts with this process's environment, the
  variables Dask sets before it starts a worker process
  (``distributed.nanny.pre-spawn-environ``: glibc's malloc trimming is read
  once, when a process starts) and one BLAS/OpenMP thread; each worker then
  gets its device's variables (``CUDA_VISIBLE_DEVICES``, its thread counts)
  from its nanny before anything of it runs. No CUDA library is preloaded, so
  ``CUDA_VISIBLE_DEVICES`` is read after it is set. The server also runs with
  Python's safe path (``python -c`` puts the working directory first on
  ``sys.path``, where a ``yaml.py`` would shadow what it preloads), which each
  worker's nanny sets back to this process's setting (:func:`restored_env`).
* NumPy's BLAS, loaded by the server with one thread: OpenBLAS and MKL read
  their thread variables only when loaded, so each worker sets the thread
  count of the BLAS it inherited to its device's at start (:func:`dask_setup`,
  a Dask worker preload). threadpoolctl does it: it finds every BLAS the
  process has loaded (OpenBLAS under its several symbol names, MKL, BLIS, on
  every platform) and calls its own setter, which this module once did by
  hand through ctypes, for OpenBLAS and MKL on Linux only. The server
  preloads it (:data:`PRELOAD`), so a worker pays nothing to import it, and
  this process, which starts no BLAS threads of its own, never imports it.

The server leaves as soon as this process has (it sees its pipe from here
close): without tearing an interpreter down either (:func:`_leave_at_once`),
since whatever waits for the output of ``orchestrate run`` to end (a pipe,
a benchmark) waits for the server too, which holds it.

Where forkserver is unavailable, or a fork server was started by another
part of the program (without SIGINT blocked, with its own preloads), the
workers are spawned as before.
"""

from __future__ import annotations

import atexit
import contextlib
import multiprocessing
import os
import signal
import sys
from collections.abc import Iterator, Mapping
from types import FrameType
from typing import Any

from ..backend_registry import BACKENDS

METHOD = "forkserver"
# What a worker process imports before it runs anything: Dask, NumPy (through Dask), the device runtime and
# threadpoolctl (dask_setup).
# Hardware backends are left out: a GPU library initialised before the fork, and before CUDA_VISIBLE_DEVICES
# is set, would be wrong in every worker.
PRELOAD: tuple[str, ...] = ("distributed", "distributed.protocol.numpy", "orchestrator.execute.plugin",
                            *sorted({e.path.partition(":")[0] for e in BACKENDS.values() if not e.hardware}),
                            "threadpoolctl", __name__)
SAFE_PATH = "PYTHONSAFEPATH"  # Python 3.11: no working directory (``-c``) first on sys.path
# Read from the worker's environment (set by its nanny), most specific first.
BLAS_VARIABLES = ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS")
_STARTED: set[int] = set()  # the process ids of the fork servers start_server started


def restored_env() -> dict[str, str]:
    """What a forked worker's nanny sets back in its environment: the server's own setting of Python's
    safe path (see :func:`start_server`) is not for the processes a worker's user code starts."""
    return {SAFE_PATH: os.environ.get(SAFE_PATH, "")}  # empty: unset, to Python


def start_method() -> dict[str, Any]:
    """The Dask settings that make nannies fork their workers from the server, when the server running is one
    :func:`start_server` started (else, or where there is none, they spawn them)."""
    running = _running_server()
    return {"distributed.worker.multiprocessing-method": METHOD} if running is not None and running in _STARTED \
        else {}


def available() -> bool:
    return METHOD in multiprocessing.get_all_start_methods()


def start_server(env: Mapping[str, str]) -> None:
    """Start the fork server now, if it is not running, with ``env`` added to its environment.

    Started before this process imports Dask, the server imports :data:`PRELOAD`
    meanwhile, on another core; the first worker is forked as soon as it is
    ready. One server per process serves every cluster it starts.
    """
    if not available():
        return
    from multiprocessing import forkserver

    running = _running_server()
    if running is not None and running not in _STARTED:
        # another part of this program started one (Python 3.14's default start method): SIGINT may reach
        # what it forks, and it preloads what that part chose; the workers are spawned (start_method)
        return
    multiprocessing.get_context(METHOD).set_forkserver_preload(list(PRELOAD))
    # The server runs ``python -c``, which puts the working directory first on sys.path: a module there named
    # as one the server preloads (a yaml.py, a numpy checkout) would be what every worker runs. Not for it.
    with deaf_to_sigint(), _environment({**env, SAFE_PATH: "1"}):
        forkserver.ensure_running()
    started = _running_server()
    if started is not None:
        _STARTED.add(started)
    if "distributed" in sys.modules:  # else this is called again once it is, before a nanny starts a worker
        import distributed.utils

        # a nanny's first start would otherwise import distributed's optional packages (pandas, ...) here, to
        # preload them there; the server is running: what it preloads is settled
        if hasattr(distributed.utils, "_forkserver_preload_set"):
            distributed.utils._forkserver_preload_set = True


def _running_server() -> int | None:
    """The process id of multiprocessing's fork server in this process, if one was started."""
    from multiprocessing import forkserver

    pid: int | None = getattr(getattr(forkserver, "_forkserver", None), "_forkserver_pid", None)
    return pid


@contextlib.contextmanager
def deaf_to_sigint() -> Iterator[None]:
    """Block SIGINT in this thread while the cluster's threads and worker processes are made.

    Ctrl-C in a terminal sends SIGINT to the whole process group. The
    worker processes must not die of it (each printed a traceback, and a
    nanny restarted what it saw die): this process closes them through
    their nannies. A signal mask is inherited by the threads a thread
    starts and kept across fork and exec, so the fork server, the event loop
    thread made here, the threads it starts and every worker process
    (restarts included) keep SIGINT blocked from their first instruction,
    which a handler installed by the worker would not. This thread's mask is
    restored afterwards: a Ctrl-C that came meanwhile is delivered then.
    """
    # multiprocessing starts its resource tracker with SIGINT blocked and then *unblocks* it in the
    # calling thread; started first, it leaves the mask set below alone.
    from multiprocessing import resource_tracker

    resource_tracker.ensure_running()
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


@contextlib.contextmanager
def _environment(env: Mapping[str, str]) -> Iterator[None]:
    """``env`` in this process's environment for the moment a child process is started (which copies it)."""
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _in_the_server() -> bool:
    """Whether this module is being imported by the fork server's preload (it is imported elsewhere too)."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "main" and frame.f_globals.get("__name__") == "multiprocessing.forkserver":
            return True
        frame = frame.f_back
    return False


def _leave_at_once() -> None:
    """The server's last exit hook to be registered, so the first to run: end now, torn down by the system."""
    os._exit(0)


if _in_the_server():
    atexit.register(_leave_at_once)


def dask_setup(worker: Any) -> None:
    """Dask's worker preload hook: this worker's BLAS gets the thread count its environment names."""
    import threadpoolctl  # preloaded by the server: already imported in a forked worker

    for name in BLAS_VARIABLES:
        value = os.environ.get(name, "")
        if value.isdigit() and int(value) > 0:
            # not used as a context: the limit holds for the worker's life (nothing restores the original)
            threadpoolctl.threadpool_limits(limits=int(value), user_api="blas")
            return
