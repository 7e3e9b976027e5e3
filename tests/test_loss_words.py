"""The line a redone loss gets at the run's end: a restarted worker's word that it is back comes on its own
stream and may trail the work it redid, so the last word waits a moment for it before saying "not back yet"
(a busy machine's run said so of a worker that had redone its work: tests/test_lost_worker.py)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from types import SimpleNamespace

from spec_helpers import write

from orchestrator.api import plan_file
from orchestrator.execute.losses import JOIN_TRAIL, Bell, Losses
from orchestrator.execute.records import DeviceLoss

GPU0 = "/job:localhost/replica:0/task:0/device:GPU:0"


def _losses(tmp_path: Path, said: list[str]) -> tuple[Losses, SimpleNamespace]:
    spec = write(tmp_path, """\
        version: 1
        name: one
        cluster: {jobs: {localhost: {gpus: 1}}}
        graph:
          - {name: a, op: constant, value: 1.0, device: /gpu:0}
        """)
    watch = SimpleNamespace(joins={}, bell=Bell())  # what Losses reads of its LossWatch: the joins and the bell
    keys = SimpleNamespace(key_owner={}, partition_ops={}, key_steps={}, gang_keys=set())
    losses = Losses(plan_file(spec), "run", 2, watch, keys, said.append)  # type: ignore[arg-type]
    losses.untold.append((DeviceLoss(GPU0, 1.0, ("a",)), 0))
    return losses, watch


def test_the_last_word_waits_for_a_restarted_worker_that_says_it_is_back_late(tmp_path: Path) -> None:
    said: list[str] = []
    losses, watch = _losses(tmp_path, said)

    def back() -> None:
        time.sleep(0.3)
        watch.joins[GPU0] = 1
        watch.bell.ring()

    threading.Thread(target=back).start()
    losses.tell(final=True)
    assert said == [f"{GPU0}'s worker was lost and restarted; Dask redid its work (retries: 2)"]


def test_the_last_word_says_not_back_yet_when_the_worker_never_says_so(tmp_path: Path) -> None:
    said: list[str] = []
    losses, _ = _losses(tmp_path, said)
    began = time.monotonic()
    losses.tell(final=True)
    assert JOIN_TRAIL <= time.monotonic() - began < JOIN_TRAIL + 5.0
    assert said == [f"{GPU0}'s worker was lost and not back yet; Dask redid its work (retries: 2)"]


def test_a_word_before_the_end_does_not_wait(tmp_path: Path) -> None:
    said: list[str] = []
    losses, _ = _losses(tmp_path, said)
    began = time.monotonic()
    losses.tell()
    assert time.monotonic() - began < JOIN_TRAIL and said == [] and len(losses.untold) == 1
