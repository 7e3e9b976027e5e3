"""Client memory of a long loop: RSS after 100 steps vs at the end of 10,000 (goal: within 20%).

The cluster runs in a child process (its scheduler too), so the figures are
the client's alone: the runner builds one window of steps at a time and
drops the previous one, so memory must stay flat however many steps run.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.synchronize
import os
import sys
import tempfile
import time

SPEC = """\
version: 1
name: long-loop
cluster:
  jobs:
    localhost: {{gpus: 1}}
graph:
  - {{name: x0, op: zeros, shape: [4], device: /cpu:0}}
  - name: loop
    iterate:
      steps: {steps}
      window: 100
      state: {{x: x0}}
      body:
        - {{name: x_next, op: add, inputs: [x], scalar: 1.0, device: /gpu:0}}
      update: {{x: x_next}}
outputs:
  loop.x: "-"
"""


def rss_bytes() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def serve(spec_path: str, queue: "multiprocessing.Queue[str]", stop: "multiprocessing.synchronize.Event") -> None:
    from orchestrator.api import plan_file
    from orchestrator.execute.cluster import EmbeddedCluster

    cluster = EmbeddedCluster(plan_file(spec_path).spec.cluster, None).start()
    queue.put(cluster.scheduler_address)
    stop.wait()
    cluster.close()


def main() -> int:
    steps = 1_000 if "--quick" in sys.argv else 10_000
    path = os.path.join(tempfile.mkdtemp(), "loop.yaml")
    with open(path, "w") as handle:
        handle.write(SPEC.format(steps=steps))
    queue: "multiprocessing.Queue[str]" = multiprocessing.Queue()
    stop = multiprocessing.Event()
    server = multiprocessing.Process(target=serve, args=(path, queue, stop))  # not daemonic: it starts Nannies
    server.start()
    address = queue.get(timeout=120)
    from orchestrator.api import plan_file
    from orchestrator.api import RunSettings, run_plan

    samples: dict[int, int] = {}

    def on_progress(loop: str, done: int, total: int) -> None:
        samples[done] = rss_bytes()

    started = time.perf_counter()
    result = run_plan(plan_file(path), RunSettings(scheduler=address, write_outputs=False, progress=False,
                                                   on_loop_progress=on_progress), lambda _: None)
    elapsed = time.perf_counter() - started
    stop.set()
    server.join(timeout=60)
    assert float(result.values["loop.x"][0]) == steps, result.values["loop.x"]
    at_100, at_end = samples[100], rss_bytes()
    growth = at_end / at_100 - 1
    print(f"iterate of {steps} steps in {elapsed:.1f} s ({1000 * elapsed / steps:.2f} ms/step): client RSS "
          f"{at_100 / 2**20:.1f} MiB after 100 steps, {at_end / 2**20:.1f} MiB at the end: "
          f"{100 * growth:+.1f}% (goal: within ±20%)")
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from specgen import save_result

    save_result("loop_memory.json", {"steps": steps, "seconds": elapsed, "rss_after_100": at_100, "rss_end": at_end,
                                     "growth": growth, "samples": samples})
    return 0


if __name__ == "__main__":
    sys.exit(main())
