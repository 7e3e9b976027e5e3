"""The run's live page on the scheduler (`/orchestrator/`, issue 28): devices, loops, sweeps, over real HTTP.

One spec has a training loop (evaluations, early stopping, checkpoints) and a
sweep of a loop with a halving rule, one of whose copies fails. It runs on
the embedded cluster, where the page is read while the run goes (from the
loop-progress callback, which the driver calls between windows), and on a
remote cluster (`dask scheduler` + `orchestrate worker` processes), whose
scheduler outlives the run, where the page's final state is read.
"""

from __future__ import annotations

import io
import json
import re
import shutil
import subprocess
import textwrap
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from orchestrator.api import plan_file
from orchestrator.cli import run_cli
from orchestrator.execute.records import RunSettings
from orchestrator.execute.run import run_plan
from test_remote import Proc, _command, start_task, stop_all, wait_started

pytestmark = pytest.mark.cluster

FNS = """\
def guard(w, lr, xp):
    if float(lr) >= 0.2:
        raise ValueError("lr 0.2 diverged")
    return w
"""

SPEC = """\
version: 1
name: watched
cluster: {jobs: {localhost: {gpus: 2, gpu_threads: 4}}}
graph:
  - scope: /cpu:0
    ops:
      - {name: X, op: random.normal, shape: [64, 3], seed: 1}
      - {name: true_w, op: constant, value: [1.5, -2.0, 0.5]}
      - {name: Xw, op: matmul, inputs: [X, true_w]}
      - {name: noise, op: random.normal, shape: [64], stddev: 0.1, seed: 2}
      - {name: y, op: add, inputs: [Xw, noise]}
      - {name: Xt, op: transpose, inputs: [X]}
      - {name: two_over_n, op: constant, value: 0.03125}
      - {name: Xt2, op: mul, inputs: [Xt, two_over_n]}
      - {name: w0, op: zeros, shape: [3]}
  - name: fit
    iterate:
      steps: 60
      window: 5
      state: {w: w0}
      body:
        - {name: pred, op: matmul, inputs: [X, w]}
        - {name: err, op: sub, inputs: [pred, y]}
        - {name: g0, op: matmul, inputs: [Xt2, err]}
        - {name: g, op: mul, inputs: [g0], scalar: 0.05}
        - {name: w_next, op: sub, inputs: [w, g]}
        - {name: sq, op: mul, inputs: [err, err]}
        - {name: loss, op: mean, inputs: [sq]}
      update: {w: w_next}
      metrics: {loss: loss}
      evaluate:
        every: 5
        body:
          - {name: vpred, op: matmul, inputs: [X, w]}
          - {name: verr, op: sub, inputs: [vpred, y]}
          - {name: vsq, op: mul, inputs: [verr, verr]}
          - {name: vloss, op: mean, inputs: [vsq]}
        metrics: {val: vloss}
      early_stop: {metric: val, patience: 2, min_delta: 0.05}
      checkpoint: {every: 10, keep: 1, path: ck}
  - name: hp
    sweep:
      grid: {lr: [0.01, 0.05, 0.1, 0.2]}
      spread: /gpu:*
      allow_failures: true
      body:
        - {name: v0, op: zeros, shape: [3]}
        - name: train
          iterate:
            steps: 20
            window: 5
            state: {w: v0}
            body:
              - {name: pred, op: matmul, inputs: [X, w]}
              - {name: err, op: sub, inputs: [pred, y]}
              - {name: g0, op: matmul, inputs: [Xt2, err]}
              - {name: g, op: mul, inputs: [g0, lr]}
              - {name: w_next, op: sub, inputs: [w, g]}
              - {name: w_ok, op: call, fn: "page_fns:guard", kernels: [cpu, gpu], inputs: [w_next, lr]}
              - {name: sq, op: mul, inputs: [err, err]}
              - {name: loss, op: mean, inputs: [sq]}
            update: {w: w_ok}
            metrics: {loss: loss}
      halving: {metric: train.loss, rungs: [10], keep: 0.5}
      gather: {losses: train.loss}
outputs:
  fit.loss: fit_loss.npy
"""


def write_spec(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "page_fns.py").write_text(FNS, encoding="utf-8")
    spec = folder / "watched.yaml"
    spec.write_text(SPEC, encoding="utf-8")
    return spec


def start_scheduler(logs: Path) -> tuple[Proc, str]:
    """`dask scheduler` on 127.0.0.1, free ports for it and its dashboard; returns it and its address."""
    file = logs / "scheduler.json"
    proc = Proc.start("scheduler", [*_command("dask"), "scheduler", "--host", "127.0.0.1", "--port", "0",
                                    "--dashboard-address", "127.0.0.1:0", "--scheduler-file", str(file)], logs)
    proc.wait_for(lambda p: file.exists() and "address" in file.read_text(errors="replace"), "scheduler file")
    return proc, json.loads(file.read_text())["address"]


def fetch(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as response:
        assert response.status == 200
        return str(response.read().decode("utf-8"))


def state_of(page: str) -> dict[str, Any]:
    got: dict[str, Any] = json.loads(fetch(page + "state.json"))
    return got


def page_from(said: str) -> str:
    found = re.search(r"dashboard: http://127\.0\.0\.1:\d+/status \(.*\); this run: (http://127\.0\.0\.1:\d+/orchestrator/)",
                      said)
    assert found, said
    return found.group(1)


def test_the_page_shows_an_embedded_run_as_it_goes(tmp_path: Path) -> None:
    spec = write_spec(tmp_path)
    plan = plan_file(spec)
    said: list[str] = []
    seen: list[dict[str, Any]] = []
    calls: list[tuple[str, int]] = []
    pages: list[str] = []

    def progress(loop: str, done: int, steps: int) -> None:
        """Between two windows of the run: the page as it is now (the run waits meanwhile)."""
        calls.append((loop, done))
        fits = [d for name, d in calls if name == "fit"]
        if loop != "fit" or len(seen) >= 1:
            return
        if len(fits) == 1:
            time.sleep(1.0)  # past the feed's interval: this window's news goes out as soon as it is read
            return
        page = page_from("\n".join(said))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # the news is on its way (nobody waits for it): poll
            state = state_of(page)
            loop_now = state["runs"][0]["loops"].get("fit", {})
            if len(loop_now.get("series", {}).get("loss", ())) >= fits[0] and loop_now.get("step", 0) >= fits[0]:
                seen.append(state)
                pages.append(fetch(page))
                return
            time.sleep(0.1)
        raise AssertionError(f"the page never showed loop 'fit' at step {fits[0]}: {state}")

    settings = RunSettings(output_dir=str(tmp_path / "out"), progress=False, on_loop_progress=progress)
    result = run_plan(plan, settings, said.append)
    assert result.run_report is not None
    assert seen, calls
    live = seen[0]
    run = live["runs"][0]
    assert run["status"] == "running" and run["run"] == result.run_report.run
    fit = run["loops"]["fit"]
    assert 0 < fit["step"] < 60 and fit["state"] == "running"
    assert fit["evaluations"]["val"][0][0] == 5 and fit["stopping"]["judged"] >= 1
    assert [p[0] for p in fit["series"]["loss"]] == list(range(1, len(fit["series"]["loss"]) + 1))
    assert {d["name"] for d in run["plan"]["devices"]} == {d.name for d in plan.spec.cluster.devices}
    assert set(live["devices"]) == {d.name for d in plan.spec.cluster.devices}  # each device's heartbeat
    gpu = next(d for d in plan.spec.cluster.devices if d.is_gpu)
    assert live["devices"][gpu.name]["memory"]["backend"] == "simulated"
    assert "in_use" in live["devices"][gpu.name]["memory"]
    html = pages[0]
    assert 'data-device' in html and 'data-loop' in html and 'data-copy' in html and "state.json" in html


@pytest.fixture(scope="module")
def remote_page(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A `dask scheduler` with its dashboard and one `orchestrate worker`; the spec run on it, then the page."""
    folder = tmp_path_factory.mktemp("page")
    spec = write_spec(folder / "spec")
    logs = folder / "logs"
    scheduler, address = start_scheduler(logs)
    procs = [scheduler]
    try:
        procs.append(start_task(spec, "localhost", 0, address, logs))
        wait_started(procs[-1], 3)
        out = io.StringIO()
        code = run_cli(["run", str(spec), "--scheduler", address, "--output-dir", str(folder / "out"), "--no-progress",
                        "--report", str(folder / "run.json"), "--wait-for-workers", "30"], out=out)
        said = out.getvalue()
        assert code == 0, said  # (a copy failed: allow_failures)
        page = page_from(said)
        deadline = time.monotonic() + 30
        state = state_of(page)
        while state["runs"][0]["status"] == "running" and time.monotonic() < deadline:
            time.sleep(0.2)  # the run's last news is on its way
            state = state_of(page)
        yield page, state, json.loads((folder / "run.json").read_text()), plan_file(spec)
    finally:
        stop_all(procs)


def test_the_page_of_a_remote_run_shows_its_loops_to_the_end(remote_page: Any) -> None:
    page, state, report, plan = remote_page
    run = state["runs"][0]
    assert run["run"] == report["run"] and run["status"] == "finished"
    fit, ran = run["loops"]["fit"], report["loops"]["fit"]
    stopped = ran["stopped_at_step"]
    assert fit["step"] == stopped
    assert fit["state"] == ("done" if stopped == 60 else f"stopped ({ran['stop_reason']})")
    assert len(fit["series"]["loss"]) >= stopped  # every step's point (a window read past a stop may add some)
    assert [p[0] for p in fit["evaluations"]["val"]] == list(range(5, stopped + 1, 5))
    assert fit["stopping"]["judged"] == stopped // 5 and "best" in fit["stopping"]
    # every 10 steps, but not at the step early stopping ends the loop at (as the checkpoint files say)
    assert fit["checkpoint"] == max(s for s in range(10, stopped + 1, 10) if s < stopped or stopped == 60)
    assert 0 < fit["rate"]


def test_the_page_of_a_remote_run_shows_its_sweep(remote_page: Any) -> None:
    page, state, report, plan = remote_page
    run = state["runs"][0]
    sweep = next(s for s in run["plan"]["sweeps"] if s["name"] == "hp")
    assert sorted(c["index"] for c in sweep["copies"]) == [0, 1, 2, 3]
    assert {c["device"] for c in sweep["copies"]} == {d.name for d in plan.spec.cluster.devices if d.is_gpu}
    assert all(isinstance(c["wave"], int) for c in sweep["copies"])
    ended = {c["index"]: c for c in report["sweeps"]["hp"]["copies"]}
    word = {"finished": "done", "stopped": "stopped", "failed": "failed:"}
    for copy in sweep["copies"]:
        (loop,) = copy["loops"]
        said = run["loops"][loop]
        assert said["state"].split(" ")[0] == word[ended[copy["index"]]["status"]], (copy, said)
        assert copy["device"] == ended[copy["index"]]["device"] and copy["wave"] == ended[copy["index"]]["wave"]
        if ended[copy["index"]]["status"] != "failed":  # each copy's metric, every step it ran
            curve = ended[copy["index"]]["curves"][0]
            ran = [(s, v) for s, v in zip(curve["steps"], curve["values"]) if v is not None]
            assert [tuple(p) for p in said["series"]["loss"]] == ran
    failed = next(c for c in sweep["copies"] if c["values"]["lr"] == 0.2)
    assert "diverged" in run["loops"][failed["loops"][0]]["state"]
    assert sorted(word[c["status"]] for c in ended.values()) == ["done", "failed:", "stopped", "stopped"]
    (decision,) = [d for d in run["decisions"] if d["sweep"] == "hp"]
    assert decision == {"sweep": "hp", **report["sweeps"]["hp"]["rungs"][0]}  # the run report's rung, as it came


def test_the_page_of_a_remote_run_shows_its_devices(remote_page: Any) -> None:
    page, state, report, plan = remote_page
    names = {d.name for d in plan.spec.cluster.devices}
    planned = {d["name"]: d for d in state["runs"][0]["plan"]["devices"]}
    for memory in plan.memory:
        assert planned[memory.device]["peak"] == memory.peak and planned[memory.device]["cap"] == memory.limit
    # what Dask moved for the run, as the workers' heartbeats said it (the run report's count, from the same
    # transfer logs, drained after the run), and busy samples (one a second); the last heartbeat may be on its way
    dask_moved = report["totals"]["bytes_moved"] - report["totals"]["bytes_exchanged"]
    assert dask_moved > 0
    deadline = time.monotonic() + 30
    while True:
        devices = state_of(page)["devices"]
        moved = sum(d["moved"].get(report["run"], 0) for d in devices.values())
        if set(devices) == names and moved == dask_moved and all(now["busy"] for now in devices.values()):
            break  # (each device's heartbeat since its runtime was installed)
        assert time.monotonic() < deadline, (dask_moved, devices)
        time.sleep(0.5)
    assert any(share > 0 for now in devices.values() for _, share in now["busy"]), {k: v["busy"] for k, v in devices.items()}
    html = fetch(page)
    assert "Bytes stored" in html or "bytes stored" in html
    assert "bytes stored" in state["notes"]["dask_bytes_stored"].lower() or "Bytes stored" in state["notes"]["dask_bytes_stored"]


def test_the_feed_sends_a_loop_of_many_windows_in_few_messages(tmp_path: Path) -> None:
    """Every point reaches the page, a message carries all since the last, and the loop's end goes at once."""
    from orchestrator.execute.live import LiveFeed
    from orchestrator.execute.records import LoopNews

    plan = plan_file(write_spec(tmp_path))
    sent: list[dict[str, Any]] = []
    feed = LiveFeed(plan, "run1", sent.append)
    series: dict[str, list[float]] = {"loss": []}
    for step in range(1, 1001):  # a thousand windows of one step, read as fast as the driver can
        series["loss"].append(1.0 / step)
        feed.loop_progress("fit", step, 1000)
        feed.tell(LoopNews("fit", step, 1000, series, {}, {}))
    assert 2 <= len(sent) < 100, len(sent)  # the plan, what the interval let through, the end
    assert sent[0]["plan"]["name"] == "watched" and sent[0]["run"] == "run1"
    points = [p for message in sent[1:] for p in message["loops"].get("fit", {}).get("series", {}).get("loss", [])]
    assert points == [[step, 1.0 / step] for step in range(1, 1001)]
    ended = [m for m in sent if m.get("loops", {}).get("fit", {}).get("state") == "done"]
    assert ended and ended[-1]["loops"]["fit"]["step"] == 1000


HARNESS = """\
const fs = require("fs");
class El {
  constructor(tag) { this.tag = tag; this.attrs = {}; this.children = []; this.textContent = ""; }
  setAttribute(k, v) { this.attrs[k] = String(v); }
  append(...kids) { this.children.push(...kids); }
  replaceChildren(...kids) { this.children = kids; }
}
global.Node = El;
const made = {};
global.document = {
  createElement: t => new El(t), createElementNS: (ns, t) => new El(t),
  createTextNode: t => { const e = new El("#text"); e.textContent = t; return e; },
  getElementById: id => (made[id] = made[id] || new El("div")),
  querySelector: s => (made[s] = made[s] || new El("tbody")),
};
global.location = {pathname: "/orchestrator/"};
global.fetch = async () => ({json: async () => JSON.parse(fs.readFileSync(process.argv[3]))});
global.setTimeout = () => {};
eval(fs.readFileSync(process.argv[2], "utf8"));
setImmediate(() => {
  const found = [];
  const walk = e => { const a = e.attrs || {}; if (Object.keys(a).some(k => k.startsWith("data-"))) found.push(a);
                      (e.children || []).forEach(walk); };
  Object.values(made).forEach(walk);
  console.log(JSON.stringify({found, status: made["run-status"].textContent}));
});
"""


@pytest.mark.skipif(shutil.which("node") is None, reason="the page's script is run by Node.js, not installed here")
def test_the_pages_script_draws_every_device_loop_and_copy(remote_page: Any, tmp_path: Path) -> None:
    """The page's own script, run over the remote run's state.json with a minimal DOM: the elements it draws
    carry each device, loop and copy, each copy's state, and the rung (a browser test checks the real DOM)."""
    page, state, report, plan = remote_page
    html = fetch(page)
    (tmp_path / "page.js").write_text(html.split("<script>")[1].split("</script>")[0].replace('"use strict";', ""))
    (tmp_path / "state.json").write_text(json.dumps(state))
    (tmp_path / "harness.js").write_text(HARNESS)
    done = subprocess.run(["node", str(tmp_path / "harness.js"), str(tmp_path / "page.js"), str(tmp_path / "state.json")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    drawn = json.loads(done.stdout)
    assert drawn["status"] == "finished"
    found = drawn["found"]
    assert {a["data-device"] for a in found if "data-device" in a} == {d.name for d in plan.spec.cluster.devices}
    assert {a["data-loop"] for a in found if "data-loop" in a} == {loop.name for loop in plan.spec.loops}
    copies = {a["data-copy"]: a["data-state"] for a in found if "data-copy" in a}
    word = {"finished": "done", "stopped": "stopped", "failed": "failed"}
    assert copies == {str(c["index"]): word[c["status"]] for c in report["sweeps"]["hp"]["copies"]}
    assert [a["data-rung"] for a in found if "data-rung" in a] == ["1"]
    fit = next(a for a in found if a.get("data-loop") == "fit")
    assert fit["data-step"] == str(report["loops"]["fit"]["stopped_at_step"])
