"""A run freezes the heap it starts with (the plan lives the whole run) and thaws it when it ends.

The collector's full pass over a 10k-op plan's heap took as long as the rest
of the run (orchestrator.perf); frozen objects are not scanned. Thawed after,
so a process that runs again still collects the old plan's cycles.
"""

from __future__ import annotations

import gc
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
