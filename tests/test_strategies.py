"""Placement strategies: a round_robin rule's ``by:`` picks one by name; a new one is one entry."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from orchestrator import strategies
from orchestrator.api import check_file

SPEC = """\
    version: 1
    cluster:
      jobs:
        ps: {tasks: 3}
        worker: {tasks: 1}
    placement:
      rules:
        - match: {op: variable}
          round_robin: /job:ps
          by: BY
    graph:
      - {name: a, op: variable, shape: [1]}
      - {name: b, op: variable, shape: [1]}
      - {name: c, op: variable, shape: [1]}
    """


def _tasks(tmp_path: Path, by: str) -> list[int | None] | list[str]:
    path = tmp_path / "spec.yaml"
    path.write_text(textwrap.dedent(SPEC).replace("BY", by))
    checked = check_file(path)
    if checked.errors:
        return [d.render() for d in checked.errors]
    assert checked.plan is not None
    return [checked.plan.placement(n).device.task for n in "abc"]


def test_count_takes_tasks_in_turn(tmp_path: Path) -> None:
    assert _tasks(tmp_path, "count") == [0, 1, 2]


def test_an_unknown_strategy_is_a_diagnostic_with_did_you_mean(tmp_path: Path) -> None:
    (error,) = _tasks(tmp_path, "bites")
    assert "placement.rules[0].by: unknown round_robin strategy 'bites' (did you mean 'bytes'?)" in str(error)


class Last:
    def next_task(self, tasks: int, nbytes: int) -> int:
        return tasks - 1


def test_a_new_strategy_is_one_registry_entry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(strategies, "STRATEGIES", {**strategies.STRATEGIES, "last": Last})
    import orchestrator.place as place
    import orchestrator.validate.topology as topology

    monkeypatch.setattr(place, "STRATEGIES", strategies.STRATEGIES)
    monkeypatch.setattr(topology, "STRATEGIES", strategies.STRATEGIES)
    assert _tasks(tmp_path, "last") == [2, 2, 2]
