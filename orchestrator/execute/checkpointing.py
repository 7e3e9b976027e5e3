"""Checkpoints in a run: written from a thread of the client as their values arrive, read on --resume.

Policy. A loop with ``checkpoint: {every: N}`` hands its states (fetched
from where they live, as the cache fetches a loop's result), its series and
its stopping state to :meth:`CheckpointWriter.save_later` at every N-th
step; nothing waits for them: the futures say when they are done and a
thread writes the file (``cache.checkpoints``). They are written whatever
the run's cache settings, into ``checkpoints/<spec>/<loop>/`` of the cache
directory (``--cache-dir``, or ``.orchestrate/cache`` beside the spec), or
into ``checkpoint.path`` under the output directory (so ``--output-dir``
moves them); only ``--resume`` reads them. A loop whose cache key cannot
be made (a random op without a seed, a module whose source cannot be found)
gets no checkpoints, and the run says why. A write that fails (a full disk)
is said at once, naming the file, and the run goes on; at its end the run
says, per loop, which checkpoints it kept and what else the folder holds.

State: the keys of the plan's loops, the pool of writing threads, the
writes under way and the loops written (for the closing lines);
:meth:`finish` waits for them (bounded: a run stopped by a signal does not
hang on a value that will never come).
"""

from __future__ import annotations

import concurrent.futures
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ..cache import Keys, compute_keys
from ..cache.checkpoints import Checkpoints, Expected, Saved, Snapshot, unused
from ..errors import format_bytes
from ..paths import checkpoint_root, output_directory
from ..plan.records import Plan
from ..spec.records import Loop, OpRef, Spec
from .records import RunSettings

Infos = Sequence[tuple[tuple[int, ...] | None, str | None]]  # (shape, dtype) of each state, as far as known


@dataclass
class CheckpointWriter:
    keys: Keys
    spec: Spec
    cache_dir: str | None  # --cache-dir (None: .orchestrate/cache beside the spec)
    output_dir: str  # where a loop's own checkpoint.path lives
    resume: bool
    echo: Callable[[str], None]
    written: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    _refused: set[str] = field(default_factory=set)
    resumed: dict[str, int] = field(default_factory=dict)  # loop -> the step it resumed from (execute.replanning)
    _loops: dict[str, Loop] = field(default_factory=dict)  # loops written to in this run (cleaned, summed up)
    _pool: concurrent.futures.ThreadPoolExecutor | None = None
    _pending: list[concurrent.futures.Future[None]] = field(default_factory=list)

    def store(self, loop: Loop) -> Checkpoints:
        assert loop.checkpoint is not None
        base_dir = os.path.abspath(self.spec.document.directory)
        return Checkpoints(checkpoint_root(base_dir, self.spec.name, loop.checkpoint.path, self.output_dir,
                                           self.cache_dir))

    def usable(self, loop: Loop) -> bool:
        """Can ``loop`` be checkpointed (said once when it cannot)?"""
        if loop.checkpoint is None:
            return False
        if loop.name not in self.keys.revisions:
            if loop.name not in self._refused:
                self._refused.add(loop.name)
                self.echo(f"warning: loop '{loop.name}' gets no checkpoints: "
                          f"{self.keys.unkeyed.get(loop.name, 'it has no cache key')}")
            return False
        return True

    def latest(self, loop: Loop, fetch_infos: Callable[[], Infos] | None = None) -> Saved | None:
        """The checkpoint to resume ``loop`` from (with --resume), saying why there is none.

        ``fetch_infos``: the shapes and dtypes of the loop's initial states, asked for only when the spec
        does not know some of them (a ``call`` without ``output:``) and there is a checkpoint to check."""
        if not self.resume or not self.usable(loop):
            return None
        store = self.store(loop)
        infos: Infos = [(self.spec.value(OpRef(var.placeholder)).shape, self.spec.value(OpRef(var.placeholder)).dtype)
                        for var in loop.state]
        if fetch_infos is not None and store.files(loop.name) and any(s is None or d is None for s, d in infos):
            infos = [(s if s is not None else got[0], d if d is not None else got[1])
                     for (s, d), got in zip(infos, fetch_infos())]
        saved, why = store.latest(loop.name, self.keys.revisions[loop.name], expected(loop, infos))
        for warning in store.warnings:
            self.echo(f"warning: {warning}")
        if saved is None:
            self.echo(f"loop '{loop.name}' starts from step 0: {why}")
            return None
        self.resumed[loop.name] = saved.step
        if store.past:
            self.echo(f"loop '{loop.name}' does not use every checkpoint: {unused(store.past, loop.steps)}")
        return saved

    def save_later(self, loop: Loop, step: int, states: Sequence[tuple[Any, int | None]],
                   series: Mapping[str, np.ndarray], evaluations: Mapping[str, np.ndarray],
                   stopping: Mapping[str, Any], best: Sequence[tuple[Any, int | None]] = (),
                   header: Mapping[str, Any] | None = None) -> None:
        """Write the checkpoint once the ``states`` futures (and the element of each) are done, from a thread."""
        assert loop.checkpoint is not None
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="checkpoint")
        store, key, keep = self.store(loop), self.keys.revisions[loop.name], loop.checkpoint.keep
        extra = {**(header or {}), "steps": loop.steps, "params": {p.name: p.value for p in self.spec.params}}
        first = loop.name not in self._loops
        self._loops[loop.name] = loop

        def write() -> None:
            if first:
                self.clean(store, loop)
            target = os.path.join(store.folder(loop.name), f"{key.key[:16]}-{step:010d}.npz")
            try:
                values, kept = [_value(*state) for state in states], [_value(*state) for state in best]
                snapshot = Snapshot(values, series, evaluations, stopping, kept)
                self.written.append(store.save(loop.name, key, step, snapshot, keep, loop.steps, extra))
            except Exception as exc:  # a value that failed (the run says so) or a full disk
                reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else f"{type(exc).__name__}: {exc}"
                self.errors.append(f"'{loop.name}' at step {step}: {reason}")
                self.echo(f"warning: the checkpoint of '{loop.name}' at step {step} was not written "
                          f"({os.path.relpath(target)}): {reason}; the run goes on")

        self._pending.append(self._pool.submit(write))

    def flush(self, timeout: float) -> str:
        """Wait for the writes under way (at most ``timeout`` seconds); the newest file written, or ""."""
        concurrent.futures.wait(self._pending, timeout=timeout)
        return self.written[-1] if self.written else ""

    def clean(self, store: Checkpoints, loop: Loop) -> None:
        """Before a loop's first write of the run: the temporaries that writes killed midway left behind."""
        removed = store.clean(loop.name)
        if removed:
            size = format_bytes(sum(n for _, n in removed))
            self.echo(f"removed {len(removed)} temporary file(s) ({size}) of checkpoint writes of '{loop.name}' "
                      f"that never finished: {', '.join(os.path.relpath(p) for p, _ in removed[:3])}")

    def finish(self, timeout: float = 10.0) -> None:
        """Wait for the checkpoints under way (at most ``timeout`` seconds in all); say what each folder keeps."""
        if self._pool is None:
            return
        concurrent.futures.wait(self._pending, timeout=timeout)
        self._pool.shutdown(wait=False, cancel_futures=True)
        for loop in self._loops.values():
            self.echo(self.kept(loop))
        if self.errors:
            self.echo(f"warning: {len(self.errors)} checkpoint(s) could not be written (said above); the first: "
                      f"{self.errors[0]}")

    def kept(self, loop: Loop) -> str:
        """One line: the checkpoints of ``loop``'s revision in its folder, and what other revisions left there."""
        assert loop.checkpoint is not None
        store = self.store(loop)
        prefix = self.keys.revisions[loop.name].key[:16]
        files = store.files(loop.name)
        mine = sorted(step for revision, step, _ in files if revision == prefix and step <= loop.steps)
        later = sorted(step for revision, step, _ in files if revision == prefix and step > loop.steps)
        others = [revision for revision, _, _ in files if revision != prefix]
        line = (f"checkpoints of '{loop.name}' in {os.path.relpath(store.folder(loop.name))}: "
                f"{_steps(mine) if mine else 'none'} kept (keep: {loop.checkpoint.keep})")
        if later:
            line += f"; {_steps(later)} of a longer run left in place"
        if others:
            count = len(set(others))
            line += (f"; {len(others)} file(s) of {count} other revision{'s' if count > 1 else ''} left in place "
                     f"(orchestrate checkpoints list, or clear --keep-current to remove them)")
        return line


def _steps(steps: Sequence[int]) -> str:
    return f"step{'s' if len(steps) > 1 else ''} {', '.join(map(str, steps))}"


def expected(loop: Loop, infos: Infos) -> Expected:
    """What a checkpoint must hold to be used for ``loop`` (``infos``: its states' shapes and dtypes)."""
    evaluation = loop.evaluation
    return Expected(loop.steps, tuple((var.name, None if shape is None else tuple(shape), dtype)
                                      for var, (shape, dtype) in zip(loop.state, infos)),
                    tuple(name for name, _ in loop.metrics),
                    tuple(name for name, _ in evaluation.metrics) if evaluation else (),
                    evaluation.every if evaluation else 0, bool(loop.stopping))


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
    if settings.resume_revisions:  # a re-planned run goes on from the checkpoints of the plan it continues
        keys = replace(keys, revisions={**keys.revisions, **settings.resume_revisions})
    output_dir = output_directory(base_dir, settings.output_dir, plan.spec.run.output_dir)
    return CheckpointWriter(keys, plan.spec, settings.cache_dir, output_dir,
                            settings.resume or bool(settings.resume_revisions), echo)
