"""Checkpoints in a run: written from a thread of the client as their values arrive, read on --resume.

Policy. A loop with ``checkpoint: {every: N}`` hands its states (fetched
from where they live, as the cache fetches a loop's result), its series and
its stopping state to :meth:`CheckpointWriter.save_later` at every N-th
step; nothing waits for them: the futures say when they are done and a
thread writes the file (``cache.checkpoints``). They are written whatever
the run's cache settings, under ``--cache-dir`` (or beside the spec), or
``checkpoint.path``; only ``--resume`` reads them. A loop whose cache key
cannot be made (a random op without a seed, a module whose source cannot
be found) gets no checkpoints, and the run says why.

State: the keys of the plan's loops, the pool of writing threads and the
writes under way; :meth:`finish` waits for them (bounded: a run stopped by a
signal does not hang on a value that will never come).
"""

from __future__ import annotations

import concurrent.futures
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..cache import Keys, compute_keys, default_directory
from ..cache.checkpoints import Checkpoints, Saved
from ..plan.records import Plan
from ..spec.records import Loop
from .records import RunSettings


@dataclass
class CheckpointWriter:
    keys: Keys
    root: str  # the cache directory (checkpoints/<spec>/<loop>/ under it) unless a loop names its own
    spec_name: str
    base_dir: str
    resume: bool
    echo: Callable[[str], None]
    written: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    _refused: set[str] = field(default_factory=set)
    _pool: concurrent.futures.ThreadPoolExecutor | None = None
    _pending: list[concurrent.futures.Future[None]] = field(default_factory=list)

    def store(self, loop: Loop) -> Checkpoints:
        assert loop.checkpoint is not None
        if loop.checkpoint.path is None:
            return Checkpoints.under(self.root, self.spec_name)
        return Checkpoints(os.path.join(self.base_dir, loop.checkpoint.path))

    def usable(self, loop: Loop) -> bool:
        """Can ``loop`` be checkpointed (said once when it cannot)?"""
        if loop.checkpoint is None:
            return False
        if loop.name not in self.keys.loops:
            if loop.name not in self._refused:
                self._refused.add(loop.name)
                self.echo(f"warning: loop '{loop.name}' gets no checkpoints: "
                          f"{self.keys.unkeyed.get(loop.name, 'it has no cache key')}")
            return False
        return True

    def latest(self, loop: Loop) -> Saved | None:
        """The checkpoint to resume ``loop`` from (with --resume), saying why there is none."""
        if not self.resume or not self.usable(loop):
            return None
        store = self.store(loop)
        saved, why = store.latest(loop.name, self.keys.loops[loop.name])
        for warning in store.warnings:
            self.echo(f"warning: {warning}")
        if saved is None:
            self.echo(f"loop '{loop.name}' starts from step 0: {why}")
        return saved

    def save_later(self, loop: Loop, step: int, states: Sequence[tuple[Any, int | None]],
                   series: Mapping[str, np.ndarray], evaluations: Mapping[str, np.ndarray],
                   stopping: Mapping[str, Any], best: Sequence[tuple[Any, int | None]] = ()) -> None:
        """Write the checkpoint once the ``states`` futures (and the element of each) are done, from a thread."""
        assert loop.checkpoint is not None
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="checkpoint")
        store, key, keep = self.store(loop), self.keys.loops[loop.name], loop.checkpoint.keep

        def write() -> None:
            try:
                values, kept = [_value(*state) for state in states], [_value(*state) for state in best]
                self.written.append(store.save(loop.name, key, step, values, series, evaluations, stopping, keep,
                                               kept))
            except Exception as exc:  # a value that failed (the run says so) or a full disk
                self.errors.append(f"'{loop.name}' at step {step}: {type(exc).__name__}: {exc}")

        self._pending.append(self._pool.submit(write))

    def finish(self, timeout: float = 10.0) -> None:
        """Wait for the checkpoints under way (at most ``timeout`` seconds in all)."""
        if self._pool is None:
            return
        concurrent.futures.wait(self._pending, timeout=timeout)
        self._pool.shutdown(wait=False, cancel_futures=True)
        if self.errors:
            self.echo(f"warning: {len(self.errors)} checkpoint(s) could not be written: {self.errors[0]}")


def _value(future: Any, element: int | None) -> Any:
    value = future.result()
    return value if element is None else value[element]


def writer_for(plan: Plan, settings: RunSettings, keys: Keys | None, echo: Callable[[str], None]) \
        -> CheckpointWriter | None:
    """The writer (and, with --resume, reader) of the checkpoints of the loops that ask for them, if any."""
    if not any(loop.checkpoint is not None for loop in plan.spec.loops):
        return None
    base_dir = os.path.abspath(plan.spec.document.directory)
    keys = keys if keys is not None else compute_keys(plan, base_dir, settings.cache_files)
    return CheckpointWriter(keys, settings.cache_dir or default_directory(base_dir), plan.spec.name, base_dir,
                            settings.resume, echo)
