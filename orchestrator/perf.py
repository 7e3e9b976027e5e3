"""Keeping big specs linear.

Building a plan or a graph of 100k ops allocates millions of small objects
that live on; CPython's cyclic collector then re-scans the whole growing heap
again and again, which made a 100k-op compile ~15x slower than a 10k one
instead of ~10x. These objects form no reference cycles that need collecting
mid-build, so the stages run with the collector paused and it runs once after.
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
