"""What every graph of one run shares: one record, so the runner builds it once and no call unpacks it."""

from __future__ import annotations

from dataclasses import dataclass

from .dask_keys import TaskNames
from ..plan.records import GRANULARITIES


@dataclass(frozen=True)
class CompileOptions:
    """What every graph of one run shares: its token, directories, key naming, granularity and output copies."""

    token: str
    base_dir: str = "."  # the spec's directory: load and call ops read from here
    out_dir: str | None = None  # save ops write here (default: base_dir)
    task_names: TaskNames = "op"
    host_outputs: bool = False  # outputs are device arrays (the backend says so): copy them to the host to fetch
    granularity: str = "partition"  # "partition": a task per device partition (loops: per window); "op": per op

    def __post_init__(self) -> None:
        if self.granularity not in GRANULARITIES:  # refused when made, not when the first graph is built
            raise ValueError(f"unknown granularity '{self.granularity}' (choose one of {', '.join(GRANULARITIES)})")
