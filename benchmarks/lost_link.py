"""What a run does when the link between two hosts goes dark in the middle of a loop (B7's fault).

The polyfit example runs across the two hosts of :mod:`netns` (scheduler, ps
task and client on host A, the worker task's GPUs on host B); once its
training loop is under way (its live metric file has grown past a first
window: watched, not timed), host B's end of the veth goes down, as a
pulled cable or a dead switch port would: nothing crosses any more and, unlike
a stopped process, nobody closes a connection (no FIN, no RST). What is
wanted: ``orchestrate run`` exits by itself within 10 s with a one-line error
and no traceback. What is measured: the seconds from the link going down to
the client's exit (or ``hung`` after ``limit`` seconds, when it is killed),
its exit code and last line, whether a traceback was printed, which processes
of the run were left, and when the scheduler noticed each of host B's workers
gone (its own log's ``Remove worker`` lines), which says whether the client
was waiting on the scheduler or on the workers.
"""

from __future__ import annotations

import functools
import os
import re
import signal
import subprocess
import tempfile
import time
from datetime import datetime
from typing import Any

from netns import Cluster, Hosts, child_env, command

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "examples", "polyfit.yaml")


@functools.lru_cache(maxsize=1)
def polyfit_spec() -> str:
    """The polyfit example with every job in ``processes: device`` (a worker process per device), written once
    into a folder of its own: the example says ``processes: host``, which with its ``scheduler: local``
    names one process for every task of a machine (``/host:local``), and here the tasks are on two hosts."""
    from bench_polyfit import with_layout

    return with_layout(EXAMPLE, tempfile.mkdtemp(prefix="polyfit-device-"), "device")


TWO_HOSTS = {("ps", 0): 0, ("worker", 0): 1}  # the ps task with the scheduler; the GPUs across the link
LIVE_METRICS = os.path.join("results", ".polyfit_loss.csv.running")  # the loop's rows so far, a window at a time
GOAL_SECONDS = 10.0


def _removed_workers(scheduler_log: str, down_wall: float) -> dict[str, float]:
    """Seconds after the cut at which the scheduler removed each worker (from its log's time stamps)."""
    out: dict[str, float] = {}
    for line in scheduler_log.splitlines():
        m = re.match(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) .*Remove worker .*name: (\S+)", line)
        if m:
            stamp = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
            out.setdefault(m.group(2), round(stamp - down_wall, 2))
    return out


def _wait_for_loop(client: subprocess.Popen[bytes], out_path: str, live: str, cap: float) -> tuple[int, float]:
    """Until the loop is under way across the link: its live metric file (``live``) has the rows of a
    first window and then grew (a later window's values crossed the link, and the next are in flight).
    Watched, not timed: on a loaded machine the run may take many seconds between its first line and its
    loop, and a link cut then is not cut mid-loop. Gives up only when the client exits or after ``cap``
    seconds. (rows seen, seconds from the first rows to the growth)."""
    deadline = time.monotonic() + cap
    first: tuple[int, float] | None = None
    while True:
        rows = _rows(live)
        if first is None and rows:
            first = (rows, time.monotonic())
        elif first is not None and rows > first[0]:
            return rows, time.monotonic() - first[1]
        if client.poll() is not None or time.monotonic() > deadline:
            state = f"exited {client.returncode}" if client.poll() is not None else f"alive after {cap:g} s"
            raise RuntimeError(f"the loop did not get under way ({state}; {rows} rows in {live}):\n"
                               f"{_read(out_path)[-3000:]}")
        time.sleep(0.05)


def _rows(path: str) -> int:
    try:
        with open(path, "rb") as handle:
            return handle.read().count(b"\n")
    except OSError:
        return 0


def _read(path: str) -> str:
    with open(path, errors="replace") as handle:
        return handle.read()


def lose_link_mid_run(hosts: Hosts, limit: float = 60.0, steps: int = 200_000) -> dict[str, Any]:
    """Run polyfit across the hosts, take the link down mid-loop; what the client did (see the module)."""
    logs = tempfile.mkdtemp(prefix="b7-lost-link-")
    out_path = os.path.join(logs, "client.log")
    spec = polyfit_spec()
    with Cluster(hosts, spec, TWO_HOSTS, logs) as cluster:
        args = ["run", spec, "--set", f"steps={steps}", "--scheduler", cluster.address,
                "--output-dir", os.path.join(logs, "out")]
        with open(out_path, "wb") as handle:
            client = subprocess.Popen([*hosts.prefix(0), *command("orchestrate"), *args], stdout=handle,
                                      stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=child_env(),
                                      start_new_session=True)
        try:
            rows, looped = _wait_for_loop(client, out_path, os.path.join(logs, "out", LIVE_METRICS), cap=120.0)
            hosts.link_down(1)
            down, down_wall = time.monotonic(), time.time()
            try:
                code: int | None = client.wait(timeout=limit)
            except subprocess.TimeoutExpired:
                code = None
            seconds = time.monotonic() - down
            alive_after = client.poll() is None
        finally:
            if client.poll() is None:
                os.killpg(client.pid, signal.SIGKILL)
                client.wait()
            scheduler_log = _read(os.path.join(logs, "scheduler.log"))
            hosts.link_up(1)  # for whatever runs next on these hosts (host B's workers are stopped with the cluster)
    text = _read(out_path)
    lines = [line for line in text.splitlines() if line.strip()]
    result = {
        "seconds_to_exit": None if code is None else round(seconds, 2), "hung": code is None,
        "limit_s": limit, "exit_code": code, "last_line": lines[-1] if lines else "",
        "traceback": "Traceback" in text, "client_left_running": alive_after,
        "scheduler_removed_workers_after_s": _removed_workers(scheduler_log, down_wall),
        "within_goal": code is not None and code != 0 and seconds <= GOAL_SECONDS and "Traceback" not in text,
        "goal_s": GOAL_SECONDS, "metric_rows_before_cut": rows, "loop_before_cut_s": round(looped, 2),
        "logs": logs,
    }
    return result


def describe(r: dict[str, Any]) -> str:
    if r.get("skipped"):
        return f"lost link: skipped ({r['skipped']})"
    when = f"hung: still running {r['limit_s']:g} s after the link went down (killed)" if r["hung"] else \
        f"exited {r['exit_code']} {r['seconds_to_exit']:.1f} s after the link went down"
    seen = ", ".join(f"{name.split('/', 2)[-1]} at +{s:g} s" for name, s in
                     sorted(r["scheduler_removed_workers_after_s"].items(), key=lambda kv: kv[1])) or \
        "none (not before the cluster was stopped)"
    return (f"lost link: {when}{' (with a traceback)' if r['traceback'] else ''}; last line: {r['last_line']!r}; "
            f"the scheduler removed host B's workers: {seen}; goal: a one-line error within {r['goal_s']:g} s: "
            f"{'met' if r['within_goal'] else 'missed'}")
