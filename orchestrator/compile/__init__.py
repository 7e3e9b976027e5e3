"""Stage 3, Plan -> Dask graphs: compile a plan into graphs whose every task carries its device.

Policy. The compiler is a pure stage: from a :class:`~orchestrator.plan.records.Plan`
it builds ``HighLevelGraph`` layers (no cluster, no ``distributed``), whose
annotations are key-callables — resources and retries per key — and which
the runner submits with ``optimize_graph=False``, so Dask's fusion can never
merge tasks of different devices or drop their annotations (dask#7036).

* **Granularity.** By default each task runs a *device partition*: ops of
  one device that planning grouped (:mod:`orchestrator.plan.partition`, kept in
  ``plan.partitions`` and ``plan.loop_partitions``) so that nothing waits
  longer than it would alone (inputs enter at a partition's start, values
  leave at its end, no parallelism is lost). The compiler reads them and
  never partitions again: a stage of a run takes the part of each that it
  runs (:func:`stage_partitions`). A loop runs as planning decided
  (``plan.loop_mode``): a window of steps per task and device
  (:mod:`.gang`), else a partition per step. ``granularity="op"`` keeps one
  task per op, for debugging.
* **Pinning** uses identity resources: a task asks for
  ``{"device:<canonical name>": 1}``, which only the worker standing for
  that device offers — restart-proof, unlike worker addresses
  (distributed#8600). A task on ``GPU:*`` asks for ``{"GPU": 1,
  "task:<job/replica/task>": 1}`` and Dask picks the GPU.
* **Values cross** once per consuming device, only the one needed, and
  control edges move no data (:mod:`.builder`).

State. None between calls: every function takes the run's
:class:`CompileOptions` (token, directories, key naming, granularity,
whether outputs are copied to the host) and returns frozen records
(:class:`~orchestrator.compile.records.CompiledGraph`,
:class:`~orchestrator.compile.records.CompiledWindow`, :class:`LoopState`); the
driver of a loop hands each window the state the last one left.

Keys are named by :mod:`orchestrator.compile.dask_keys`: by op name (``towers/1/c-<token>``,
a partition by its first op and count, ``towers/0/x+2-<token>``) or, for
graphs of many ops, by op kind; a window by its loop and device, its steps
after them (``train·GPU:1-steps 100-199-<token>-L0w100``).
"""

from .builder import GraphBuilder, copy_sweeps
from .dask_keys import choose_task_names
from .gang import compile_gang_prep, compile_gang_window
from .loops import LoopState, after_window, compile_fetch, compile_window, loop_start, lookup_value
from .options import CompileOptions
from .graph import compile_plan, stage_partitions

__all__ = ["CompileOptions", "GraphBuilder", "LoopState", "after_window", "compile_fetch",
           "compile_gang_prep", "compile_gang_window", "compile_plan", "compile_window", "loop_start",
           "choose_task_names", "copy_sweeps", "lookup_value", "stage_partitions"]
