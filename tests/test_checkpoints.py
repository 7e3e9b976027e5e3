"""Checkpoints people can trust (issues 26 and 31): kept per revision, checked before use, listed and cleared.

Every run here is real: specs written as YAML, run on an embedded Dask cluster on loopback (or in this
process with ``sync=True`` where only the files matter), checkpoint files read back from disk. Forged
checkpoints are written with the same writer the run uses, so their checksums are right and only what
they say disagrees with the loop.
"""

from __future__ import annotations

import io
import json
import os
import textwrap
from pathlib import Path

import numpy as np
import pytest

from orchestrator import run_file
from orchestrator.cli import run_cli

SPEC = """\
version: 1
name: ck
params:
  lr: {type: number, default: 0.5}
  steps: {type: integer, default: 30}
graph:
  - {name: w0, op: zeros, shape: [3]}
  - name: train
    iterate:
      steps: "${params.steps}"
      window: 5
      state: {w: w0}
      body:
        - {name: w1, op: add, inputs: [w], scalar: "${params.lr}"}
        - {name: loss, op: sum, inputs: [w1]}
      update: {w: w1}
      metrics: {loss: loss}
      checkpoint: {every: 10, keep: 4}
outputs:
  train.w: w.npy
  train.loss: loss.csv
"""


def quiet(_: str) -> None:
    pass


def write(tmp_path: Path, text: str = SPEC, name: str = "ck.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def files(spec: Path, loop: str = "train") -> list[str]:
    folder = spec.parent / ".orchestrate" / "cache" / "checkpoints" / "ck" / loop
    return sorted(p.name for p in folder.glob("*.npz")) if folder.is_dir() else []


def steps_of(names: list[str]) -> list[int]:
    return [int(name.split("-")[1].split(".")[0]) for name in names]


# ------------------------------------------------------------------- item 1: kept per revision


def test_another_revision_leaves_the_first_runs_checkpoints_in_place(tmp_path: Path) -> None:
    """Issue 26 item 1, as seen twice: 30 steps checkpointed every 10 (keep 4), then --set lr=..."""
    spec = write(tmp_path)
    run_file(spec, echo=quiet, output_dir=str(tmp_path / "a"))
    first = files(spec)
    assert first, "the first run wrote no checkpoint"
    said: list[str] = []
    run_file(spec, echo=said.append, params={"lr": "0.25"}, output_dir=str(tmp_path / "b"))
    after = files(spec)
    assert set(first) <= set(after), (first, after)  # nothing of the first revision was removed
    revisions = {name.split("-")[0] for name in after}
    assert len(revisions) == 2, after
