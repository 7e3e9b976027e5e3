"""How fast a run says that a device worker died: the seconds from a kill -9 to its one-line error, idle and busy.

The issue's fault: a device worker of ``examples/polyfit.yaml`` (GPU:0 or
GPU:1) or of ``examples/train.yaml`` (GPU:0) killed mid-loop, on a machine
with two busy-looping processes beside the run, used to hang the run (the
client waited for a window whose result, lost with the worker, Dask was
computing again from the loop's first window); on a quiet machine the same
kill gave one line within a second. Goal: one line within 10 s, busy as idle.

Each run: ``orchestrate run`` (the example copied to a temporary folder,
steps or epochs raised so the loop outlasts the measurement) in a process
group of its own; once the loop has written its first window's metric CSV,
and a random 0.5-2.5 s more (so the kill lands anywhere in a window), the
worker of the device is found through the run's own cluster (the dashboard's
workers page names the scheduler; a client of this script asks each worker
for its process id) and killed with SIGKILL. Measured: the seconds from the
kill to the ``error:`` line on stderr and to the process's exit (``hung``
after ``--limit`` seconds, then it is killed), its exit code, whether that
was its only line on stderr, and the processes of its group left 5 s later.
``--hogs 2`` adds two busy-looping processes for the whole run ("busy").

    python benchmarks/lost_worker.py [--reps 3] [--cases polyfit:GPU:0,polyfit:GPU:1,train:GPU:0]
                                     [--limit 60] [--out benchmarks/results/lost_worker.json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
GOAL_SECONDS = 10.0
# case -> (spec, its functions, settings that keep the loop going, the live metric file its first window makes)
EXAMPLES = {
    "polyfit": ("polyfit.yaml", "polyfit_fns.py", ["--set", "steps=1000000"],
                "results/.polyfit_loss.csv.running"),
    "train": ("train.yaml", "train_fns.py", ["--set", "epochs=100000", "--set", "patience=100000"],
              "results/.train_loss.csv.running"),
}


def _pgid(pid: str) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[2])
    except (OSError, ValueError, IndexError):
        return -1


def _worker_pid(dashboard: str, device: str) -> int:
    """The process of ``device``'s worker: the dashboard's workers page names the scheduler (its JSON identity
    page fails once workers report task metrics), a client of this script asks each worker."""
    from distributed import Client

    page = urllib.request.urlopen(dashboard + "/info/main/workers.html", timeout=60).read().decode()
    scheduler = re.search(r"Scheduler (\S+://[^\s<]+)", page)
    assert scheduler is not None, "no scheduler on the dashboard's workers page"
    with Client(scheduler.group(1), timeout=60) as client:
        names = {address: str(info["name"]) for address, info in client.scheduler_info(n_workers=-1)["workers"].items()}
        pids = client.run(os.getpid)
    return next(pid for address, pid in pids.items() if names[address].endswith(device))


def one_kill(case: str, device: str, limit: float) -> dict[str, Any]:
    """One run of ``case`` with ``device``'s worker killed mid-loop; what happened (see the module)."""
    name, fns, settings, metric = EXAMPLES[case]
    folder = Path(tempfile.mkdtemp(prefix="lost-worker-"))
    # a worker process per device (polyfit says processes: host, where the process killed would be every device's)
    text = (ROOT / "examples" / name).read_text(encoding="utf-8")
    (folder / name).write_text(text.replace("processes: host", "processes: device"), encoding="utf-8")
    shutil.copy(ROOT / "examples" / fns, folder / fns)
    out = folder / "out"
    proc = subprocess.Popen([str(BIN / "orchestrate"), "run", str(folder / name), *settings, "--output-dir", str(out)],
                            cwd=folder, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, start_new_session=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    said: list[tuple[float, str]] = []  # (when, line) of stdout and stderr, as they come
    errors: list[tuple[float, str]] = []

    def read(stream: Any, lines: list[tuple[float, str]]) -> None:
        for line in stream:
            lines.append((time.monotonic(), line))

    readers = [threading.Thread(target=read, args=(s, l), daemon=True)
               for s, l in ((proc.stdout, said), (proc.stderr, errors))]
    for reader in readers:
        reader.start()
    try:
        deadline = time.monotonic() + 120
        while not (out / metric).exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the loop did not start:\n" + "".join(line for _, line in said + errors))
            time.sleep(0.02)
        link = re.search(r"dashboard: (http://[^/\s]+)/", "".join(line for _, line in said))
        assert link is not None, "no dashboard line"
        pid = _worker_pid(link.group(1), device)
        time.sleep(random.uniform(0.5, 2.5))
        killed = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        try:
            code: int | None = proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            code = None
        exited = time.monotonic() - killed
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    for reader in readers:
        reader.join(timeout=5)
    time.sleep(5.0)
    left = [p for p in os.listdir("/proc") if p.isdigit() and _pgid(p) == proc.pid]
    first = next(((when, line) for when, line in errors if line.startswith("error:")), None)
    shutil.rmtree(folder, ignore_errors=True)
    return {"case": case, "device": device, "exit_code": code, "hung": code is None,
            "seconds_to_error_line": None if first is None else round(first[0] - killed, 3),
            "seconds_to_exit": None if code is None else round(exited, 3),
            "one_line": len(errors) == 1 and first is not None, "line": first[1].strip() if first else "",
            "left_processes": len(left)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--cases", default="polyfit:GPU:0,polyfit:GPU:1,train:GPU:0")
    parser.add_argument("--limit", type=float, default=60.0, help="seconds after the kill before a run is hung")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "lost_worker.json"))
    args = parser.parse_args(argv)
    cases = [(c.split(":", 1)[0], "device:" + c.split(":", 1)[1]) for c in args.cases.split(",")]
    runs: list[dict[str, Any]] = []
    for load in ("idle", "busy"):
        hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2 if load == "busy" else 0)]
        try:
            for _ in range(args.reps):
                for case, device in cases:
                    run = {"load": load, **one_kill(case, device, args.limit)}
                    runs.append(run)
                    print(json.dumps(run), flush=True)
        finally:
            for hog in hogs:
                hog.kill()
                hog.wait()
    summary = {}
    for load in ("idle", "busy"):
        mine = [r for r in runs if r["load"] == load]
        times = [r["seconds_to_error_line"] for r in mine if r["seconds_to_error_line"] is not None]
        summary[load] = {"runs": len(mine), "hung": sum(r["hung"] for r in mine),
                         "one_line_exit_1": sum(r["one_line"] and r["exit_code"] == 1 for r in mine),
                         "left_processes": sum(r["left_processes"] for r in mine),
                         "median_s": round(statistics.median(times), 2) if times else None,
                         "max_s": round(max(times), 2) if times else None}
    met = all(s["hung"] == 0 and s["max_s"] is not None and s["max_s"] <= GOAL_SECONDS and
              s["one_line_exit_1"] == s["runs"] and s["left_processes"] == 0 for s in summary.values())
    Path(args.out).write_text(json.dumps({"goal_s": GOAL_SECONDS, "met": met, "summary": summary, "runs": runs},
                                         indent=2) + "\n")
    for load, s in summary.items():
        print(f"{load}: {s['runs']} kills, {s['hung']} hung, {s['one_line_exit_1']} one line + exit 1, "
              f"kill -> error line median {s['median_s']} s, max {s['max_s']} s, {s['left_processes']} processes left")
    print(f"goal (one line within {GOAL_SECONDS:g} s, busy as idle): {'met' if met else 'missed'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
