"""User code on a worker: the folder it runs in, and which frames of its errors the user is shown.

**Relative paths mean the spec's folder.** A ``call`` function that opens
``data/x.npy`` (itself, or through NumPy) resolves it against the process's
working directory. That directory belongs to the whole process, not to a
thread, and a worker runs ops in threads, so it cannot be set per op. Every
user call therefore runs inside :meth:`WorkingDirectory.lent` with its spec's
folder (the absolute ``base_dir`` the client put in the task):

* the first call changes the process's directory to its folder; calls of the
  same folder running at the same time (a worker's other threads) share it;
  a call of another folder waits until none of those runs (and, once one
  waits, newcomers of the current folder wait behind it). While any user
  call runs, the directory is the folder of every call running.
* when the last running call returns, the directory goes back to what it was.

It is the same for every worker: the embedded cluster's (Nanny processes),
``orchestrate worker``'s and plain ``dask worker`` processes, which already
need the spec's folder at the client's absolute path (docs/clusters.md). The
lease is one per process, not per device runtime: a process may hold several
workers. A worker living in the client's own process (a
``LocalCluster(processes=False)`` reached with ``--scheduler``) changes the
client's directory too while a call runs: the run's own paths (the spec's
folder, the output directory) are absolute, but other code of that process,
and a relative path handed to the client (``--cache-dir``), see the spec's
folder meanwhile. There is no in-process path of our own: ops run only on
workers. Built-in ops (``load``, ``save``) join their paths to the spec's
folder themselves and never depend on the directory. A call abandoned past
its ``timeout`` keeps its lease until it returns by itself: a call of another
folder in that process waits for it.

**Each call pays for its lease** (a ``getcwd`` and two ``chdir``, about 4 µs
with the lock, against 10 µs or more of the smallest user function): the
directory is not kept lent between calls. Keeping it would save those system
calls but let the process's other code (the client's, in ``--sync`` or an
in-process cluster) see the spec's folder between ops, and a function that
changes the directory itself would move where the next call starts. So every
call enters its folder afresh, whatever the one before did with it, and the
last one out puts back what was there before the first
(``tests/test_device_hot_path.py``).

**Errors show the user's frame first**: :func:`user_origin` names the
innermost frame of the user's own code (not NumPy's, not the standard
library's), then where the exception was raised when that is elsewhere.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import importlib
import os
import site
import sys
import sysconfig
import threading
import traceback
from types import TracebackType
from typing import Any, Callable

from ..errors import OpFailedError

PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class WorkingDirectory:
    """The process's working directory, lent to user calls: calls running at one time share one folder."""

    def __init__(self) -> None:
        # a plain lock, taken as itself (C, not Condition's Python methods): twice per call, never re-entered;
        # the condition on it only for a call of another folder waiting
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._folder = ""  # the folder lent now; "" while no call runs
        self._holders = 0
        self._home: str | None = None  # the directory before the first call in: restored after the last
        self._waiting: collections.Counter[str] = collections.Counter()  # folders of the calls waiting

    def lent(self, folder: str) -> _Lease:
        """A context in which ``folder`` (absolute) is the process's working directory."""
        return _Lease(self, folder)

    def enter(self, folder: str) -> None:
        with self._lock:
            if self._holders:
                if self._folder == folder and not self._waiting:  # a call of the folder lent now: join it
                    self._holders += 1
                    return
                self._wait_for(folder)
            if not self._holders:
                try:
                    self._home = os.getcwd()
                except OSError:  # the old directory was removed: nothing to go back to
                    self._home = None
                if self._home != folder:
                    try:
                        os.chdir(folder)
                    except OSError:
                        if self._waiting:
                            self._changed.notify_all()  # those that waited behind this call may go
                        raise
                self._folder = folder
            self._holders += 1

    def _wait_for(self, folder: str) -> None:
        # once a call of another folder waits, calls of the current one wait too: it is not starved
        self._waiting[folder] += 1
        try:
            while self._holders and (self._folder != folder or len(self._waiting) > 1):
                self._changed.wait()
        finally:
            self._waiting[folder] -= 1
            if not self._waiting[folder]:
                del self._waiting[folder]

    def leave(self) -> None:
        with self._lock:
            self._holders -= 1
            if self._holders:
                return
            if self._home is not None and self._home != self._folder:
                with contextlib.suppress(OSError):
                    os.chdir(self._home)
            self._folder = ""
            if self._waiting:  # only a waiting call is woken (most calls find none: no notify to pay)
                self._changed.notify_all()


class _Lease:
    """``with``: one call's hold on the working directory (a class, not a generator: it runs per call)."""

    __slots__ = ("directory", "folder")

    def __init__(self, directory: WorkingDirectory, folder: str):
        self.directory, self.folder = directory, folder

    def __enter__(self) -> None:
        self.directory.enter(self.folder)

    def __exit__(self, *_: object) -> None:
        self.directory.leave()


WORKING_DIRECTORY = WorkingDirectory()


def import_function(fn_path: str, base_dir: str, op: str, device: str, user_paths: set[str],
                    lock: threading.Lock) -> Callable[..., Any]:
    """Import ``package.module:function`` from the spec's directory (put first on the Python path, once:
    ``user_paths`` under ``lock``) or the Python path; an error names the op and its device."""
    module_name, _, fn_name = fn_path.partition(":")
    with lock:
        if base_dir not in user_paths:
            sys.path.insert(0, base_dir)
            user_paths.add(base_dir)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise OpFailedError(op, device, f"cannot import module '{module_name}' for fn '{fn_path}': {exc}",
                            f"looked in {base_dir} and the Python path") from None
    fn = getattr(module, fn_name, None)
    if fn is None:
        raise OpFailedError(op, device, f"module '{module_name}' has no function '{fn_name}'", module.__file__ or "")
    return fn  # type: ignore[no-any-return]


@functools.lru_cache(maxsize=1)
def _library_dirs() -> tuple[str, ...]:
    """Where installed code lives (standard library, site-packages): frames there are not the user's."""
    paths = sysconfig.get_paths()
    found = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    found.update(site.getsitepackages())
    found.add(site.getusersitepackages())
    found.update(p for p in sys.path if os.path.basename(p) in ("site-packages", "dist-packages"))
    return tuple(os.path.join(os.path.abspath(p), "") for p in found if p)


def _is_users(filename: str, base_dir: str) -> bool:
    if filename.startswith("<"):  # <frozen importlib._bootstrap>, <string>: never the user's file
        return False
    path = os.path.abspath(filename)
    if base_dir and path.startswith(os.path.join(base_dir, "")):
        return True
    return not path.startswith(_library_dirs())


def _where(frame: traceback.FrameSummary) -> str:
    return f"{frame.filename}:{frame.lineno} in {frame.name}: {(frame.line or '').strip()}"


def user_origin(tb: TracebackType | None, base_dir: str = "") -> str:
    """The user's innermost frame of a traceback, then (when elsewhere) the frame that raised.

    Frames up to the last one of this package are the orchestrator's; after
    them, the first is the function the kernel called (a ``call``'s user
    function). Without any frame of the user's own files (a user package
    installed in site-packages, a built-in op's NumPy), that first one is shown.
    """
    frames = traceback.extract_tb(tb)
    ours = [i for i, f in enumerate(frames) if os.path.abspath(f.filename).startswith(os.path.join(PACKAGE, ""))]
    beyond = frames[ours[-1] + 1:] if ours else frames
    if not beyond:
        return ""
    users = [f for f in beyond if _is_users(f.filename, base_dir)]
    shown = users[-1] if users else beyond[0]
    if shown is beyond[-1]:
        return _where(shown)
    raised = beyond[-1]
    return f"{_where(shown)}\n  raised in {raised.filename}:{raised.lineno} in {raised.name}"


def describe(exc: BaseException, base_dir: str) -> str:
    """``Type: message``, and for a relative file not found, the folder it was looked for in."""
    text = f"{type(exc).__name__}: {exc}"
    filename = getattr(exc, "filename", None) if isinstance(exc, OSError) else None
    if base_dir and isinstance(filename, str) and filename and not os.path.isabs(filename):
        text += f" (relative paths are the spec's folder, {base_dir})"
    return text
