"""Tests of the plan without some devices (``orchestrate plan SPEC --without DEVICE``), the planning side of
``run.on_device_lost: replan``.

Each case writes a real spec, plans it through the real CLI in-process (text or JSON), and reads what the
re-plan says: patterns and ``replicate`` over ``/gpu:*`` shrink, a sweep's copies of a lost device move to
the others within their caps while the rest stay, an op pinned to a lost device is named (and moved under soft
placement), and a device whose peak no longer fits is said. ``plan`` never imports ``distributed``.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from orchestrator import api
from orchestrator.cli import run_cli
from orchestrator.errors import UsageError

from spec_helpers import write

W = "/job:worker/replica:0/task:0/device:"

TOWERS = """\
    version: 1
    name: towers
    cluster:
      jobs:
        worker: {gpus: 4, gpu_memory: {limit: LIMIT}}
    PLACEMENT
    graph:
      - {name: x, op: ones, shape: [12, 4096], device: /cpu:0}
      - name: towers
        replicate:
          devices: /job:worker/gpu:*
          split: {x: 0}
          body:
            - {name: y, op: square, inputs: [x]}
            - {name: s, op: sum, inputs: [y]}
          combine: {s: mean}
          combine_device: /cpu:0
    PINNED
    outputs:
      towers.s: "-"
    """

SWEEP = """\
    version: 1
    name: sweep
    cluster:
      jobs:
        worker: {gpus: 4, gpu_threads: 2, gpu_memory: {limit: 300KiB}}
    graph:
      - {name: x, op: ones, shape: [16384], device: /cpu:0}
      - name: s
        sweep:
          grid: {lam: [1, 2, 3, 4, 5, 6, 7, 8]}
          spread: /job:worker/gpu:*
          body:
            - {name: y, op: mul, inputs: [x, lam]}
            - {name: t, op: sum, inputs: [y]}
          gather: {totals: t}
    outputs:
      s.totals: "-"
    """


def towers(tmp_path: Path, limit: str = "1MiB", pinned: bool = False, soft: bool = False) -> Path:
    text = TOWERS.replace("LIMIT", limit).replace("PLACEMENT", "placement: {soft: true}" if soft else "")
    text = text.replace("PINNED", "  - {name: p, op: ones, shape: [2], device: /job:worker/task:0/device:GPU:3}"
                        if pinned else "")
    return write(tmp_path, text)


def plan(argv: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    code = run_cli(["plan", *argv], out=out)
    return code, out.getvalue()


def replan_json(spec: Path, *without: str) -> tuple[int, dict[str, Any]]:
    code, text = plan([str(spec), "--format", "json", *(a for d in without for a in ("--without", d))])
    return code, json.loads(text)


def devices_of(plan_dict: dict[str, Any]) -> dict[str, str]:
    return {op["name"]: op["device"] for op in plan_dict["ops"]}


def test_replicate_over_four_gpus_shrinks_to_three_and_reweighs(tmp_path: Path) -> None:
    spec = towers(tmp_path)
    code, out = replan_json(spec, f"{W}GPU:3")
    assert code == 0 and out["ok"] and out["without"] == [f"{W}GPU:3"]
    placed = devices_of(out["plan"])
    assert [placed[f"towers/{i}/y"] for i in range(3)] == [f"{W}GPU:{i}" for i in range(3)]
    assert "towers/3/y" not in placed
    assert out["plan"]["cluster"]["devices"] == [f"{W}CPU:0", *(f"{W}GPU:{i}" for i in range(3))]
    diff = out["diff"]
    assert sorted(e["name"] for e in diff["removed"]) == ["towers/3/s", "towers/3/y"] and diff["moved"] == []
    gone = next(m for m in diff["memory"] if m["device"] == f"{W}GPU:3")
    assert gone["before_bytes"] > 0 and gone["after_bytes"] is None
    # 12 rows over 3 towers: the mean weighs each tower by its rows, 4 of 12 each (3 of 12 each before)
    checked = api.check_file(spec, without=[f"{W}GPU:3"])
    assert checked.plan is not None
    assert checked.plan.spec.op("towers.s").params["weights"] == [4, 4, 4]
    assert api.check_file(spec).plan.spec.op("towers.s").params["weights"] == [3, 3, 3, 3]  # type: ignore[union-attr]


def test_a_lost_gpu_in_the_middle_moves_the_towers_after_it(tmp_path: Path) -> None:
    code, out = replan_json(towers(tmp_path), "/job:worker/task:0/device:GPU:1")  # a short name: canonical
    assert code == 0 and out["without"] == [f"{W}GPU:1"]
    placed = devices_of(out["plan"])
    assert [placed[f"towers/{i}/y"] for i in range(3)] == [f"{W}GPU:0", f"{W}GPU:2", f"{W}GPU:3"]
    moved = {m["name"]: (m["before"], m["after"]) for m in out["diff"]["moved"]}
    assert moved["towers/1/y"] == (f"{W}GPU:1", f"{W}GPU:2") and moved["towers/2/y"] == (f"{W}GPU:2", f"{W}GPU:3")


def test_a_sweeps_copies_on_a_lost_gpu_move_to_the_others_within_their_caps(tmp_path: Path) -> None:
    spec = write(tmp_path, SWEEP)
    full = api.plan_file(spec)
    code, out = replan_json(spec, f"{W}GPU:3")
    assert code == 0 and out["ok"]
    replanned = api.check_file(spec, without=[f"{W}GPU:3"]).plan
    assert replanned is not None
    before = {c.index: c.device for c in full.packing[0].copies}
    after = {c.index: c.device for c in replanned.packing[0].copies}
    lost = [i for i, d in before.items() if d == f"{W}GPU:3"]
    assert lost == [3, 7]
    assert all(after[i] == before[i] for i in before if i not in lost)  # the others stay where they were
    assert [after[i] for i in lost] == [f"{W}GPU:0", f"{W}GPU:1"]  # in turn over the devices left
    for device in replanned.packing[0].devices:  # within caps: each wave of a device fits under its limit
        assert device.limit is not None and device.peak <= device.limit
        assert device.waves * device.at_once >= device.copies
    assert replanned.packing[0].device(f"{W}GPU:0").copies == 3  # type: ignore[union-attr]
    moved = sorted(m["name"] for m in out["diff"]["moved"])
    assert moved == ["s/3/lam", "s/3/t", "s/3/y", "s/7/lam", "s/7/t", "s/7/y"]
    assert all("moved off lost" in m["why"] for m in out["diff"]["moved"])


def test_an_op_pinned_to_the_lost_device_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = towers(tmp_path, pinned=True)
    monkeypatch.chdir(tmp_path)  # the file as a user types it: the diagnostics echo it
    code, text = plan(["spec.yaml", "--without", f"{W}GPU:3"])
    assert code == 1
    assert (f"spec.yaml:18:45: graph[2].device: op 'p' is placed on {W}GPU:3 (from op), which this plan is "
            f"without (pin it to a device still there, or set placement.soft: true to move it)") in text
    assert "no diff: the re-plan could not place every op" in text
    code, out = replan_json(spec, f"{W}GPU:3")
    assert code == 1 and not out["ok"] and out["diff"] is None
    assert [d["code"] for d in out["diagnostics"]] == ["placement"]


def test_soft_placement_moves_a_pinned_op_off_the_lost_device(tmp_path: Path) -> None:
    code, out = replan_json(towers(tmp_path, pinned=True, soft=True), f"{W}GPU:3")
    assert code == 0 and out["ok"]
    moved = {m["name"]: m for m in out["diff"]["moved"]}
    assert (moved["p"]["before"], moved["p"]["after"]) == (f"{W}GPU:3", f"{W}GPU:0")
    assert "soft fallback" in moved["p"]["why"] and "which this plan is without" in moved["p"]["why"]


def test_what_no_longer_fits_on_the_devices_left_is_said(tmp_path: Path) -> None:
    spec = towers(tmp_path, limit="200KiB")  # 3 rows of 4096 float64 and their squares fit; 4 rows do not
    assert api.check_file(spec).errors == ()
    code, text = plan([str(spec), "--without", f"{W}GPU:3"])
    assert code == 1
    assert "the re-plan does not hold (3 errors):" in text
    assert (f"op 'towers/0/y' takes {W}GPU:0 over its limit of 200.0 KiB: 256.0 KiB at the peak") in text
    grown = [line.split() for line in text.splitlines() if line.startswith(f"  {W}GPU:")]  # the diff's memory
    assert grown[0] == [f"{W}GPU:0", "192.0", "KiB", "->", "256.0", "KiB", "+64.0", "KiB"]
    assert grown[-1][0] == f"{W}GPU:3" and " ".join(grown[-1]).endswith("-192.0 KiB (no longer used)")


def test_a_device_the_cluster_lacks_is_a_usage_error_with_the_closest_name(tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    spec = towers(tmp_path)
    code, text = plan([str(spec), "--without", "/job:worker/task:0/device:GPU:4"])
    assert code == 2 and text == ""
    err = capsys.readouterr().err
    assert ("--without /job:worker/task:0/device:GPU:4: the cluster has no such device (did you mean "
            f"'{W}GPU:3'?)") in err
    with pytest.raises(UsageError, match="no device would be left"):
        api.replan_file(spec, ["/job:worker"])
    code, _ = plan([str(spec), "--without", f"{W}GPU:3", "--diff", str(spec)])
    assert code == 2


def test_a_whole_task_can_be_left_out_by_its_pattern(tmp_path: Path) -> None:
    spec = write(tmp_path, TOWERS.replace("worker: {gpus: 4, gpu_memory: {limit: LIMIT}}",
                                          "worker: {tasks: 2, gpus: 2}").replace("PLACEMENT", "")
                 .replace("PINNED", ""))
    replan = api.replan_file(spec, ["/job:worker/task:1"])
    assert replan.lost == ("/job:worker/replica:0/task:1/device:CPU:0", "/job:worker/replica:0/task:1/device:GPU:0",
                           "/job:worker/replica:0/task:1/device:GPU:1")
    assert replan.diff is not None and not replan.checked.errors
    assert sorted(e.op for e in replan.diff.removed) == ["towers/2/s", "towers/2/y", "towers/3/s", "towers/3/y"]


def test_plan_without_imports_neither_distributed_nor_user_code(tmp_path: Path) -> None:
    spec = towers(tmp_path)
    code = ("import sys; from orchestrator.cli import run_cli; "
            f"rc = run_cli(['plan', {str(spec)!r}, '--without', '/gpu:3']); "
            "assert rc == 0, rc; assert 'distributed' not in sys.modules, 'distributed imported'")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "re-plan of 'towers'" in done.stdout


DATA_PARALLEL = """\
    version: 1
    name: dp
    cluster:
      jobs:
        worker: {gpus: 4}
    graph:
      - {name: x, op: random.normal, shape: [10, 3], seed: 3, device: /cpu:0}
      - {name: w, op: random.normal, shape: [3, 1], seed: 4, device: /cpu:0}
      - name: towers
        replicate:
          devices: /job:worker/gpu:*
          split: {x: 0}
          broadcast: [w]
          body:
            - {name: p, op: matmul, inputs: [x, w]}
            - {name: sq, op: square, inputs: [p]}
            - {name: loss, op: mean, inputs: [sq]}
          combine: {loss: mean}
          combine_device: /cpu:0
    outputs:
      towers.loss: "-"
    """


def test_the_weighted_mean_of_fewer_towers_is_the_same_loss(tmp_path: Path) -> None:
    """10 rows: 3, 3, 2, 2 over 4 towers, 4, 3, 3 over 3, all 10 on one; the combine weighs each by its rows."""
    spec = write(tmp_path, DATA_PARALLEL)
    settings = api.RunSettings(sync=True)
    losses = []
    for without in ([], [f"{W}GPU:3"], [f"{W}GPU:1", f"{W}GPU:2", f"{W}GPU:3"]):
        checked = api.check_file(spec, without=without)
        assert checked.plan is not None and not checked.errors
        towers_made = sum(1 for op in checked.plan.spec.ops if op.scope.indices and op.kind == "mean")
        assert towers_made == 4 - len(without)
        losses.append(float(api.run_plan(checked.plan, settings, echo=lambda _: None).values["towers.loss"]))
    assert losses[0] == pytest.approx(losses[1], rel=1e-12) and losses[0] == pytest.approx(losses[2], rel=1e-12)


def test_run_on_device_lost_is_recorded_and_fail_by_default(tmp_path: Path) -> None:
    plain = api.plan_file(write(tmp_path, "version: 1\ngraph:\n  - {name: a, op: ones, shape: [2]}\n", "a.yaml"))
    assert plain.spec.run.on_device_lost == "fail"
    asked = api.check_file(write(tmp_path, "version: 1\nrun: {on_device_lost: replan}\n"
                                           "graph:\n  - {name: a, op: ones, shape: [2]}\n", "b.yaml"))
    assert asked.spec is not None and asked.spec.run.on_device_lost == "replan"
    assert not asked.warnings and asked.spec.run.replan_after == 20.0  # a run acts on it (execute.replanning)


def test_on_device_lost_wait_is_not_warned_about(tmp_path: Path) -> None:
    """wait is done by a run (tests/test_lost_worker.py), as replan is (tests/test_replan_run.py): no warning."""
    asked = api.check_file(write(tmp_path, "version: 1\nrun: {on_device_lost: wait}\n"
                                           "graph:\n  - {name: a, op: ones, shape: [2]}\n", "c.yaml"))
    assert asked.spec is not None and asked.spec.run.on_device_lost == "wait" and not asked.warnings
