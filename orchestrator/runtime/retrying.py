"""``run.retry_on``: which exceptions of an op are worth running it again for, decided on its worker.

Policy. Dask's ``retries`` run a failed task again whatever its exception:
a typo's ``NameError`` three times over, as a dropped connection's
``ConnectionError``. With ``run.retry_on`` (exception type names, as
SkyPilot's ``recover_on_exit_codes`` lists exit codes) the op runs again,
in place on its worker, only for an exception of a listed type (its class
or a base class, named plainly or as ``module.Name``), up to its
``retries``; any other fails the op at once, and Dask retries nothing (the
compiled graph gives those tasks no retries of Dask's). Each failure
retried is recorded where it ran, as a failure Dask retried is.

State: none.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from .tasks import OpTask


def worth_retrying(exc: BaseException, retry_on: tuple[str, ...]) -> bool:
    """Is ``exc`` of a type ``retry_on`` lists (its class or a base, by name or ``module.Name``)?"""
    names = {n for cls in type(exc).__mro__ for n in (cls.__name__, f"{cls.__module__}.{cls.__qualname__}")}
    return bool(names & set(retry_on))


def retried(task: OpTask, attempt: Callable[[], Any], failed: Callable[[float, Exception], None]) -> Any:
    """``attempt()``, again after each exception worth retrying, up to ``task.retries`` times; ``failed(began,
    exc)`` records each one retried. Another exception, or the last, raises."""
    for tried in range(task.retries + 1):
        began = time.time()
        try:
            return attempt()
        except Exception as exc:
            if tried == task.retries or not worth_retrying(exc, task.retry_on):
                raise
            failed(began, exc)
    raise AssertionError("unreachable")  # (the last attempt returns or raises)


def not_retried(task: OpTask, exc: BaseException) -> str:
    """A note for the error of an op whose exception ``run.retry_on`` does not list ("" without retry_on)."""
    if not task.retry_on or not task.retries or worth_retrying(exc, task.retry_on):
        return ""
    return f" (not retried: run.retry_on lists {', '.join(task.retry_on)})"
