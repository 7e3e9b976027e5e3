"""What the loop driver (:class:`~.loops.StagedRun`) needs of a runner, and nothing more.

Two runners implement it: :class:`~.run.Runner` submits to a Dask cluster and
waits on futures; :class:`~.sync.SyncRunner` runs each graph in this process
as it is submitted (``run --sync``). The driver decides what to submit and
when; a runner decides only how.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from ..compile.records import CompiledGraph
from ..devices import DeviceSpec
from .records import LoopNews, SweepNews


class Submitter(Protocol):
    """What the loop driver needs of the runner: send graphs, wait for keys, place a client value."""

    def submit(self, compiled: CompiledGraph, keys: Sequence[str]) -> dict[str, Any]: ...
    def gather(self, output_keys: Mapping[str, str], futures: Mapping[str, Any],
               sinks: Sequence[str] = ()) -> dict[str, Any]: ...
    def scatter(self, value: Any, device: DeviceSpec) -> Any: ...
    def wait_for(self, futures: Sequence[Any]) -> None: ...
    def loop_progress(self, loop: str, done: int, steps: int, note: str = "") -> None: ...
    def abort_loop(self, loop: int, why: str) -> None: ...
    def tell(self, news: LoopNews | SweepNews) -> None: ...  # for the run's live page; returns at once
