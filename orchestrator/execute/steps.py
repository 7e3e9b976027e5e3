"""The step picture: where a loop step's time goes on each device, and the step's critical path.

In every sampled window each device records two consecutive steps
(``runtime.windows.Timeline``): each op's compute, each wait for a value
from another device, each send, with wall-clock times. This module turns
the drained timelines into the run report's ``loop_steps``:

* per device, the medians over the samples of the later step's time split
  into compute per op, waiting for values, sending (serialize + write),
  ``other_devices`` (devices of one process, ``processes: host``: the time
  their one thread ran the others' ops, waits and sends) and the rest (the
  runtime's own Python between them: ``overhead``);
* one step's critical path (the sample of median length): walked back from
  the last event of the step; a wait that began before its value was
  written jumps to the sender's send of it (the gap between is ``transit``:
  the link and the receiver waking up; 0 where the receiver had the value
  before the writer's call returned), any other event goes to the
  previous one on its device, or on its thread where one thread ran
  several devices (each op waited for the one before it, whoever's it
  was; the gap is ``overhead``). The walk stops at the previous step: the
  path is one period of the loop.

Times of different devices are compared directly: right on one host,
skewed by the hosts' clock difference across hosts (the page warns of it).
"""

from __future__ import annotations

import statistics
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from ..spec.records import Cluster, Spec
from .records import Curve

Event = tuple[str, str, float, float]  # kind, name, start, stop


def _breakdown(timeline: Mapping[str, Any], siblings: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """One device's step; ``siblings``: the same step of the other devices its thread ran."""
    compute: dict[str, float] = {}
    waits = sends = 0.0
    for kind, name, start, stop in timeline["events"]:
        if kind == "op":
            compute[name] = compute.get(name, 0.0) + stop - start
        elif kind == "wait":
            waits += stop - start
        else:
            sends += stop - start
    span = timeline["end"] - timeline["begin"]
    others = sum(stop - start for sibling in siblings for _, _, start, stop in sibling["events"])
    out = {"step": span, "compute": compute, "wait": waits, "send": sends,
           "overhead": max(0.0, span - sum(compute.values()) - waits - sends - others)}
    return {**out, "other_devices": others} if timeline.get("thread") else out


def _median_breakdown(parts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    ops = dict.fromkeys(name for p in parts for name in p["compute"])
    return {"step": statistics.median(p["step"] for p in parts),
            "compute": {op: statistics.median(p["compute"].get(op, 0.0) for p in parts) for op in ops},
            "wait": statistics.median(p["wait"] for p in parts),
            "send": statistics.median(p["send"] for p in parts),
            "overhead": statistics.median(p["overhead"] for p in parts),
            **({"other_devices": statistics.median(p["other_devices"] for p in parts)}
               if all("other_devices" in p for p in parts) else {})}


def _sent_refs(name: str) -> tuple[set[str], str]:
    refs, _, to = name.rpartition(" to ")
    return set(refs.split(", ")), to


def critical_path(timelines: Mapping[tuple[str, int], Mapping[str, Any]], step: int) -> list[dict[str, Any]]:
    """Segments (device, kind, name, seconds) of ``step``'s critical path, in time order."""
    events = {key: sorted(t["events"], key=lambda e: e[2]) for key, t in timelines.items()}
    thread = {key[0]: t.get("thread") or key[0] for key, t in timelines.items()}  # one thread, one chain
    mine = [(key, e) for key, evs in events.items() if key[1] == step for e in evs]
    if not mine:
        return []
    # a send is done for its reader once it started writing: a reader woken at once may finish its whole step
    # before the writer's call returns, so a send's end says little about when the step ended
    (device, at), event = max(mine, key=lambda item: item[1][2] if item[1][0] == "send" else item[1][3])
    path: list[dict[str, Any]] = []
    while True:
        kind, name, start, stop = event
        jump = _sender(events, device, at, event) if kind == "wait" else None
        if jump is not None:  # waiting for a value not written yet: the path goes on at its sender
            path.append({"device": device, "kind": "transit", "name": name, "seconds": max(0.0, stop - jump[1][3])})
            (device, at), event = jump
            if at < step:
                break
            continue
        path.append({"device": device, "kind": kind, "name": name, "seconds": stop - start})
        earlier = [(k, e) for k, evs in events.items() if thread[k[0]] == thread[device] and k[1] in (at, at - 1)
                   for e in evs if e[3] <= start + 1e-9 and e is not event]
        if not earlier:
            break
        (device, at), previous = max(earlier, key=lambda item: item[1][3])
        if at < step:
            break
        path.append({"device": device, "kind": "overhead", "name": "", "seconds": max(0.0, start - previous[3])})
        event = previous
    return path[::-1]


def _sender(events: Mapping[tuple[str, int], list[Event]], device: str, at: int,
            wait: Event) -> tuple[tuple[str, int], Event] | None:
    """The send that the wait ``wait`` waited for, when it was written after the wait began."""
    ref, _, sender = wait[1].partition(" from ")
    candidates = [((sender, s), e) for s in (at, at - 1) for e in events.get((sender, s), [])
                  if e[0] == "send" and ref in _sent_refs(e[1])[0] and _sent_refs(e[1])[1] == device
                  and e[2] <= wait[3] + 1e-9]
    if not candidates:
        return None
    found = max(candidates, key=lambda item: item[1][2])
    return found if found[1][3] > wait[2] else None


def step_pictures(samples: Iterable[Mapping[str, list[Mapping[str, Any]]]]) -> dict[str, Any]:
    """``loop_steps`` of the run report, from every worker's drained ``samples``."""
    by_loop: dict[str, dict[tuple[str, int], Mapping[str, Any]]] = {}
    for worker_samples in samples:
        for loop, timelines in worker_samples.items():
            for t in timelines:
                by_loop.setdefault(loop, {})[(t["device"], int(t["step"]))] = t
    return {loop: _picture(timelines) for loop, timelines in sorted(by_loop.items())}


def _picture(timelines: Mapping[tuple[str, int], Mapping[str, Any]]) -> dict[str, Any]:
    steps = sorted({step for _, step in timelines})
    pictured = [s for s in steps if s - 1 in steps]  # the later of each recorded pair
    devices = sorted({device for device, _ in timelines})
    per_device = {d: _median_breakdown([_breakdown(timelines[(d, s)], _siblings(timelines, d, s))
                                        for s in pictured if (d, s) in timelines])
                  for d in devices if any((d, s) in timelines for s in pictured)}
    paths = {s: critical_path({k: t for k, t in timelines.items() if k[1] in (s - 1, s)}, s) for s in pictured}
    lengths = {s: sum(seg["seconds"] for seg in path) for s, path in paths.items() if path}
    median_step = sorted(lengths, key=lambda s: lengths[s])[len(lengths) // 2] if lengths else None
    return {"sampled_steps": pictured, "devices": per_device,
            "critical_path": {"step": median_step, "seconds": lengths[median_step] if median_step is not None else 0.0,
                              "segments": paths.get(median_step, []) if median_step is not None else []}}


def _siblings(timelines: Mapping[tuple[str, int], Mapping[str, Any]], device: str,
              step: int) -> list[Mapping[str, Any]]:
    """``step`` of the other devices run by ``device``'s thread (``processes: host``), if one ran several."""
    thread = timelines[(device, step)].get("thread")
    return [t for (d, s), t in timelines.items() if thread and s == step and d != device and t.get("thread") == thread]


def loop_spans(drained: Mapping[str, Any], loop: str, curves: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """``spans``: when the loop's windows ran, on the workers' clocks (each device's, in time order);
    ``windows``: by device, each window as [start, stop, first step, last step] (the page's timeline); and the
    loop's ``curves`` (:func:`loop_curves`)."""
    ran = sorted(span for worker in drained.values() for span in worker.get("spans", {}).get(loop, ()))
    windows = {str(worker.get("ran_on", "")): sorted(worker["windows"][loop]) for worker in drained.values()
               if worker.get("windows", {}).get(loop)}
    return {**({"spans": ran} if ran else {}), **({"windows": dict(sorted(windows.items()))} if windows else {}),
            **curves.get(loop, {})}


def loop_curves(spec: Spec, client_values: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """``curves`` of each loop outside sweep copies (a copy's are its sweep's): every step metric and evaluation
    metric as the client gathered it (``LOOP.metric``), as (step, value) points thinned to ``MAX_CURVE``."""
    out: dict[str, dict[str, Any]] = {}
    for loop in spec.loops:
        if loop.scope.copies:
            continue
        evaluated = [name for name, _ in loop.evaluation.metrics] if loop.evaluation else []
        curves = []
        for name in [name for name, _ in loop.metrics] + evaluated:
            try:  # what the loop gathered; a run that failed mid-loop may have left anything: then no curve
                rows = np.asarray(client_values.get(f"{loop.name}.{name}", ()), dtype=float)
            except (TypeError, ValueError):
                continue
            if name in evaluated and rows.ndim == 2 and rows.shape[1] == 2:
                points = [(int(s), float(v)) for s, v in rows]
            elif name not in evaluated and rows.ndim == 1:  # a scalar per step (other shapes are not drawn)
                points = [(i + 1, float(v)) for i, v in enumerate(rows)]
            else:
                continue
            curves.append(Curve.of(name, points).as_dict())
        if curves:
            out[loop.name] = {"curves": curves}
    return out


def transport(modes: Mapping[str, str], cluster: Cluster, links: bool) -> str:
    """How gang windows' values went between devices (the run report's ``transport``): "" without any,
    ``in-process`` (by reference: every device in one worker, ``processes: host``), ``links``, or
    ``dask-comms`` (a TLS cluster)."""
    if not any(mode.startswith("gang") for mode in modes.values()):
        return ""
    if len(cluster.workers()) == 1 and len(cluster.devices) > 1:
        return "in-process"
    return "links" if links else "dask-comms"
