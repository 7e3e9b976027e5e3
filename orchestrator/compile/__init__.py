"""Compile a plan into Dask graphs whose every task carries its device.

Policy. The compiler is a pure stage: from a :class:`~orchestrator.model.Plan`
it builds ``HighLevelGraph`` layers (no cluster, no ``distributed``), whose
annotations are key-callables — resources and retries per key — and which
the runner submits with ``optimize_graph=False``, so Dask's fusion can never
merge tasks of different devices or drop their annotations (dask#7036).

* **Granularity.** By default each task runs a *device partition*: ops of
  one device that :mod:`orchestrator.partition` groups so that nothing
  waits longer than it would alone (inputs enter at a partition's start,
  values leave at its end, no parallelism is lost). A loop runs a window of
  steps per task and device when it can (:mod:`.gang`), else a partition
  per step. ``granularity="op"`` keeps one task per op, for debugging.
* **Pinning** uses identity resources: a task asks for
  ``{"device:<canonical name>": 1}``, which only the worker standing for
  that device offers — restart-proof, unlike worker addresses
  (distributed#8600). A task on ``GPU:*`` asks for ``{"GPU": 1,
  "task:<job/replica/task>": 1}`` and Dask picks the GPU.
* **Values cross** once per consuming device, only the one needed, and
  control edges move no data (:mod:`.builder`).

State. None between calls: every function returns frozen records
(:class:`~orchestrator.model.CompiledGraph`,
:class:`~orchestrator.model.CompiledWindow`, :class:`LoopState`); the
driver of a loop hands each window the state the last one left.

Keys are named by :mod:`orchestrator.keys`: by op name (``towers/1/c-<token>``,
a partition by its first op and count, ``towers/0/x+2-<token>``, a window
by its loop and device, ``train@worker/0/GPU:1-<token>-L0w100``) or, for
graphs of many ops, by op kind.
"""

from .builder import GraphBuilder
from .gang import compile_gang_prep, compile_gang_window, gang_blocker, loop_mode
from .loops import LoopState, after_window, compile_fetch, compile_window, loop_start, lookup_value
from .options import CompileOptions
from .plan import compile_plan

__all__ = ["CompileOptions", "GraphBuilder", "LoopState", "after_window", "compile_fetch",
           "compile_gang_prep", "compile_gang_window", "compile_plan", "compile_window", "gang_blocker",
           "loop_mode", "loop_start", "lookup_value"]
