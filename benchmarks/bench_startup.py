"""B5: start-up and shut-down. The embedded cluster ready ÷ a plain ``LocalCluster`` with as many workers.

"Ready" = from nothing to every worker registered with the scheduler and a
client connected (``Client(cluster)`` then ``wait_for_workers(n)``). Both
sides start Nanny-managed worker processes (1 thread each) on 127.0.0.1 with a
dashboard on a free port, in this one process, alternating (embedded, local,
embedded, ...), after one untimed warm-up of each (before the first size);
medians of the timed runs.

The embedded cluster forks its workers from a server that has imported what
they need (orchestrator/execute/processes.py); ``LocalCluster`` spawns each
one, as Dask does by default. The server outlives a cluster, so the embedded
side is timed twice: with its server started afresh for each start (stopped
before it, as in a fresh ``orchestrate run``, though there the server imports
while the client imports Dask and here it has nothing to overlap), which is
the ratio's figure, and with the server already up (a process that starts
several clusters). Shut-down (``client.close()`` then ``cluster.close()``) is
timed apart and is not part of the ratio. Goal: ratio <= 1.1.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from typing import Any, Callable

sys.path.insert(0, os.path.dirname(__file__))
from specgen import median, save_result, write_spec  # noqa: E402

from orchestrator.api import plan_file  # noqa: E402

SPEC = """\
version: 1
name: b5-startup
cluster:
  jobs:
    localhost: {{gpus: {gpus}}}
graph:
  - {{name: a, op: ones, shape: [2], device: /cpu:0}}
"""


def embedded_factory(cluster_spec: Any) -> Callable[[], Any]:
    from orchestrator.execute.cluster import EmbeddedCluster

    return lambda: EmbeddedCluster(cluster_spec).start()  # the default dashboard (":0"), as `orchestrate run`


def stop_fork_server() -> None:
    """Stop multiprocessing's fork server (if running): the next start of a cluster starts it again."""
    from multiprocessing import forkserver

    server = getattr(forkserver, "_forkserver", None)
    if server is not None and hasattr(server, "_stop"):
        server._stop()


def local_factory(n_workers: int) -> Callable[[], Any]:
    from distributed import LocalCluster

    return lambda: LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True, host="127.0.0.1",
                                dashboard_address=":0")


def time_once(factory: Callable[[], Any], n_workers: int, fresh_server: bool = False) -> tuple[float, float]:
    """(start-up, shut-down) in seconds; ``fresh_server``: the fork server stopped first (untimed)."""
    from distributed import Client

    if fresh_server:
        stop_fork_server()
    started = time.perf_counter()
    cluster = factory()
    client = Client(cluster, set_as_default=False)
    client.wait_for_workers(n_workers, timeout=120)
    ready = time.perf_counter() - started
    started = time.perf_counter()
    client.close()
    cluster.close()
    return ready, time.perf_counter() - started


def measure(gpus: int, repeats: int, warm_up: bool) -> dict[str, Any]:
    path = write_spec(os.path.join(tempfile.mkdtemp(), f"startup{gpus}.yaml"), SPEC.format(gpus=gpus))
    cluster_spec = plan_file(path).spec.cluster
    n = len(cluster_spec.devices)
    sides = {"embedded": embedded_factory(cluster_spec), "embedded, server up": embedded_factory(cluster_spec),
             "local": local_factory(n)}
    for factory in sides.values() if warm_up else ():  # warm up: imports, first spawn
        time_once(factory, n)
    ready: dict[str, list[float]] = {k: [] for k in sides}
    close: dict[str, list[float]] = {k: [] for k in sides}
    for i in range(repeats):
        order = list(sides) if i % 2 == 0 else list(reversed(sides))  # alternate who goes first
        for name in order:
            r, c = time_once(sides[name], n, fresh_server=name == "embedded")
            ready[name].append(r)
            close[name].append(c)
    e, up, lc = median(ready["embedded"]), median(ready["embedded, server up"]), median(ready["local"])
    return {"workers": n, "embedded_s": e, "embedded_server_up_s": up, "local_s": lc, "ratio": e / lc,
            "ratio_server_up": up / lc, "embedded_runs": ready["embedded"],
            "embedded_server_up_runs": ready["embedded, server up"], "local_runs": ready["local"],
            "embedded_close_s": median(close["embedded"]), "embedded_server_up_close_s": median(close["embedded, server up"]),
            "local_close_s": median(close["local"]), "embedded_close_runs": close["embedded"],
            "local_close_runs": close["local"]}


def main() -> int:
    quick = "--quick" in sys.argv
    configs = [(2, 3)] if quick else [(2, 5), (4, 5)]  # (GPUs, repeats): 3 and 5 worker processes
    configs_out: dict[str, Any] = {}
    for i, (gpus, repeats) in enumerate(configs):
        r = measure(gpus, repeats, warm_up=i == 0)
        configs_out[str(r["workers"])] = r
        print(f"{r['workers']} workers, medians of {repeats}: start-up: embedded cluster ready in {r['embedded_s']:.2f} s "
              f"(fork server started afresh; {r['embedded_server_up_s']:.2f} s with it up) | LocalCluster "
              f"{r['local_s']:.2f} s | ratio {r['ratio']:.3f} (goal <= 1.1; server up: {r['ratio_server_up']:.3f})")
        print(f"{r['workers']} workers, medians of {repeats}: shut-down: embedded {r['embedded_close_s']:.2f} s "
              f"({r['embedded_server_up_close_s']:.2f} s) | LocalCluster {r['local_close_s']:.2f} s")
    results = {"configs": configs_out, "ratio": max(r["ratio"] for r in configs_out.values())}
    save_result("startup.json", results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
