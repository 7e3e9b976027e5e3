"""The cache in a run: which values come from it, which go into it, and why a value was computed again.

Policy. Before anything runs, every op outside loops and every loop gets its
key (``orchestrator.cache``). A unit whose cache is on (``cache: true`` on the
op, its construct or the spec; with ``--resume``, every unit) is read: an
entry that loads and checks is placed on the unit's planned device (a value
computed on GPU:0 serves GPU:1) and the unit is not run. Every such unit that
does run is written as soon as its value is ready — so a run killed midway
leaves what it finished for ``--resume`` — from a thread of this process
(entries live beside the spec, on the client's disk, whatever the cluster).
For each unit that ran with its cache on, the reason is kept: what changed
since its last key, or that there was no entry.

State: the keys, the entries loaded, the reasons, and a small pool of
threads writing entries; :meth:`finish` waits for the writes and records the
keys' parts for the next run's reasons.
"""

from __future__ import annotations

import concurrent.futures
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..cache import Cache, Keys, compute_keys, default_directory, why_again
from ..plan.records import Plan
from ..ops.values import CopyFailed
from ..spec.records import Loop, Spec
from .records import RunSettings


@dataclass
class CacheUse:
    plan: Plan
    cache: Cache
    keys: Keys
    resume: bool
    echo: Callable[[str], None]
    hits: dict[str, tuple[np.ndarray, ...]] = field(default_factory=dict)  # op or loop -> its values
    reasons: dict[str, str] = field(default_factory=dict)  # op or loop that ran with its cache on -> why
    written: set[str] = field(default_factory=set)
    errors: list[str] = field(default_factory=list)
    _pool: concurrent.futures.ThreadPoolExecutor | None = None
    _pending: list[concurrent.futures.Future[None]] = field(default_factory=list)

    @classmethod
    def open(cls, plan: Plan, directory: str, base_dir: str, resume: bool, files: str,
             echo: Callable[[str], None]) -> CacheUse:
        use = cls(plan, Cache(directory), compute_keys(plan, base_dir, files), resume, echo)
        use.look_up()
        return use

    def wanted(self, name: str) -> bool:
        """Is this op's (or loop's) cache on: read, and written when it runs?"""
        return self.resume or self.plan.spec.caches(name)

    def active(self) -> bool:
        return any(self.wanted(name) for name in (*self.keys.ops, *self.keys.loops))

    def look_up(self) -> None:
        previous = self.cache.previous(self.plan.spec.name)
        loop_names = set(self.keys.loops)
        units = {**{n: k for n, k in self.keys.ops.items() if not _is_export(self.plan, n, loop_names)},
                 **self.keys.loops}
        for name, key in units.items():
            if not self.wanted(name):
                continue
            values = self.cache.load(key.key, f"'{name}'")
            if values is not None:
                self.hits[name] = values
            else:
                self.reasons[name] = why_again(previous.get(name), key.parts, self.cache.has(key.key))
        for warning in self.cache.warnings:
            self.echo(f"warning: {warning}")
        for name, why in self.keys.unkeyed.items():
            if self.wanted(name):
                self.reasons[name] = f"not cached: {why}"

    def loop_hit(self, loop: Loop) -> tuple[np.ndarray, ...] | None:
        return self.hits.get(loop.name)

    def store_later(self, name: str, futures: list[Any], extra: tuple[Any, ...] = ()) -> None:
        """Write a unit's values (``futures`` on the cluster, then ``extra`` from the client) once all are ready.

        Nothing waits meanwhile: each future says when it is done, and the last one hands the write to a
        thread of this process. A value that never comes (a failed or stopped run) is never waited for.
        """
        key = self.keys.loops.get(name) or self.keys.ops.get(name)
        if key is None or not self.wanted(name) or name in self.hits:
            return
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="cache-write")
        pool = self._pool
        left = [len(futures)]
        lock = threading.Lock()

        def write() -> None:
            try:
                values = tuple(f.result() for f in futures) + extra
                if any(isinstance(v, CopyFailed) for v in values):
                    return  # a sweep copy that failed: nothing to keep, --resume runs it again
                self.cache.store(key.key, name, values)
                self.written.add(name)
            except Exception as exc:  # a value that failed, or a full disk: the run reports its own error
                self.errors.append(f"{name}: {type(exc).__name__}: {exc}")

        def one_done(future: Any) -> None:
            with lock:
                left[0] -= 1
                last = left[0] == 0
            if last and all(f.status == "finished" for f in futures):
                with lock:
                    self._pending.append(pool.submit(write))

        if not futures:
            self._pending.append(pool.submit(write))
        for future in futures:
            future.add_done_callback(one_done)

    def finish(self, succeeded: bool) -> None:
        """Wait for the writes; record the parts of every key written (what the next run compares)."""
        for done in list(self._pending):
            done.result()
        if self._pool is not None:
            self._pool.shutdown()
        parts = {name: dict(key.parts) for name, key in {**self.keys.ops, **self.keys.loops}.items()
                 if name in self.written or name in self.hits}
        if parts:
            self.cache.remember(self.plan.spec.name, parts)
        if succeeded and self.errors:
            self.echo(f"warning: {len(self.errors)} cache entr{'y' if len(self.errors) == 1 else 'ies'} could "
                      f"not be written: {self.errors[0]}")

    def record(self, name: str) -> str:
        """What the run report says of an op's cache: reused (which entry), or why it ran again."""
        if name in self.hits:
            key = self.keys.loops.get(name) or self.keys.ops[name]
            return f"reused from the cache (entry {key.key[:12]})"
        return f"ran: {self.reasons[name]}" if name in self.reasons else ""


def outermost_loop(spec: Spec, name: str) -> str:
    """The outermost loop an op belongs to (its body or its exports), or "" (its cache record is the loop's)."""
    loop = spec.outermost_loop(name)
    return loop.name if loop is not None else ""


def open_for_run(plan: Plan, settings: RunSettings, base_dir: str, echo: Callable[[str], None]) -> CacheUse | None:
    """The cache of a run, when any op's cache is on (or --resume); None otherwise, or with --no-cache."""
    s, spec = settings, plan.spec
    if not s.use_cache or not (s.resume or spec.cache or spec.cache_scopes or any(op.cache for op in spec.ops)):
        return None  # nothing reads or writes the cache: no keys to make (0.25 s at 10k ops)
    directory = s.cache_dir or default_directory(base_dir)
    cache = CacheUse.open(plan, directory, base_dir, s.resume, s.cache_files, echo)
    if not cache.active():
        return None
    echo(f"cache: {len(cache.hits)} reused, {len(cache.reasons)} to compute "
         f"({os.path.relpath(directory)}{', --resume' if s.resume else ''})")
    for name in sorted(cache.hits):
        if spec.placement.log:
            echo(f"Cached op {name} reused: {cache.record(name)}")
    for name, why in sorted(cache.reasons.items()):
        if spec.caches(name):
            echo(f"cache: '{name}' runs again: {why}")
    return cache


__all__ = ["CacheUse", "default_directory", "open_for_run", "outermost_loop"]


def _is_export(plan: Plan, name: str, loops: set[str]) -> bool:
    op = plan.spec.op_index.get(name)
    return op is not None and op.scope.role == "export" and op.scope.loop in loops


