"""How the tasks of a compiled graph are named: the Dask keys, and so the dashboard's groups.

Dask groups tasks by their key's prefix (``key_split``: the leading words
before a word that holds a digit): the task stream colours by it, the
progress bars and the "Groups" view count by it. Two naming policies:

* ``op``: keys start with the op's name (``towers/1/c-<run>``), so each op
  is its own group in the dashboard. A loop's steps share their op's group.
* ``kind``: keys start with the op's kind (``add-<run>-towers/1/c``), as
  Dask names tasks by their function; the op's name is still in the key.

``auto`` (the default) names by op when the plan has at most
:data:`OP_PREFIX_LIMIT` ops (a loop's body counts once), and by kind above. Why a
limit: every Dask worker keeps a counter per (prefix, state) of the tasks it
holds, and walks all of them on each batch of transitions (distributed's
``TaskCounter``; see dask/distributed#7288, which moved it from groups to
prefixes for the same reason). A prefix per op makes that walk as long as
the worker's task list, so a run's cost grows with the square of its op
count: on this project's 2-core benchmark machine, 3,000 tiny ops took 6.1 s
with a prefix per op against 3.6 s with a prefix per kind, and 10k ops 3.6
times as long. With up to 64 prefixes over the same 3,000 ops the walk
stayed within the noise (16: no cost, 256: about +25%; measured when this
limit was chosen, see docs/running.md), and a task stream of more colours
than that no longer tells ops apart anyway.
"""

from __future__ import annotations

from typing import Any, Literal, Mapping

from ..plan.records import Plan

TaskNames = Literal["op", "kind"]
POLICIES = ("auto", "op", "kind")
OP_PREFIX_LIMIT = 64


def choose_task_names(plan: Plan, policy: str = "auto") -> tuple[TaskNames, str]:
    """(naming, why) for this plan under ``policy`` (``auto``, ``op`` or ``kind``)."""
    if policy == "op":
        return "op", "--task-names op"
    if policy == "kind":
        return "kind", "--task-names kind"
    if policy != "auto":
        raise ValueError(f"unknown task naming '{policy}' (choose one of {', '.join(POLICIES)})")
    count = len(plan.placements)
    if count <= OP_PREFIX_LIMIT:
        return "op", f"{count} ops, at most {OP_PREFIX_LIMIT}"
    return "kind", f"{count} ops, more than {OP_PREFIX_LIMIT}; --task-names op to group by op"


def kind_label(kind: str, params: Mapping[str, Any]) -> str:
    """The group name of an op under ``kind`` naming: the op type, or a call's function name."""
    if kind == "call" and params.get("fn"):
        return str(params["fn"]).rpartition(":")[2] or kind
    return kind


class KeyNamer:
    """Makes the keys of one graph under one naming; ``suffix`` is ``-<run>`` (``-<run>-<step>`` in loops)."""

    def __init__(self, naming: TaskNames):
        self.naming = naming

    def op(self, name: str, kind: str, params: Mapping[str, Any], suffix: str) -> str:
        if self.naming == "op":
            return f"{name}{suffix}"
        return f"{kind_label(kind, params)}{suffix}-{name}"

    def partition(self, label: str, kind: str, params: Mapping[str, Any], suffix: str) -> str:
        """A device partition, named by its first op and how many follow (``towers/0/x+2``)."""
        if self.naming == "op":
            return f"{label}{suffix}"
        return f"{kind_label(kind, params)}{suffix}-{label}"

    def window(self, loop: str, device: str, suffix: str) -> str:
        """One device's part of a loop window (``train@worker/0/GPU:1``): the loop and the device."""
        if self.naming == "op":
            return f"{loop}@{device}{suffix}"
        return f"window{suffix}-{loop}@{device}"

    def helper(self, role: str, subject: str, suffix: str) -> str:
        """Keys of the tasks an op needs beside it: ``move``, ``done`` (control edge) and ``host``."""
        if self.naming == "op":
            return f"{role}({subject}){suffix}"
        return f"{role}{suffix}-{subject}"
