"""What every graph of one run shares."""

from __future__ import annotations

from dataclasses import dataclass

from ..keys import TaskNames


@dataclass(frozen=True)
class CompileOptions:
    """What every graph of one run shares: its token, directories, key naming and granularity."""

    token: str
    base_dir: str = "."  # the spec's directory: load and call ops read from here
    out_dir: str | None = None  # save ops write here (default: base_dir)
    task_names: TaskNames = "op"
    host_outputs: bool = False  # outputs are device arrays (CuPy): copy them to the host before fetching
    granularity: str = "partition"  # "partition": a task per device partition (loops: per window); "op": per op
