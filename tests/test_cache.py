"""The cache: values reused while what made them is unchanged, and runs that say why they computed again.

Every test runs real specs on real embedded clusters, with the cache in the
test's own directory (``.orchestrate/cache`` beside the spec).
"""

from __future__ import annotations

import io
import json
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from orchestrator import run_file
from orchestrator.api import plan_file
from orchestrator.cache import Cache, compute_keys
from orchestrator.cli import run_cli
from orchestrator.report import placement_summary

pytestmark = pytest.mark.cluster

SPEC = """\
    version: 1
    cache: true
    cluster: {jobs: {localhost: {gpus: 2}}}
    graph:
      - {name: a, op: random.uniform, shape: [4], seed: 3, device: /cpu:0}
      - {name: b, op: mul, inputs: [a], scalar: 2.0, device: /gpu:0}
      - {name: c, op: add, inputs: [b], scalar: 1.0, device: /cpu:0}
      - {name: other, op: ones, shape: [4], device: /cpu:0}
      - {name: d, op: add, inputs: [other, a], device: /cpu:0}
    outputs: {c: "-", d: "-"}
    """


def _spec(tmp_path: Path, text: str = SPEC, name: str = "spec.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def _run(path: Path, **settings: Any) -> tuple[Any, dict[str, dict[str, Any]], list[str]]:
    lines: list[str] = []
    result = run_file(path, echo=lines.append, **settings)
    return result, {e["name"]: e for e in result.report["ops"]}, lines


def _ran(ops: dict[str, dict[str, Any]]) -> set[str]:
    return {name for name, e in ops.items() if e["worker"] is not None}


def test_an_unchanged_spec_runs_no_cached_op_the_second_time(tmp_path: Path) -> None:
    path = _spec(tmp_path)
    first, ops1, _ = _run(path)
    second, ops2, lines = _run(path)
    assert _ran(ops1) == {"a", "b", "c", "other", "d"}
    assert _ran(ops2) == set()
    for name in ("c", "d"):
        np.testing.assert_array_equal(first.values[name], second.values[name])
    assert all(e["cache"].startswith("reused from the cache (entry ") for e in ops2.values())
    assert ops1["b"]["cache"] == "ran: no entry (never computed with the cache on)"
    assert any(line.startswith("cache: 5 reused, 0 to compute (") and line.endswith(".orchestrate/cache)")
               for line in lines), lines


def test_a_changed_parameter_reruns_exactly_its_op_and_descendants_and_says_which(tmp_path: Path) -> None:
    path = _spec(tmp_path)
    _run(path)
    path.write_text(path.read_text().replace("scalar: 2.0", "scalar: 3.0"))
    result, ops, lines = _run(path)
    assert _ran(ops) == {"b", "c"}
    assert ops["b"]["cache"] == "ran: parameter 'scalar' changed"
    assert ops["c"]["cache"] == "ran: input 'b' changed"
    assert "cache: 'b' runs again: parameter 'scalar' changed" in lines
    a = np.random.default_rng([3, 0]).uniform(0, 1, 4)
    np.testing.assert_array_equal(result.values["c"], a * 3.0 + 1.0)


def test_a_value_made_on_one_gpu_serves_another(tmp_path: Path) -> None:
    path = _spec(tmp_path)
    _run(path)
    path.write_text(path.read_text().replace("scalar: 2.0, device: /gpu:0", "scalar: 2.0, device: /gpu:1"))
    _, ops, _ = _run(path)
    assert _ran(ops) == set() and ops["b"]["planned_device"].endswith("GPU:1")


FN = """\
    version: 1
    graph:
      - {name: x, op: ones, shape: [3]}
      - {name: f, op: call, fn: "userfns:scale", inputs: [x], cache: true}
    outputs: {f: "-"}
    """


def test_editing_a_call_functions_source_reruns_it(tmp_path: Path) -> None:
    (tmp_path / "userfns.py").write_text("def scale(x, xp):\n    return x * 2\n")
    path = _spec(tmp_path, FN)
    _, ops1, _ = _run(path)
    _, ops2, _ = _run(path)
    assert "f" in _ran(ops1) and "f" not in _ran(ops2)
    (tmp_path / "userfns.py").write_text("def scale(x, xp):\n    return x * 5\n")
    result, ops3, _ = _run(path)
    assert "f" in _ran(ops3) and ops3["f"]["cache"] == "ran: fn source changed"
    np.testing.assert_array_equal(result.values["f"], np.full(3, 5.0))


def test_a_corrupted_entry_is_refused_and_recomputed(tmp_path: Path) -> None:
    path = _spec(tmp_path)
    first, _, _ = _run(path)
    key = compute_keys(plan_file(path), str(tmp_path)).ops["c"].key
    entry = next((tmp_path / ".orchestrate" / "cache" / "entries").rglob(f"{key}.npz"))
    data = bytearray(entry.read_bytes())
    data[-40:-30] = b"\xff" * 10  # flip bytes of the stored array
    entry.write_bytes(bytes(data))
    second, ops, lines = _run(path)
    assert _ran(ops) == {"c"}
    assert any(line.startswith("warning: cache entry for 'c'") and "ignored" in line for line in lines), lines
    np.testing.assert_array_equal(first.values["c"], second.values["c"])


def test_a_foreign_entry_is_never_loaded(tmp_path: Path) -> None:
    path = _spec(tmp_path)
    _run(path)
    keys = compute_keys(plan_file(path), str(tmp_path)).ops
    root = tmp_path / ".orchestrate" / "cache" / "entries"
    c_entry, b_entry = (next(root.rglob(f"{keys[n].key}.npz")) for n in ("c", "b"))
    c_entry.write_bytes(b_entry.read_bytes())  # b's entry under c's name: its header names b's key
    _, ops, lines = _run(path)
    assert "c" in _ran(ops)
    assert any("belongs to another key" in line for line in lines)


def test_random_ops_without_a_seed_and_loops_as_a_whole(tmp_path: Path) -> None:
    path = _spec(tmp_path, """\
        version: 1
        cache: true
        graph:
          - {name: noise, op: random.normal, shape: [2]}
          - {name: w0, op: zeros, shape: [2]}
          - name: train
            iterate:
              steps: 5
              state: {w: w0}
              body:
                - {name: w1, op: add, inputs: [w], scalar: 1.0}
                - {name: s1, op: sum, inputs: [w1]}
              update: {w: w1}
              metrics: {s: s1}
        outputs: {train.w: "-", train.s: "-", noise: "-"}
        """)
    first, ops1, _ = _run(path)
    second, ops2, _ = _run(path)
    assert ops1["noise"]["cache"] == "ran: not cached: a random op is cached only with a fixed seed"
    assert _ran(ops2) == {"noise"}  # the loop came from the cache, whole
    assert ops2["train/w1"]["note"].startswith("loop 'train' reused from the cache (entry ")
    np.testing.assert_array_equal(second.values["train.w"], np.full(2, 5.0))
    np.testing.assert_array_equal(first.values["train.s"], second.values["train.s"])


def test_a_loaded_files_change_reruns_its_load(tmp_path: Path) -> None:
    np.save(tmp_path / "x.npy", np.arange(3.0))
    path = _spec(tmp_path, """\
        version: 1
        cache: true
        graph:
          - {name: x, op: load, path: x.npy, shape: [3]}
          - {name: y, op: mul, inputs: [x], scalar: 2.0}
        outputs: {y: "-"}
        """)
    _run(path)
    time.sleep(0.01)
    np.save(tmp_path / "x.npy", np.arange(3.0) + 1)
    result, ops, _ = _run(path)
    assert _ran(ops) == {"x", "y"} and ops["x"]["cache"] == "ran: file of 'path' changed"
    np.testing.assert_array_equal(result.values["y"], (np.arange(3.0) + 1) * 2)


RESUME = """\
    version: 1
    graph:
      - {name: a, op: random.uniform, shape: [4], seed: 1}
      - {name: b, op: mul, inputs: [a], scalar: 2.0}
      - {name: slow, op: call, fn: "napper:nap", inputs: [b], params: {seconds: SECONDS, marker: "MARKER"}}
      - {name: d, op: add, inputs: [slow], scalar: 1.0}
    outputs: {d: "-"}
    """


def test_resume_after_a_run_killed_midway_runs_only_what_was_left(tmp_path: Path) -> None:
    (tmp_path / "napper.py").write_text(
        "import time\n"
        "def nap(x, xp, seconds=0.0, marker=''):\n"
        "    open(marker, 'w').close()\n"
        "    time.sleep(seconds)\n"
        "    return x\n")
    marker = tmp_path / "started"
    path = _spec(tmp_path, RESUME.replace("SECONDS", "60").replace("MARKER", str(marker)))
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator", "run", str(path), "--resume"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    cache = Cache(str(tmp_path / ".orchestrate" / "cache"))
    deadline = time.monotonic() + 120
    while (not marker.exists() or len(list(cache.entries())) < 2) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert marker.exists(), proc.stderr.read() if proc.poll() is not None else "the slow op never started"
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    assert sorted(e["what"] for e in cache.entries()) == ["a", "b"]
    path.write_text(path.read_text().replace("seconds: 60", "seconds: 0"))  # (only the slow op's key changes)
    result, ops, _ = _run(path, resume=True)
    assert _ran(ops) == {"slow", "d"}
    a = np.random.default_rng([1, 0]).uniform(0, 1, 4)
    np.testing.assert_array_equal(result.values["d"], a * 2 + 1)


def test_cache_list_and_clear(tmp_path: Path) -> None:
    path = _spec(tmp_path)
    _run(path)
    out = io.StringIO()
    assert run_cli(["cache", "list", str(path), "--format", "json"], out=out) == 0
    assert sorted(e["what"] for e in json.loads(out.getvalue())) == ["a", "b", "c", "d", "other"]
    out = io.StringIO()
    assert run_cli(["cache", "list", str(path)], out=out) == 0
    assert out.getvalue().splitlines()[-1].startswith("5 entries, ")
    out = io.StringIO()
    assert run_cli(["cache", "clear", str(path)], out=out) == 0
    assert out.getvalue().startswith("removed 5 entries")
    _, ops, _ = _run(path)
    assert _ran(ops) == {"a", "b", "c", "other", "d"}
    assert ops["b"]["cache"] == "ran: no entry (it was cleared, or never finished)"


def test_no_cache_neither_reads_nor_writes(tmp_path: Path) -> None:
    path = _spec(tmp_path)
    _run(path, use_cache=False)
    assert not (tmp_path / ".orchestrate").exists()


SCOPES = """\
    version: 1
    cache: true
    placement: {log: true}
    cluster: {jobs: {localhost: {gpus: 2}}}
    graph:
      - {name: x, op: random.uniform, shape: [3], seed: 5, cache: false}
      - {name: t, op: mul, inputs: [x], scalar: 2.0}
      - name: towers
        cache: false
        replicate:
          devices: ["/gpu:0", "/gpu:1"]
          body:
            - {name: y, op: add, inputs: [t], scalar: 1.0}
    outputs: {t: "-", towers/0/y: "-"}
    """


def test_the_innermost_cache_setting_wins_and_ops_read_only_by_cached_values_do_not_run(tmp_path: Path) -> None:
    path = _spec(tmp_path, SCOPES)
    first, ops1, _ = _run(path)
    assert {e["what"] for e in Cache(str(tmp_path / ".orchestrate" / "cache")).entries()} == {"t"}
    second, ops2, lines = _run(path)
    # x (cache: false) is read only by t, which came from the cache: x is not run; the towers are not cached
    assert _ran(ops2) == {"towers/0/y", "towers/1/y"}
    assert ops2["x"]["note"] == "not run: every op reading it came from the cache"
    assert ops2["t"]["cache"].startswith("reused from the cache")
    assert any(line.startswith("Cached op t reused: reused from the cache (entry ") for line in lines), lines
    summary = placement_summary(second.report)
    assert "1 op from the cache" in summary, summary
    np.testing.assert_array_equal(second.values["towers/0/y"], first.values["towers/0/y"])
    x = np.random.default_rng([5, 0]).uniform(0, 1, 3)
    np.testing.assert_array_equal(second.values["towers/0/y"], x * 2.0 + 1.0)
