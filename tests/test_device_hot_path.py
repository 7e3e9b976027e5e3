"""What an op's per-step path on a device still guarantees once made cheap (runtime.device, the simulated GPU,
the working-directory lease, call's output checks, random draws).

Each fast path skips work only where the result is the same: a value charged already is not charged again,
but a foreign value is still converted and charged, and an array's bytes still go back when it dies; a
user function that changes the directory itself does not change where the next call starts; a declared
shape written as numbers other than ints is still read as ints.
"""

from __future__ import annotations

import gc
import os
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from orchestrator.errors import DeviceOutOfMemory, OpFailedError
from orchestrator.ops.base import KernelError
from orchestrator.ops.kernels import _check_declared, normal, uniform
from orchestrator.runtime.backends import DeviceConfig
from orchestrator.runtime.backends.simulated import SimulatedGPUBackend
from orchestrator.runtime.device import Runtime, execute
from orchestrator.runtime.tasks import OpTask
from orchestrator.runtime.usercode import WorkingDirectory


def gpu(limit: int | None = 1 << 20) -> SimulatedGPUBackend:
    return SimulatedGPUBackend(DeviceConfig("/job:worker/replica:0/task:0/device:GPU:0", "GPU", "simulated", limit))


# ------------------------------------------------------------------ the simulated GPU's charges


def test_a_value_is_charged_once_and_its_bytes_go_back_when_it_dies() -> None:
    backend = gpu()
    a = np.zeros(100)
    assert backend.adopt(a, "a") is a and backend.adopt(a, "a") is a  # the second adopt finds it charged
    assert backend.in_use == 800
    assert backend.to_device(a, "b") is a  # already this device's: no copy
    del a
    gc.collect()
    assert backend.in_use == 0 and backend.peak == 800


def test_a_foreign_value_is_still_converted_and_charged() -> None:
    backend = gpu()
    listed = backend.adopt([1.0, 2.0, 3.0], "a")  # not an array: made one, and charged
    assert isinstance(listed, np.ndarray) and listed.tolist() == [1.0, 2.0, 3.0]
    assert backend.in_use == 24
    host = np.ones(10)
    moved = backend.to_device(host, "b")  # a host array not charged here: copied, the copy charged
    assert moved is not host and np.array_equal(moved, host)
    assert backend.in_use == 24 + 80
    pair = backend.adopt((np.zeros(2), np.zeros(3)), "c")  # a tuple: element by element
    assert isinstance(pair, tuple) and backend.in_use == 24 + 80 + 40


def test_an_id_reused_after_its_array_died_is_charged_anew() -> None:
    """A new array may get a dead one's id: it is charged for itself, not taken for the one charged before."""
    backend = gpu()
    charged = 0
    for _ in range(200):
        a = np.zeros(4)
        backend.adopt(a, "a")
        charged = backend.in_use
        assert charged == 32  # the previous array's bytes went back, this one's were charged
        del a
    assert charged == 32 and backend.in_use == 0


def test_the_cap_still_holds_and_names_the_op() -> None:
    backend = gpu(1000)
    kept = backend.adopt(np.zeros(100), "a")
    with pytest.raises(DeviceOutOfMemory, match="'b'"):
        backend.adopt(np.zeros(100), "b")
    assert backend.in_use == 800 and kept is not None


def test_charges_from_many_threads_add_up() -> None:
    backend = gpu(None)
    kept: list[np.ndarray] = []
    lock = threading.Lock()

    def charge() -> None:
        for _ in range(200):
            a = backend.adopt(np.zeros(8), "a")
            with lock:
                kept.append(a)

    threads = [threading.Thread(target=charge) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert backend.in_use == 4 * 200 * 64
    kept.clear()
    gc.collect()
    assert backend.in_use == 0


# ------------------------------------------------------------------ execute: records, values


def test_execute_records_each_step_and_keeps_values_bitwise() -> None:
    runtime = Runtime.for_device(DeviceConfig("/job:worker/replica:0/task:0/device:GPU:0", "GPU", "simulated",
                                              1 << 20))
    task = OpTask("x", "random.uniform", {"shape": [50], "low": -10.0, "high": 10.0, "seed": 7}, 0, run="r",
                  stream=(1,))
    values = [execute(task, runtime, None, (), step, log=False) for step in range(3)]
    for step, value in enumerate(values):  # the stream NumPy draws from (seed, copy, step)
        assert np.array_equal(value, np.random.default_rng([7, 1, step]).uniform(-10.0, 10.0, size=(50,)))
    record = runtime.records[("r", "x", "op")]
    assert record["count"] == 3 and record["bytes"] == 400 and record["error"] == ""
    assert record["end"] >= record["start"] and record["ran_on"] == runtime.config.name
    assert runtime.backend.stats()["in_use"] == 3 * 400


def test_a_draw_of_another_dtype_is_still_converted() -> None:
    class Context:
        xp, step, stream = np, 4, (0,)

    p = {"shape": [5], "seed": 3, "dtype": "float32"}
    drawn = uniform(Context(), p)  # type: ignore[arg-type]
    assert drawn.dtype == np.float32
    assert np.array_equal(drawn, np.random.default_rng([3, 0, 4]).uniform(0.0, 1.0, size=(5,)).astype("float32"))
    assert normal(Context(), {"shape": [2], "seed": 3}).dtype == np.float64  # type: ignore[arg-type]


# ------------------------------------------------------------------ call's declared outputs


def test_a_declared_shape_is_checked_as_ints_however_written() -> None:
    p = {"fn": "m:f"}
    _check_declared(p, np.zeros(3), {"shape": [3]}, None)
    _check_declared(p, np.zeros(3), {"shape": ["3"]}, None)  # as ints, as it means
    _check_declared(p, np.zeros((2, 3)), {"shape": [2, 3], "dtype": "float64"}, None)
    with pytest.raises(KernelError, match=r"returned shape \[3\] float64, but the op declares output \[4\]"):
        _check_declared(p, np.zeros(3), {"shape": [4]}, None)
    with pytest.raises(KernelError, match=r"declares output \[3\] float32"):
        _check_declared(p, np.zeros(3), {"shape": [3], "dtype": "float32"}, 1)


# ------------------------------------------------------------------ the working directory


def test_a_call_that_changes_directory_itself_does_not_move_the_next_one(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The directory is the spec's folder at the start of every call, and what it was once the last returns,
    whatever a call did with it in between."""
    home, spec, elsewhere = (tmp_path / name for name in ("home", "spec", "elsewhere"))
    for folder in (home, spec, elsewhere):
        folder.mkdir()
    monkeypatch.chdir(home)
    lease = WorkingDirectory()
    for _ in range(3):
        with lease.lent(str(spec)):
            assert os.getcwd() == str(spec)
            os.chdir(elsewhere)  # the user's own chdir
        assert os.getcwd() == str(home)


def test_a_call_that_fails_to_enter_its_folder_lets_the_next_one_in(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    home, spec = tmp_path / "home", tmp_path / "spec"
    home.mkdir()
    spec.mkdir()
    monkeypatch.chdir(home)
    lease = WorkingDirectory()
    with pytest.raises(OSError):
        with lease.lent(str(tmp_path / "missing")):
            pass
    with lease.lent(str(spec)):
        assert os.getcwd() == str(spec)
    assert os.getcwd() == str(home)


# ------------------------------------------------------------------ an op's context and call's plan, kept across steps

PROBE = '''
import os
import numpy as np

RUNTIME = None
calls = []

def step(x, xp, scale=1.0):
    calls.append((os.getcwd(), dict(RUNTIME.running) if RUNTIME is not None else {}))
    os.chdir(os.path.dirname(os.getcwd()))  # the user's own chdir: the next call starts in its folder again
    n = len(calls)
    if n == 3:
        return (x * scale).astype("float32")  # the declared dtype broken at the third step
    if n == 4:
        return np.zeros(5)  # the declared shape broken
    if n == 5:
        return np.array(["a"], dtype=object)
    if n == 6:
        raise ValueError("bad step")
    return x * scale
'''


def _probe(tmp_path: Path, name: str) -> tuple[Path, OpTask]:
    """A spec's folder holding the user module ``name``, and a call op of its function."""
    spec = tmp_path / "spec"
    spec.mkdir()
    (spec / f"{name}.py").write_text(PROBE)
    task = OpTask("c", "call", {"fn": f"{name}:step", "params": {"scale": 2.0},
                                "output": {"shape": [4], "dtype": "float64"}}, 1, run="r", base_dir=str(spec))
    return spec, task


def test_a_call_kept_across_steps_still_checks_charges_lends_and_names_each_step(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The context and the function are worked out once per op and device; every step is still checked
    (declared dtype and shape, numbers), charged, recorded, lent the spec's folder and shown as running."""
    runtime = Runtime.for_device(DeviceConfig("/job:worker/replica:0/task:0/device:GPU:0", "GPU", "simulated",
                                              1 << 20))
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.chdir(home)
    spec, task = _probe(tmp_path, "hot_probe_a")
    foreign = np.ones(4)
    first = execute(task, runtime, None, (foreign,), 1, log=False)
    probe = sys.modules["hot_probe_a"]
    probe.RUNTIME = runtime  # type: ignore[attr-defined]
    second = execute(task, runtime, None, (foreign,), 2, log=False)
    assert np.array_equal(first, foreign * 2.0) and np.array_equal(second, foreign * 2.0)
    assert runtime.backend.stats()["in_use"] == 3 * 32  # the foreign input charged once, each result
    assert [cwd for cwd, _ in probe.calls] == [str(spec)] * 2 and os.getcwd() == str(home)
    assert list(probe.calls[1][1].values()) == ["c"] and runtime.running == {}
    assert runtime.records[("r", "c", "op")]["count"] == 2 and runtime.busy > 0
    for step, said in ((3, r"returned shape \[4\] float32, but the op declares output \[4\] float64"),
                       (4, r"returned shape \[5\] float64"), (5, "returned an array of object"),
                       (6, r"ValueError: bad step")):
        with pytest.raises(OpFailedError, match=said) as raised:
            execute(task, runtime, None, (foreign,), step, log=False)
        assert raised.value.op == "c" and "GPU:0" in str(raised.value)
    assert "hot_probe_a.py:" in str(raised.value)  # the user's file and line
    assert runtime.records[("r", "c", "failed")]["count"] == 4 and os.getcwd() == str(home)


def test_a_context_in_use_elsewhere_gives_this_step_its_own() -> None:
    """An op whose context another thread holds (an op abandoned past its timeout) runs with one of its own,
    with this step's stream; each device an op runs on has its own."""
    gpu_config = DeviceConfig("/job:worker/replica:0/task:0/device:GPU:0", "GPU", "simulated", 1 << 20)
    runtime, other = Runtime.for_device(gpu_config), Runtime.for_device(gpu_config)
    task = OpTask("x", "random.uniform", {"shape": [5], "seed": 3}, 0, run="r", stream=(1,))
    execute(task, runtime, None, (), 0, log=False)
    held = task.__dict__["_context"]
    assert held.claim.acquire(False)
    try:
        drawn = execute(task, runtime, None, (), 7, log=False)
    finally:
        held.claim.release()
    assert np.array_equal(drawn, np.random.default_rng([3, 1, 7]).uniform(0.0, 1.0, size=(5,)))
    assert held.step == 0  # untouched while held
    kept = execute(task, other, None, (), 8, log=False)
    assert task.__dict__["_context"].runtime is other and other.backend.stats()["in_use"] == kept.nbytes == 40
