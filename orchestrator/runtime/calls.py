"""What the client runs on every worker (``client.run``): a run's saves committed or discarded, an abort,
the direct links opened and their address book handed out, and the records drained.

Each call finds the worker's :class:`~orchestrator.runtime.device.Runtime` and acts on one run's state in it;
on a worker standing for every device of a task (``processes: host``), each device's runtime in turn (its seats).
What one device answers stays one device's answer: a host worker's records and metrics come back as ``seats``,
one entry per device, which the client reads as if each came from a worker of its own.
"""

from __future__ import annotations

import os
import time
from typing import Any

from ..atomic import FileSet
from .device import Runtime, _runtime
from .links import Address


# a worker standing for several devices (``processes: host``): {device: its seat}, each seat what ``runtime`` sees
# as the worker of one device (its name, its Runtime; the rest is the worker's own): execute.plugin makes them
SEATS_ATTRIBUTE = "orchestrator_seats"


def seats(worker: Any) -> list[Any]:
    """What ``runtime`` sees as the worker of each device ``worker`` stands for: itself, or a host worker's seats."""
    found = getattr(worker, SEATS_ATTRIBUTE, None)
    return list(found.values()) if found else [worker]


def commit_saves(dask_worker: Any, run: str) -> list[str]:
    """Run on every worker once a run has succeeded: its saves take their places, the old files kept until
    :func:`settle_saves` (a failure midway puts this worker's back and raises, naming the file). The paths."""
    return [path for seat in seats(dask_worker) for path in _commit(seat, run)]


def _commit(dask_worker: Any, run: str) -> list[str]:
    _, runtime = _runtime(dask_worker)
    with runtime.lock:
        staged = runtime.staged.pop(run, {})
    files = FileSet()
    for staging, target in staged.items():
        if os.path.exists(staging):
            files.add(staging, target)
    done = files.commit()
    with runtime.lock:
        runtime.committed[run] = files
    return done


def settle_saves(dask_worker: Any, run: str, undo: bool) -> None:
    """Run on every worker after :func:`commit_saves`: the saves stand (``undo`` False: the old files dropped)
    or, when another part of the run's commit failed, every old file is put back."""
    for seat in seats(dask_worker):
        _settle(seat, run, undo)


def _settle(dask_worker: Any, run: str, undo: bool) -> None:
    _, runtime = _runtime(dask_worker)
    with runtime.lock:
        files = runtime.committed.pop(run, None)
    if files is None:
        return
    if not undo:
        files.settle()
        return
    left = files.undo()
    if left:
        raise OSError(0, f"could not put back {left}")


def discard_saves(dask_worker: Any, run: str) -> None:
    """Run on every worker when a run failed: its checkpoints are dropped, existing files stay as they were."""
    staged: dict[str, str] = {}
    for seat in seats(dask_worker):
        _, runtime = _runtime(seat)
        with runtime.lock:
            staged.update(runtime.staged.pop(run, {}))
    for staging in staged:
        if os.path.exists(staging):
            os.unlink(staging)


def abort_run(dask_worker: Any, run: str, why: str) -> None:
    """Run on every worker (``Client.run``) when a run fails: wake every op waiting for a value of it."""
    for seat in seats(dask_worker):
        _runtime(seat)[1].mailbox.abort(run, why)


def abort_loop(dask_worker: Any, run: str, loop_index: int, why: str) -> None:
    """Run on every worker when one loop of a run failed and the run goes on (a sweep's copy): wake its ops.
    (Not ``loop=``: ``Client.run`` passes that name to its own event loop.)"""
    for seat in seats(dask_worker):
        _runtime(seat)[1].mailbox.abort_loop(run, loop_index, why)


def open_links(dask_worker: Any, secret: bytes) -> list[tuple[str, Address]] | None:
    """Run on every worker (``Client.run``) before a run: its devices, and where their links listen."""
    address = str(dask_worker.address)
    if "://" in address and not address.startswith("tcp://"):
        return None  # TLS (or another comm): values keep to Dask's comms, which carry its security
    host = address.split("://", 1)[-1].rsplit(":", 1)[0].strip("[]")
    runtimes = [_runtime(seat)[1] for seat in seats(dask_worker)]
    return [(runtime.config.name, runtime.links.listen(host, secret)) for runtime in runtimes]


def set_links(dask_worker: Any, book: dict[str, Address]) -> None:
    """Run on every worker after :func:`open_links`: where every other device listens (the devices of this
    process are left out: their values are handed over by reference)."""
    runtimes = [_runtime(seat)[1] for seat in seats(dask_worker)]
    here = {runtime.config.name for runtime in runtimes}
    for runtime in runtimes:
        runtime.links.book = {device: address for device, address in book.items() if device not in here}


def drain_records(dask_worker: Any, run: str) -> dict[str, Any]:
    """Run on every worker (``Client.run``) after a run: its records of that run, and its memory (a host
    worker's: ``seats``, each device's)."""
    found = seats(dask_worker)
    if len(found) > 1:
        return {"seats": [_drain(seat, run) for seat in found]}
    return _drain(dask_worker, run)


def _drain(dask_worker: Any, run: str) -> dict[str, Any]:
    worker, runtime = _runtime(dask_worker)
    runtime.mailbox.forget(run)
    with runtime.lock:
        mine = [r for key, r in runtime.records.items() if key[0] == run]
        for key in [k for k in runtime.records if k[0] == run]:
            del runtime.records[key]
        samples = {loop: timelines for (of_run, loop), timelines in runtime.samples.items() if of_run == run}
        for sampled in [k for k in runtime.samples if k[0] == run]:
            del runtime.samples[sampled]
        spans = {loop: ran for (of_run, loop), ran in runtime.spans.items() if of_run == run}
        for spanned in [k for k in runtime.spans if k[0] == run]:
            del runtime.spans[spanned]
        windows = {loop: ran for (of_run, loop), ran in runtime.windows.items() if of_run == run}
        for ran in [k for k in runtime.windows if k[0] == run]:
            del runtime.windows[ran]
    # what Dask itself says it moved into this worker for this run (its transfer log): key, bytes, when, from whom
    received = [(key, int(nbytes), float(entry.get("start", 0.0)), float(entry.get("stop", 0.0)), str(entry.get("who")))
                for entry in getattr(worker, "transfer_incoming_log", ())
                for key, nbytes in entry.get("keys", {}).items() if run in str(key)]
    runtime.moved[run] = sum(item[1] for item in received)  # the live page's count, settled as the report's
    return {"ran_on": str(worker.name), "records": mine, "memory": runtime.backend.stats(),
            "created": runtime.created, "received": received, "samples": samples, "spans": spans,
            "windows": windows}


MOVED_RUNS = 8
BUSY_SHARES = 10  # the heartbeats' busy shares each heartbeat repeats (at 0.5 s a heartbeat: the last 5 s)


def device_metrics(dask_worker: Any) -> dict[str, Any]:
    """What this device says of itself at each heartbeat (a Dask worker metric; the run's live page reads it on
    the scheduler): its backend's memory held now, the ops its threads run now, its op seconds so far, and the
    bytes Dask moved into it per run. Nothing is asked of it: the heartbeat carries it. (A host worker's: ``seats``,
    each device's.)"""
    found = seats(dask_worker)
    if len(found) > 1:
        return {"seats": [_metrics(seat) for seat in found]}
    return _metrics(dask_worker)


def _metrics(dask_worker: Any) -> dict[str, Any]:
    worker, runtime = _runtime(dask_worker)
    with runtime.lock:
        runs = {run for run, _, _ in runtime.records}
    log = list(getattr(worker, "transfer_incoming_log", ()))
    fresh = []  # the entries since the last heartbeat's newest (the log is a bounded deque: counted as they come)
    for entry in reversed(log):
        if entry is runtime.moved_seen:
            break
        fresh.append(entry)
    if log:
        runtime.moved_seen = log[-1]
    for entry in fresh:
        for key, nbytes in entry.get("keys", {}).items():
            run = next((r for r in runs if r in str(key)), None)  # a run's keys carry its token
            if run is not None:
                runtime.moved[run] = runtime.moved.get(run, 0) + int(nbytes)
    for old in list(runtime.moved)[:-MOVED_RUNS]:  # a long-lived cluster's runs: the latest few are shown
        del runtime.moved[old]
    running = sorted(set(runtime.running.copy().values()))  # (a copy: the task threads change it meanwhile)
    return {"device": runtime.config.name, "memory": runtime.backend.stats(), "running": running,
            "busy": _busy_shares(runtime, int(getattr(worker, "seat_threads", 0) or worker.state.nthreads or 1)), "moved": dict(runtime.moved)}


def _busy_shares(runtime: Runtime, threads: int) -> list[list[float]]:
    """The share of the task threads that ran ops since the last heartbeat, and the few before it: [when, share]
    each (a scheduler reading every other heartbeat misses none)."""
    now, busy = time.time(), runtime.busy
    seen = runtime.busy_seen or (runtime.created, 0.0)  # (the first heartbeat: since the device's runtime began)
    if now > seen[0] and busy >= seen[1]:
        share = (busy - seen[1]) / (now - seen[0]) / max(1, threads)
        runtime.busy_shares.append([round(now, 3), round(min(1.0, share), 6)])
        del runtime.busy_shares[:-BUSY_SHARES]
    runtime.busy_seen = (now, busy)
    return [list(sample) for sample in runtime.busy_shares]
