"""User code in `call` ops: relative paths mean the spec's folder, errors show the user's frame first,
and a function that cannot take what `call` passes gets a one-line hint naming the op and the function.

The runs start real embedded clusters; the client runs from another directory than the spec's.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest

from orchestrator import run_file
from orchestrator.errors import OpFailedError
from orchestrator.runtime.usercode import WorkingDirectory

ROOT = Path(__file__).resolve().parent.parent

FNS = '''
import os
import numpy as np

def scaled(x, xp):
    return xp.asarray(np.load("data/x.npy")) * x

def accumulate(w, xp):
    with open("data/step.txt") as handle:
        return w + float(handle.read())

def missing(x, xp):
    return np.load("data/missing.npy")

def noxp(x):
    return x

def needs_scale(x, xp, scale):
    return x * scale

def own_type_error(x, xp):
    return len(x, 2)
'''


def quiet(_: str) -> None:
    pass


def _spec_folder(root: Path) -> Path:
    """A spec's folder: its user module and its data; the spec files are written by each test."""
    folder = root / "spec"
    (folder / "data").mkdir(parents=True)
    np.save(folder / "data" / "x.npy", np.arange(4.0))
    (folder / "data" / "step.txt").write_text("1.5")
    (folder / "fns.py").write_text(FNS)
    return folder


def _write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text))
    return path


def _elsewhere(root: Path) -> Path:
    other = root / "elsewhere"
    other.mkdir()
    return other


@pytest.mark.cluster
@pytest.mark.parametrize("granularity", ["partition", "op"])
def test_relative_paths_in_user_code_mean_the_spec_folder(tmp_path: Path, granularity: str,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The client runs elsewhere (the workers start there too): ops and a loop's steps read data/ beside the spec."""
    folder = _spec_folder(tmp_path)
    spec = _write(folder / "rel.yaml", """
        version: 1
        graph:
          - {name: two, op: fill, shape: [4], value: 2.0}
          - {name: y, op: call, fn: "fns:scaled", inputs: [two]}
          - {name: w0, op: fill, shape: [4], value: 0.0}
          - name: acc
            iterate:
              steps: 3
              state: {w: w0}
              body:
                - {name: next, op: call, fn: "fns:accumulate", inputs: [w]}
              update: {w: next}
        outputs: {y: "-", acc.w: "-"}
        """)
    elsewhere = _elsewhere(tmp_path)
    monkeypatch.chdir(elsewhere)
    result = run_file(spec, echo=quiet, granularity=granularity)
    np.testing.assert_array_equal(np.asarray(result.values["y"]), 2.0 * np.arange(4.0))
    np.testing.assert_array_equal(np.asarray(result.values["acc.w"]), np.full(4, 4.5))
    assert os.getcwd() == str(elsewhere)  # the client's own directory is untouched


@pytest.mark.cluster
def test_an_error_in_user_code_shows_the_users_line_first(tmp_path: Path) -> None:
    """The CLI, run from another directory: the first frame shown is the user's, NumPy's only after it."""
    folder = _spec_folder(tmp_path)
    _write(folder / "missing.yaml", """
        version: 1
        graph:
          - {name: x, op: ones, shape: [2]}
          - {name: reader, op: call, fn: "fns:missing", inputs: [x]}
        outputs: {reader: "-"}
        """)
    done = subprocess.run([sys.executable, "-m", "orchestrator", "run", "../spec/missing.yaml", "--no-progress"],
                          cwd=_elsewhere(tmp_path), capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    error = next(i for i, line in enumerate(lines) if line.startswith("error:"))
    assert lines[error].startswith("error: op 'reader' failed on /job:localhost/replica:0/task:0/device:CPU:0: "
                                   "FileNotFoundError: ")
    assert f"(relative paths are the spec's folder, {folder})" in lines[error]
    line = FNS.splitlines().index('    return np.load("data/missing.npy")') + 1
    assert lines[error + 1] == f'  at {folder / "fns.py"}:{line} in missing: return np.load("data/missing.npy")'
    assert lines[error + 2].startswith("  raised in ") and "numpy" in lines[error + 2]


@pytest.mark.cluster
def test_a_function_that_cannot_take_what_call_passes_gets_a_one_line_hint(tmp_path: Path) -> None:
    folder = _spec_folder(tmp_path)
    spec = _write(folder / "noxp.yaml", """
        version: 1
        graph:
          - {name: x, op: ones, shape: [2]}
          - {name: plain, op: call, fn: "fns:noxp", inputs: [x]}
        outputs: {plain: "-"}
        """)
    with pytest.raises(OpFailedError) as info:
        run_file(spec, echo=quiet)
    text = str(info.value)
    assert "\n" not in text
    assert text.startswith("op 'plain' failed on /job:localhost/replica:0/task:0/device:CPU:0: fn 'fns:noxp' cannot "
                           "take what call passes it (got an unexpected keyword argument 'xp'): call runs "
                           "noxp(<input 0>, xp=numpy), the op's inputs in order, xp= the device's array module")
    definition = FNS.splitlines().index("def noxp(x):") + 1
    assert text.endswith(f"it is defined as noxp(x) at {folder / 'fns.py'}:{definition}")

    spec = _write(folder / "named.yaml", """
        version: 1
        graph:
          - {name: x, op: ones, shape: [2]}
          - {name: scaled, op: call, fn: "fns:needs_scale", inputs: {x: x}, params: {factor: 2.0}}
        outputs: {scaled: "-"}
        """)
    with pytest.raises(OpFailedError) as info:
        run_file(spec, echo=quiet)
    text = str(info.value)
    assert "\n" not in text and "op 'scaled' failed" in text and "fn 'fns:needs_scale'" in text
    assert "(missing a required argument: 'scale'): call runs needs_scale(xp=numpy, factor=<param>, " \
           "x=<input>), the op's inputs by their names" in text


@pytest.mark.cluster
def test_a_type_error_raised_inside_the_function_is_its_own(tmp_path: Path) -> None:
    folder = _spec_folder(tmp_path)
    spec = _write(folder / "own.yaml", """
        version: 1
        graph:
          - {name: x, op: ones, shape: [2]}
          - {name: broken, op: call, fn: "fns:own_type_error", inputs: [x]}
        outputs: {broken: "-"}
        """)
    with pytest.raises(OpFailedError) as info:
        run_file(spec, echo=quiet)
    text = str(info.value)
    assert "op 'broken' failed" in text and "TypeError: len() takes exactly one argument (2 given)" in text
    assert "cannot take what call passes" not in text
    assert f"at {folder / 'fns.py'}:" in text and "in own_type_error: return len(x, 2)" in text


def test_calls_of_one_folder_share_the_directory_and_another_folder_waits(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The lease with real threads: the process's directory is the folder of every call inside, then as it was."""
    home, one, two = (tmp_path / name for name in ("home", "one", "two"))
    for folder in (home, one, two):
        folder.mkdir()
    monkeypatch.chdir(home)
    lease = WorkingDirectory()
    seen: dict[str, str] = {}
    entered = {name: threading.Event() for name in ("a1", "a2", "b")}
    leave = {name: threading.Event() for name in ("a1", "a2", "b")}

    def call(name: str, folder: Path) -> None:
        with lease.lent(str(folder)):
            seen[name] = os.getcwd()
            entered[name].set()
            leave[name].wait(10)

    threads = [threading.Thread(target=call, args=("a1", one)), threading.Thread(target=call, args=("a2", one))]
    threads[0].start()
    assert entered["a1"].wait(10)
    threads[1].start()
    assert entered["a2"].wait(10)  # the same folder: it shares the directory at once
    threads.append(threading.Thread(target=call, args=("b", two)))
    threads[2].start()
    assert not entered["b"].wait(0.3)  # another folder waits while calls of the first run
    assert os.getcwd() == str(one) and seen["a1"] == seen["a2"] == str(one)
    leave["a1"].set()
    assert not entered["b"].wait(0.3)  # a2 still runs in the first folder
    leave["a2"].set()
    assert entered["b"].wait(10)
    assert seen["b"] == str(two)
    leave["b"].set()
    for thread in threads:
        thread.join(10)
    assert os.getcwd() == str(home)  # the last call out puts the directory back
