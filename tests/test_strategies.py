"""Placement strategies: a round_robin rule's ``by:`` picks one by name; a new one is one entry."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Mapping

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
    def next_task(self, tasks: int, nbytes: int, held: Mapping[int, int]) -> int:
        return tasks - 1


def test_a_new_strategy_is_one_registry_entry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(strategies, "STRATEGIES", {**strategies.STRATEGIES, "last": Last})
    import orchestrator.plan.place as place
    import orchestrator.spec.validate.topology as topology

    monkeypatch.setattr(place, "STRATEGIES", strategies.STRATEGIES)
    monkeypatch.setattr(topology, "STRATEGIES", strategies.STRATEGIES)
    assert _tasks(tmp_path, "last") == [2, 2, 2]


# ------------------------------------------------------------------- by: bytes starts from what each task holds

BYTES = """\
    version: 1
    cluster:
      jobs:
        ps: {tasks: 2}
        worker: {tasks: 1}
    placement:
      rules:
    RULES
    graph:
    GRAPH
    """


def _placed(tmp_path: Path, rules: str, graph: str) -> dict[str, tuple[str | None, int | None]]:
    """(job, task) of every op of a spec with two ps tasks and one worker task."""
    text = textwrap.dedent(BYTES).replace("RULES", textwrap.indent(textwrap.dedent(rules).strip(), "  "))
    path = tmp_path / "spec.yaml"
    path.write_text(text.replace("GRAPH", textwrap.indent(textwrap.dedent(graph).strip(), "  ")))
    checked = check_file(path)
    assert not checked.errors, [d.render() for d in checked.errors]
    assert checked.plan is not None
    return {p.op: (p.device.job, p.device.task) for p in checked.plan.placements}


BY_BYTES = """\
    - match: {op: variable}
      round_robin: /job:ps
      by: bytes
    """


def test_by_bytes_counts_a_variable_pinned_to_a_task(tmp_path: Path) -> None:
    """The pinned variable (3 units on task 0) sends the next three to task 1; the fourth ties and takes 0."""
    placed = _placed(tmp_path, BY_BYTES, """\
        - {name: big, op: variable, shape: [3], device: /job:ps/task:0}
        - {name: a, op: variable, shape: [1]}
        - {name: b, op: variable, shape: [1]}
        - {name: c, op: variable, shape: [1]}
        - {name: d, op: variable, shape: [1]}
        """)
    assert [placed[n] for n in ("big", "a", "b", "c", "d")] == [("ps", 0), ("ps", 1), ("ps", 1), ("ps", 1), ("ps", 0)]


def test_by_bytes_counts_what_earlier_rules_placed(tmp_path: Path) -> None:
    """Rule 1 (by count) puts 4 units on task 0 and 1 on task 1; rule 2 (by bytes) evens them out."""
    rules = """\
        - match: {name: "emb*"}
          round_robin: /job:ps
        - match: {op: variable}
          round_robin: /job:ps
          by: bytes
        """
    placed = _placed(tmp_path, rules, """\
        - {name: emb0, op: variable, shape: [4]}
        - {name: emb1, op: variable, shape: [1]}
        - {name: a, op: variable, shape: [1]}
        - {name: b, op: variable, shape: [1]}
        - {name: c, op: variable, shape: [1]}
        - {name: d, op: variable, shape: [1]}
        """)
    assert [placed[n][1] for n in ("emb0", "emb1", "a", "b", "c", "d")] == [0, 1, 1, 1, 1, 0]


def test_by_bytes_counts_ops_other_rules_pin_by_device(tmp_path: Path) -> None:
    rules = """\
        - match: {name: big}
          device: /job:ps/task:1
        - match: {op: variable}
          round_robin: /job:ps
          by: bytes
        """
    placed = _placed(tmp_path, rules, """\
        - {name: big, op: variable, shape: [2]}
        - {name: a, op: variable, shape: [1]}
        - {name: b, op: variable, shape: [1]}
        - {name: c, op: variable, shape: [1]}
        - {name: d, op: variable, shape: [1]}
        """)
    assert [placed[n][1] for n in ("big", "a", "b", "c", "d")] == [1, 0, 0, 0, 1]


def test_by_bytes_ignores_other_jobs_and_ops_later_in_the_graph(tmp_path: Path) -> None:
    """Bytes on the worker are not the ps tasks' load; a pin further down the graph is not placed yet."""
    placed = _placed(tmp_path, BY_BYTES, """\
        - {name: x, op: ones, shape: [100]}
        - {name: a, op: variable, shape: [1]}
        - {name: b, op: variable, shape: [1]}
        - {name: late, op: variable, shape: [100], device: /job:ps/task:1}
        """)
    assert placed["x"] == ("worker", 0)
    assert [placed[n] for n in ("a", "b", "late")] == [("ps", 0), ("ps", 1), ("ps", 1)]


class Fullest:
    """Not a useful strategy: it shows what a strategy is told about the tasks' loads."""

    def next_task(self, tasks: int, nbytes: int, held: Mapping[int, int]) -> int:
        return max(range(tasks), key=lambda t: (held.get(t, 0), -t))


def test_a_strategy_is_told_the_bytes_each_task_holds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import orchestrator.plan.place as place
    import orchestrator.spec.validate.topology as topology

    registry = {**strategies.STRATEGIES, "fullest": Fullest}
    monkeypatch.setattr(place, "STRATEGIES", registry)
    monkeypatch.setattr(topology, "STRATEGIES", registry)
    rules = BY_BYTES.replace("bytes", "fullest")
    placed = _placed(tmp_path, rules, """\
        - {name: big, op: variable, shape: [3], device: /job:ps/task:1}
        - {name: a, op: variable, shape: [1]}
        """)
    assert placed["a"] == ("ps", 1)
