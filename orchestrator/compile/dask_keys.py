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

A loop's window has one task per device, so its prefix names the loop and
the device (``fit·GPU:0``) under either naming (``window·GPU:0`` by kind),
and the rest of the key names its steps (``fit·GPU:0-steps 50-99-<run>-L0w50``).
The steps stay out of the prefix on purpose: the scheduler never forgets a
prefix (``Scheduler.task_prefixes``), nor a worker a prefix's cumulative time,
so a prefix per window would grow with the loop's length; a prefix per loop
and device is bounded by the spec. The dashboard's progress bars cut a name
longer than :data:`SHOWN_WIDTH` characters to its first 12, so a window's
label puts the device first when loop and device do not fit, and a device is
named by the shortest name that tells it apart in the cluster (``GPU:0``,
else ``ps/0/CPU:0``). Names are made from records (the plan's devices and
loops), never read back out of keys.
"""

from __future__ import annotations

from typing import Any, Literal, Mapping

from ..devices import DeviceSpec
from ..plan.records import Plan

TaskNames = Literal["op", "kind"]
POLICIES = ("auto", "op", "kind")
OP_PREFIX_LIMIT = 64
SHOWN_WIDTH = 15  # distributed's progress bars show a longer name as its first 12 characters and "..."
# key_split ends a prefix at the first "-": a name's own hyphens become a non-breaking hyphen in a label
_HYPHEN = "\u2011"


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


def device_label(plan: Plan, device: DeviceSpec) -> str:
    """The shortest name telling ``device`` apart in the plan's cluster: ``GPU:0``, else ``ps/0/CPU:0``."""
    short = device.short()
    same = sum(1 for other in plan.spec.cluster.devices if other.spec.short() == short)
    return short if same == 1 else f"{device.job}/{device.task}/{short}"


def window_label(name: str, device: str) -> str:
    """A window's prefix: ``fit·GPU:0``, or ``GPU:0·a_long_loop`` when the first would be cut on the dashboard."""
    label = f"{name}\u00b7{device}"
    if len(label) > SHOWN_WIDTH:
        label = f"{device}\u00b7{name}"
    return label.replace("-", _HYPHEN)


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

    def window(self, loop: str, device: str, steps: tuple[int, int], suffix: str) -> str:
        """One device's part of a loop window: ``fit·GPU:0-steps 0-49<suffix>`` (by kind
        ``window·GPU:0-fit steps 0-49<suffix>``); the word after the prefix holds digits, so
        ``key_split`` stops before it and every window of a loop on a device shares one prefix."""
        span = f"steps {steps[0]}-{steps[1]}"
        if self.naming == "op":
            return f"{window_label(loop, device)}-{span}{suffix}"
        return f"{window_label('window', device)}-{loop.replace('-', _HYPHEN)} {span}{suffix}"

    def helper(self, role: str, subject: str, suffix: str) -> str:
        """Keys of the tasks an op needs beside it: ``move``, ``done`` (control edge) and ``host``."""
        if self.naming == "op":
            return f"{role}({subject}){suffix}"
        return f"{role}{suffix}-{subject}"
