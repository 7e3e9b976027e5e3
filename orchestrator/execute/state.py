"""The values of a staged run: what it holds on the cluster, where each value is, what it says of each op.

Policy. One owner changes them: the staged run (``execute.loops.StagedRun``,
which is a :class:`RunValues`). The parts it drives — a training loop
(``execute.training``), a sweep's copies' driver (``execute.halving``) — see
these values read-only (their Protocols give ``Mapping`` views) and change
them only through the methods below, each of which says what it does to the
run; the cache's hits come back as a record (``execute.hits.Hits``) that the
run takes in. So every change to a run's values is a call to its owner, not
a write into a dictionary another module happens to hold.

State, all of it the staged run's:

* ``held``: Dask key -> future, what must stay alive on the cluster (a value
  Dask holds only while a client holds its future);
* ``known``: value (``op`` or ``op:i``) -> where it is (``Located``);
* ``done``: op -> the value that says it completed (control edges wait for it);
* ``notes``: op -> what the run report says of it when it did not run as a task;
* ``client_values``: values the client keeps itself (a loop's series, markers);
* ``sinks``: futures nobody fetches but the run waits for (saves, evaluations).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..compile.records import Located
from ..devices import DeviceSpec


class RunValues:
    """What the staged run holds and knows, changed through its methods (see the module's policy)."""

    held: dict[str, Any]
    known: dict[str, Located]
    done: dict[str, Located]
    notes: dict[str, str]
    client_values: dict[str, Any]
    sinks: list[Any]

    def hold(self, futures: Mapping[str, Any]) -> None:
        """Keep these futures' values alive on the cluster while the run needs them."""
        self.held.update(futures)

    def release(self, keys: Iterable[str]) -> None:
        """Let these values go (Dask frees each once nobody holds it)."""
        for key in keys:
            self.held.pop(key, None)

    def place(self, name: str, future: Any, device: DeviceSpec) -> Located:
        """``name``'s value is ``future``'s, on ``device``: held, and known there."""
        self.held[future.key] = future
        self.known[name] = Located(future.key, device)
        return self.known[name]

    def note(self, op: str, text: str, unless_said: bool = False) -> None:
        """What the run report says of ``op`` (``unless_said``: only if nothing is said of it yet)."""
        if unless_said:
            self.notes.setdefault(op, text)
        else:
            self.notes[op] = text

    def keep_on_client(self, values: Mapping[str, Any]) -> None:
        """Values the client keeps itself (a loop's series and tables, a failed copy's markers)."""
        self.client_values.update(values)

    def wait_for_sinks(self, futures: Iterable[Any]) -> None:
        """Futures the run waits for at its end though nobody fetches them."""
        self.sinks.extend(futures)

    def drop_sinks(self, futures: Sequence[Any]) -> None:
        """No longer wait for these (a failed copy's evaluations: its failure is said already)."""
        self.sinks[:] = [s for s in self.sinks if all(s is not mine for mine in futures)]
