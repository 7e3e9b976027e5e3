"""Keeping big specs linear.

Building a plan or a graph of 100k ops allocates millions of small objects
that live on; CPython's cyclic collector then re-scans the whole growing heap
again and again, which made a 100k-op compile ~15x slower than a 10k one
instead of ~10x. These objects form no reference cycles that need collecting
mid-build, so the stages run with the collector paused and it runs once after.

A run then holds its plan (and its spec, and whatever the process built
before) for its whole length, while submitting and collecting allocate
enough for the collector's full pass to come round mid-run: one pass over a
10k-op plan's heap took 0.3-0.5 s, as long as the rest of the run. So a run
freezes the heap it starts with (``gc.freeze``, as CPython's docs suggest
for long-lived objects) and thaws it when it ends, so that a process that
runs again (a notebook, a test session) still collects the old plan's cycles.
State: none here; the interpreter's collector is the state.
"""

from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def paused_gc() -> Iterator[None]:
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


@contextmanager
def frozen_heap() -> Iterator[None]:
    """While inside, the cyclic collector leaves alone every object that existed on entry.

    Only where nothing is frozen yet: ``gc.unfreeze`` thaws every frozen object, so a process that froze
    its own heap (a server forking workers, as CPython's docs suggest) keeps it as it was."""
    mine = gc.get_freeze_count() == 0
    if mine:
        gc.freeze()
    try:
        yield
    finally:
        if mine:
            gc.unfreeze()
