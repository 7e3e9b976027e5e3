"""The records compile hands to execute: Dask graphs and where each value lives.

A graph is a whole plan or one loop window, with the keys of its outputs, sinks and carried
states.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..devices import DeviceSpec


@dataclass(frozen=True)
class Located:
    """A value already placed: its Dask key, the device holding it, and for output i of a
    multi-output op (or a value a partition returns beside others), ``index`` i (the key then
    holds the whole tuple)."""

    key: str
    device: DeviceSpec
    index: int | None = None


@dataclass(frozen=True)
class CompiledGraph:
    """A Dask graph plus what the runner needs to read it back."""

    graph: Any  # dask.highlevelgraph.HighLevelGraph
    tasks: Mapping[str, Any]
    values: Mapping[str, Located]  # "op" / "op:i" -> where that value is
    output_keys: Mapping[str, str]  # output ref -> key to gather (host-side value)
    resources: Mapping[str, Mapping[str, float]]
    retries: Mapping[str, int]
    key_owner: Mapping[str, str]  # key -> op it belongs to (for errors naming the op)
    token: str
    moves: Mapping[tuple[str, str], str] = field(default_factory=dict)  # (source key, device) -> move key
    sink_keys: tuple[str, ...] = ()  # ops nothing else waits for: computed, waited for, not fetched
    transfers: int = 0  # values sent to another device (through a move task or as a direct dependency)
    partition_ops: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # partition key -> its ops
    done: Mapping[str, str] = field(default_factory=dict)  # op -> the key of the task that completes it
    # key -> (first, last) loop step its task runs (a task of a loop's step, or a device's part of a window):
    # a lost worker is said at the steps it was running
    steps: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    gang: tuple[str, ...] = ()  # the parts of a gang window: they run together, never one again alone


@dataclass(frozen=True)
class CompiledWindow:
    """One window of a loop's steps, compiled: its graph and where the loop stands after it."""

    graph: CompiledGraph
    carried: Mapping[str, Located]  # state variable -> its value after the window's last step
    metric_keys: tuple[tuple[str, ...], ...]  # per chunk of steps: one key per metric, in the loop's order
    sink_keys: tuple[str, ...]  # tasks nothing reads (a save in the body, a device's part of the window)
    persistent_moves: Mapping[tuple[str, str], str]  # moves of outer values, reused by later windows
    last_step: int  # the number of steps done once this window is
    metrics_stacked: bool = False  # a metric key holds the window's values stacked (else one step's value)
    devices: Mapping[str, str] = field(default_factory=dict)  # device -> its part of the window (gang windows)
    # per metric of the (single) chunk: its element in its key's tuple (the key a part of a gang window, read
    # whole by the client), or -1 (the key holds the metric itself); empty: -1 for all
    metric_elements: tuple[int, ...] = ()
