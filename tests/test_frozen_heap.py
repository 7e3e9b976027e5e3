"""A run freezes the heap it starts with (the plan lives the whole run) and thaws it when it ends.

The collector's full pass over a 10k-op plan's heap took as long as the rest
of the run (orchestrator.perf); frozen objects are not scanned. Thawed after,
so a process that runs again still collects the old plan's cycles.
"""

from __future__ import annotations

import gc
import sys
import textwrap
from pathlib import Path

import pytest

from orchestrator import run_file


@pytest.mark.cluster
def test_a_run_freezes_the_heap_while_it_runs_and_thaws_it_after(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(textwrap.dedent("""\
        version: 1
        cluster: {jobs: {localhost: {gpus: 1}}}
        graph:
          - {name: w0, op: constant, value: [1.0, 2.0], device: /cpu:0}
          - name: loop
            iterate:
              steps: 3
              state: {w: w0}
              body:
                - {name: w1, op: add, inputs: [w], scalar: 1, device: /gpu:0}
              update: {w: w1}
        outputs: {loop.w: "-"}
        """))
    frozen: dict[str, int] = {}

    def echo(line: str) -> None:  # the loop's line comes while it runs
        frozen[line] = gc.get_freeze_count()

    before = gc.get_freeze_count()
    result = run_file(spec, echo=echo)
    assert list(result.values["loop.w"]) == [4.0, 5.0]
    ran = [count for line, count in frozen.items() if line.startswith("loop 'loop' ran")]
    assert ran and ran[0] > 0  # the plan, the spec and the rest of the heap, left alone mid-run
    assert gc.get_freeze_count() == before == 0  # and collectable again once it is over


def test_a_heap_frozen_by_the_caller_stays_frozen_after_a_run() -> None:
    from orchestrator.perf import frozen_heap

    gc.freeze()  # a process that froze its own heap, as a forking server does
    try:
        theirs = gc.get_freeze_count()
        assert theirs > 0
        with frozen_heap():
            assert gc.get_freeze_count() == theirs  # nothing of ours added, so nothing of theirs thawed after
        assert gc.get_freeze_count() == theirs
    finally:
        gc.unfreeze()


def _collections_inside(function: str, code_file: str) -> tuple[list[int], object]:
    """A collector callback counting the collections that start while ``function`` of ``code_file`` runs."""
    seen: list[int] = []

    def callback(phase: str, info: dict[str, int]) -> None:
        if phase != "start":
            return
        frame = sys._getframe(1)
        while frame is not None:
            if frame.f_code.co_name == function and frame.f_code.co_filename.endswith(code_file):
                seen.append(info["generation"])
                return
            frame = frame.f_back  # type: ignore[assignment]

    return seen, callback


def test_the_memory_plan_of_a_run_by_op_is_made_with_the_collector_paused(tmp_path: Path) -> None:
    """``run --granularity op`` plans memory again for its tasks: with the collector running, its passes over
    the plan's heap came round mid-plan (every ~700 objects made, and a full one as the heap grew)."""
    from orchestrator.api import plan_file, run_plan
    from orchestrator.execute.records import RunSettings

    ops = "\n".join(f"  - {{name: a{i}, op: add, inputs: [a{i - 1}], scalar: 1}}" for i in range(1, 300))
    spec = tmp_path / "chain.yaml"
    spec.write_text("version: 1\ngraph:\n  - {name: a0, op: ones, shape: [2]}\n" + ops + "\noutputs: {a299: '-'}\n")
    plan = plan_file(spec)
    seen, callback = _collections_inside("plan_memory", "plan/memory/__init__.py")
    enabled, thresholds = gc.isenabled(), gc.get_threshold()
    gc.enable()
    gc.set_threshold(10)  # a collection every 10 objects: plan_memory makes thousands for 300 ops
    gc.callbacks.append(callback)
    try:
        result = run_plan(plan, RunSettings(sync=True, granularity="op"))
    finally:
        gc.callbacks.remove(callback)
        gc.set_threshold(*thresholds)
        if not enabled:
            gc.disable()
    assert list(result.values["a299"]) == [300.0, 300.0]
    assert result.report["granularity"] == "op"
    assert seen == []  # no pass while planning
    assert gc.isenabled()  # and the collector is back on after
