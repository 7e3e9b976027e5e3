"""What a run does when the link between two hosts goes dark in the middle of a loop (B7's fault).

The polyfit example runs across the two hosts of :mod:`netns` (scheduler, ps
task and client on host A, the worker task's GPUs on host B); once its
training loop has run for a while, host B's end of the veth goes down, as a
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
POLYFIT = os.path.join(ROOT, "examples", "polyfit.yaml")
TWO_HOSTS = {("ps", 0): 0, ("worker", 0): 1}  # the ps task with the scheduler; the GPUs across the link
GOAL_SECONDS = 10.0
LOOP_BEFORE_CUT = 1.5  # seconds of loop before the link goes down


def _removed_workers(scheduler_log: str, down_wall: float) -> dict[str, float]:
    """Seconds after the cut at which the scheduler removed each worker (from its log's time stamps)."""
    out: dict[str, float] = {}
    for line in scheduler_log.splitlines():
        m = re.match(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) .*Remove worker .*name: (\S+)", line)
        if m:
            stamp = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
            out.setdefault(m.group(2), round(stamp - down_wall, 2))
    return out


def _wait_for_loop(client: subprocess.Popen[bytes], out_path: str, timeout: float) -> None:
    """Until the run is under way (its first line printed), then ``LOOP_BEFORE_CUT`` more seconds."""
    deadline = time.monotonic() + timeout
    while "running '" not in _read(out_path):
        if client.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the run did not start:\n{_read(out_path)[-3000:]}")
        time.sleep(0.05)
    time.sleep(LOOP_BEFORE_CUT)


def _read(path: str) -> str:
    with open(path, errors="replace") as handle:
        return handle.read()


def lose_link_mid_run(hosts: Hosts, limit: float = 60.0, steps: int = 200_000) -> dict[str, Any]:
    """Run polyfit across the hosts, take the link down mid-loop; what the client did (see the module)."""
    logs = tempfile.mkdtemp(prefix="b7-lost-link-")
    out_path = os.path.join(logs, "client.log")
    with Cluster(hosts, POLYFIT, TWO_HOSTS, logs) as cluster:
        args = ["run", POLYFIT, "--set", f"steps={steps}", "--scheduler", cluster.address,
                "--output-dir", os.path.join(logs, "out")]
        with open(out_path, "wb") as handle:
            client = subprocess.Popen([*hosts.prefix(0), *command("orchestrate"), *args], stdout=handle,
                                      stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=child_env(),
                                      start_new_session=True)
        try:
            _wait_for_loop(client, out_path, timeout=120.0)
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
        "goal_s": GOAL_SECONDS, "loop_before_cut_s": LOOP_BEFORE_CUT, "logs": logs,
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
