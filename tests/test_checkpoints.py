"""Checkpoints people can trust (issues 26 and 31): kept per revision, checked before use, listed and cleared.

Every run here is real: specs written as YAML, run on an embedded Dask cluster on loopback or in this
process (``sync=True``, where only the files matter), checkpoint files read back from disk. Forged
checkpoints are written with the cache's own writer, so their checksums are right and only what they say
disagrees with the loop.
"""

from __future__ import annotations

import io
import json
import os
import resource
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
from orchestrator.cache import compute_keys
from orchestrator.cache.checkpoints import HOST
from orchestrator.cache.store import read_checked, write_checked
from orchestrator.cli import run_cli
from orchestrator.errors import OrchestratorError

BIN = Path(sys.executable).parent

# w grows by lr each step; the evaluation is 3 (w - center)^2 summed: with lr 0.5 and center 10 it falls to 0 at
# step 20 and rises after, so best_only has something to watch.
SPEC = """\
version: 1
name: ck
params:
  lr: {type: number, default: 0.5}
  steps: {type: integer, default: 30}
  center: {type: number, default: 10.0}
graph:
  - {name: w0, op: zeros, shape: [3]}
  - name: train
    iterate:
      steps: "${params.steps}"
      window: 5
      state: {w: w0}
      body:
        - {name: w1, op: add, inputs: [w], scalar: "${params.lr}"}
        - {name: loss, op: sum, inputs: [w1]}
      update: {w: w1}
      metrics: {loss: loss}
      evaluate:
        every: 10
        body:
          - {name: d, op: sub, inputs: [w], scalar: "${params.center}"}
          - {name: d2, op: square, inputs: [d]}
          - {name: v, op: sum, inputs: [d2]}
        metrics: {val: v}
      checkpoint: CHECKPOINT
outputs:
  train.w: w.npy
  train.loss: loss.csv
  train.val: val.csv
"""
OUTPUTS = ("w.npy", "loss.csv", "val.csv")


def write(tmp_path: Path, checkpoint: str = "{every: 10, keep: 4}", name: str = "ck.yaml", text: str = SPEC) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).replace("CHECKPOINT", checkpoint))
    return path


def folder(spec: Path, loop: str = "train") -> Path:
    return spec.parent / ".orchestrate" / "cache" / "checkpoints" / "ck" / loop


def names(spec: Path) -> list[str]:
    return sorted(p.name for p in folder(spec).glob("*.npz"))


def step_of(name: str) -> int:
    return int(name.split("-")[1].split(".")[0])


def run(spec: Path, out: Path, said: list[str] | None = None, sync: bool = True, **kw: Any) -> dict[str, Any]:
    """Run ``spec`` into ``out``; the run report's loop record of 'train'."""
    report = out.with_suffix(".json")
    run_file(spec, echo=(said.append if said is not None else lambda _: None), sync=sync, output_dir=str(out),
             report_path=str(report), **kw)
    return dict(json.loads(report.read_text())["loops"]["train"])


def same(a: Path, b: Path) -> None:
    for name in OUTPUTS:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


def cli(argv: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    return run_cli(argv, out=out), out.getvalue()


# ------------------------------------------------------------------- item 1: kept per revision, list and clear


@pytest.mark.cluster
def test_another_revision_leaves_the_first_runs_checkpoints_in_place(tmp_path: Path) -> None:
    """Issue 26 item 1 as seen twice: 30 steps checkpointed every 10 (keep 4), then --set lr=...: only the new
    run's files were left. Both revisions' stay now, and the run says so."""
    spec = write(tmp_path)
    run(spec, tmp_path / "a", sync=False)
    first = names(spec)
    assert {10, 20} <= {step_of(n) for n in first}, first
    said: list[str] = []
    run(spec, tmp_path / "b", said, sync=False, params={"lr": "0.25"})
    after = names(spec)
    assert set(first) <= set(after), (first, after)
    assert len({n.split("-")[0] for n in after}) == 2, after
    assert [step_of(n) for n in first] == [10, 20, 30]  # the last step's too
    kept = [line for line in said if line.startswith("checkpoints of 'train'")]
    assert kept and "steps 10, 20, 30 kept (keep: 4)" in kept[0], said
    assert "3 file(s) of 1 other revision left in place" in kept[0] and "checkpoints list" in kept[0], kept


def test_checkpoints_list_and_clear(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = write(tmp_path)
    run(spec, tmp_path / "a")
    run(spec, tmp_path / "b", params={"lr": "0.25"})
    (folder(spec) / "notes.txt").write_text("mine")  # a user's file in the folder: never touched
    monkeypatch.chdir(tmp_path)
    code, listed = cli(["checkpoints", "list", str(spec)])
    assert code == 0
    assert "(current), last written with center=10.0, lr=0.5, steps=30" in listed, listed
    assert "(another revision: body op 'w1' changed), last written with center=10.0, lr=0.25" in listed, listed
    assert "(a run of 30 steps)" in listed
    assert "6 checkpoints of 2 revisions" in listed
    code, _ = cli(["checkpoints", "clear", str(spec)])  # no selection: refused, nothing removed
    assert code == 2 and len(names(spec)) == 6
    code, dry = cli(["checkpoints", "clear", str(spec), "--keep-current", "--dry-run"])
    assert code == 0 and len(names(spec)) == 6
    assert dry.count("would remove .orchestrate") == 3 and "would keep 3 checkpoints" in dry, dry
    code, _ = cli(["checkpoints", "clear", str(spec), "--loop", "trian", "--all"])
    assert code == 2 and len(names(spec)) == 6
    code, done = cli(["checkpoints", "clear", str(spec), "--keep-current"])
    assert code == 0 and "removed 3 checkpoints of 1 revision" in done and "kept 3 checkpoints" in done, done
    current = names(spec)
    code, listed = cli(["checkpoints", "list", str(spec), "--set", "lr=0.25", "--format", "json"])
    rows = json.loads(listed)["checkpoints"]
    assert len(rows) == 3 and not any(row["current"] for row in rows)  # lr=0.25's revision is gone
    code, done = cli(["checkpoints", "clear", "--dir", str(folder(spec)), "--revision", current[0][:6]])
    assert code == 0 and names(spec) == [] and (folder(spec) / "notes.txt").read_text() == "mine", done


def test_a_checkpoint_path_follows_the_output_dir_and_plan_says_where(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    spec = write(tmp_path, "{every: 10, path: ckpt}")
    run(spec, tmp_path / "a")
    run(spec, tmp_path / "b")
    for out in ("a", "b"):
        assert sorted(p.name for p in (tmp_path / out / "ckpt" / "train").glob("*.npz"))[-1].endswith("30.npz")
    assert not (tmp_path / "ckpt").exists()
    monkeypatch.chdir(tmp_path)
    code, text = cli(["plan", str(spec.name)])
    assert code == 0
    assert "checkpoints every 10 steps, the newest 2 of its revision kept, in ckpt/train/ (under the output " \
           "directory: --output-dir moves it)" in text, text


# ------------------------------------------------------------------- item 2: checkpoint paths are output paths


def test_checkpoint_paths_are_checked_again_with_the_output_dir(tmp_path: Path) -> None:
    spec = write(tmp_path, "{every: 10, path: ckpt}")
    out = tmp_path / "out"
    out.mkdir()
    (out / "ckpt").write_text("a file where the folder goes")
    with pytest.raises(OrchestratorError, match=r"ckpt.* is a file"):
        run(spec, out)
    assert sorted(p.name for p in out.iterdir()) == ["ckpt"]  # nothing written
    (out / "ckpt").unlink()
    (out / "ckpt").symlink_to(tmp_path)  # a link that leads out of the output directory
    with pytest.raises(OrchestratorError, match="outside the output directory"):
        run(spec, out)
    assert not (out / "w.npy").exists()


# ------------------------------------------------------------------- item 3: forged checkpoints are not used


def _forge(path: Path, how: str) -> None:
    header, arrays, intact = read_checked(str(path))
    assert intact
    header.pop("sha256")
    if how == "step":  # the step-20 checkpoint under the step-30 name
        header, arrays, _ = read_checked(str(path).replace("0000000030", "0000000020"))
        header.pop("sha256")
    elif how == "dtype":
        arrays["s0"] = arrays["s0"].astype(np.float32)
    elif how == "series":
        arrays["m0"] = arrays["m0"][:-3]
    write_checked(str(path), header, arrays)  # a right checksum: only what it says is wrong
    assert read_checked(str(path))[2]


@pytest.mark.parametrize("how, says", [("step", "its header says step 20, its name step 30"),
                                       ("dtype", "state 'w' is float32, the loop's is float64"),
                                       ("series", "series 'loss' holds 27 values, and a checkpoint at step 30 "
                                                  "holds 30")])
def test_a_forged_checkpoint_is_named_and_the_older_one_used(tmp_path: Path, how: str, says: str) -> None:
    spec = write(tmp_path)
    run(spec, tmp_path / "whole", params={"steps": "40"})
    files = {step_of(n): n for n in names(spec)}
    assert {10, 20, 30} <= set(files), files
    for step in [s for s in files if s > 30]:  # the last step's too: the forged one is the newest
        (folder(spec) / files[step]).unlink()
    forged = folder(spec) / files[30]
    _forge(forged, how)
    said: list[str] = []
    loop = run(spec, tmp_path / "resumed", said, params={"steps": "40"}, resume=True)
    warnings = [line for line in said if line.startswith("warning:")]
    assert len(warnings) == 1 and str(forged) in warnings[0] and says in warnings[0], said
    assert loop["resumed_from_step"] == 20
    same(tmp_path / "resumed", tmp_path / "whole")


USER_INIT = SPEC.replace("{name: w0, op: zeros, shape: [3]}", '{name: w0, op: call, fn: "init_fns:zeros"}')


@pytest.mark.cluster
def test_a_state_whose_dtype_only_its_initial_value_says_is_checked_too(tmp_path: Path) -> None:
    """w0 is made by user code without ``output:``: the spec does not know its dtype; the run reads it."""
    (tmp_path / "init_fns.py").write_text("import numpy as np\n\ndef zeros(xp):\n    return xp.zeros(3)\n")
    spec = write(tmp_path, text=USER_INIT)
    run(spec, tmp_path / "whole")
    _forge(folder(spec) / names(spec)[-1], "dtype")
    said: list[str] = []
    loop = run(spec, tmp_path / "resumed", said, sync=False, resume=True)  # the initial value read from its worker
    assert any("state 'w' is float32, the loop's is float64" in line for line in said), said
    assert loop["resumed_from_step"] == 20
    same(tmp_path / "resumed", tmp_path / "whole")


# ------------------------------------------------------------------- item 4: stale temporaries, failed writes


def test_temporaries_of_killed_writes_are_removed_and_nothing_else(tmp_path: Path) -> None:
    spec = write(tmp_path)
    run(spec, tmp_path / "a")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    here = folder(spec)
    killed = here / f".{names(spec)[0]}.{HOST}-{dead.pid}.abcd1234.tmp"
    killed.write_bytes(b"\0" * (8 << 20))
    old = here / f".{names(spec)[1]}.zyxw9876.tmp"  # before temporaries named their process
    old.write_bytes(b"\0" * 100)
    os.utime(old, (time.time() - 7200, time.time() - 7200))
    fresh = here / f".{names(spec)[1]}.qwer5678.tmp"  # a write that may be under way
    fresh.write_bytes(b"\0")
    alive = here / f".{names(spec)[2]}.{HOST}-{os.getpid()}.asdf0000.tmp"
    alive.write_bytes(b"\0")
    other = here / ".something.else.tmp"
    other.write_bytes(b"\0")
    said: list[str] = []
    run(spec, tmp_path / "b", said)
    assert not killed.exists() and not old.exists()
    assert fresh.exists() and alive.exists() and other.exists()
    line = next(line for line in said if line.startswith("removed 2 temporary file(s)"))
    assert "8.0 MiB" in line and "never finished" in line, line


BIG = SPEC.replace("{name: w0, op: zeros, shape: [3]}", "{name: w0, op: zeros, shape: [40000]}").replace(
    "  train.w: w.npy\n", "")


def test_a_failed_checkpoint_write_is_said_when_it_fails(tmp_path: Path) -> None:
    """Files over 100 kB fail to be written (RLIMIT_FSIZE: 'File too large'): every checkpoint of a 320 kB
    state does, and each failure is its own warning naming the file, as it happens."""
    spec = write(tmp_path, text=BIG)

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, 100_000))

    done = subprocess.run([str(BIN / "orchestrate"), "run", str(spec), "--sync", "--no-progress"],
                          capture_output=True, text=True, timeout=120, cwd=str(tmp_path), preexec_fn=limit)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    failed = [i for i, line in enumerate(lines) if line.startswith("warning: the checkpoint of 'train' at step")]
    assert len(failed) == 3, done.stdout
    assert "-0000000010.npz): File too large; the run goes on" in lines[failed[0]], lines[failed[0]]
    assert failed[-1] < lines.index(next(line for line in lines if line.startswith("loop 'train' ran")))
    assert names(spec) == [] and not list(folder(spec).glob(".*.tmp"))  # nothing half-written left


# ------------------------------------------------------------------- item 5: best_only, more and fewer steps


@pytest.mark.cluster
def test_best_only_writes_when_the_evaluation_improves_and_resume_remembers(tmp_path: Path) -> None:
    spec = write(tmp_path, "{every: 10, keep: 5, best_only: true, monitor: val}")
    run(spec, tmp_path / "a", sync=False, params={"steps": "40"})
    assert [step_of(n) for n in names(spec)] == [10, 20]  # val: 75, 0, 75, 300
    said: list[str] = []
    loop = run(spec, tmp_path / "b", said, sync=False, params={"steps": "40"}, resume=True)
    assert loop["resumed_from_step"] == 20
    assert [step_of(n) for n in names(spec)] == [10, 20]  # 75 at step 30 is no better than step 20's 0
    same(tmp_path / "b", tmp_path / "a")


@pytest.mark.cluster
def test_resume_with_more_steps_goes_on_from_the_last_checkpoint(tmp_path: Path) -> None:
    spec = write(tmp_path)
    run(spec, tmp_path / "short", sync=False)
    said: list[str] = []
    loop = run(spec, tmp_path / "longer", said, sync=False, params={"steps": "50"}, resume=True)
    assert (loop["resumed_from_step"], loop["steps_run"]) == (30, 20)
    assert any("resumes from its checkpoint at step 30" in line and "written by a run of 30 steps, it goes on to "
               "step 50" in line for line in said), said
    run(spec, tmp_path / "whole", params={"steps": "50"}, use_cache=False, cache_dir=str(tmp_path / "elsewhere"))
    same(tmp_path / "longer", tmp_path / "whole")


def test_fewer_steps_never_use_a_later_checkpoint(tmp_path: Path) -> None:
    spec = write(tmp_path)
    run(spec, tmp_path / "long", params={"steps": "50"})
    assert [step_of(n) for n in names(spec)] == [20, 30, 40, 50]
    for steps, began in (("25", 20), ("20", 20), ("15", 0)):
        said: list[str] = []
        loop = run(spec, tmp_path / f"resumed{steps}", said, params={"steps": steps}, resume=True)
        assert loop["resumed_from_step"] == began, said
        assert any("past its last step" in line for line in said), said
        run(spec, tmp_path / f"whole{steps}", params={"steps": steps}, use_cache=False,
            cache_dir=str(tmp_path / "elsewhere"))  # its checkpoints out of the way
        same(tmp_path / f"resumed{steps}", tmp_path / f"whole{steps}")


def test_no_checkpoint_at_a_last_step_evaluated_only_as_the_last(tmp_path: Path) -> None:
    """35 steps evaluated every 10 and at 35: a run of 40 steps has no evaluation at 35, so it could not go
    on from a checkpoint there."""
    spec = write(tmp_path, "{every: 5, keep: 10}")
    run(spec, tmp_path / "a", params={"steps": "35"})
    assert [step_of(n) for n in names(spec)] == [5, 10, 15, 20, 25, 30]


BATCHED = """\
version: 1
name: ck
params:
  epochs: {type: integer, default: 2}
graph:
  - {name: X, op: random.normal, shape: [30, 3], seed: 4}
  - {name: w0, op: zeros, shape: [3]}
  - name: train
    iterate:
      window: 4
      state: {w: w0}
      batches: {data: {x: X}, size: 7, epochs: "${params.epochs}", seed: 2}
      body:
        - {name: m, op: mean, inputs: [x], axis: 0}
        - {name: w1, op: add, inputs: [w, m]}
        - {name: loss, op: sum, inputs: [w1]}
      update: {w: w1}
      metrics: {loss: loss}
      checkpoint: {every: 5}
outputs:
  train.w: w.npy
  train.loss: loss.csv
"""


def test_resume_with_more_epochs_goes_on_in_the_same_minibatch_order(tmp_path: Path) -> None:
    spec = write(tmp_path, text=BATCHED)  # 5 batches an epoch (the last of 2 rows): 10 steps, then 20
    run(spec, tmp_path / "short")
    said: list[str] = []
    loop = run(spec, tmp_path / "longer", said, params={"epochs": "4"}, resume=True)
    assert loop["resumed_from_step"] == 10, said
    run(spec, tmp_path / "whole", params={"epochs": "4"}, use_cache=False, cache_dir=str(tmp_path / "elsewhere"))
    for name in ("w.npy", "loss.csv"):
        assert (tmp_path / "longer" / name).read_bytes() == (tmp_path / "whole" / name).read_bytes()


NESTED = """\
version: 1
name: nest
graph:
  - {name: w0, op: zeros, shape: [3]}
  - name: outer
    iterate:
      steps: 4
      state: {w: w0}
      body:
        - name: inner
          iterate:
            steps: INNER
            state: {v: w}
            body:
              - {name: v1, op: add, inputs: [v], scalar: 1}
            update: {v: v1}
      update: {w: inner.v}
outputs:
  outer.w: w.npy
"""


def test_an_inner_loops_steps_are_part_of_the_outer_loops_key(tmp_path: Path) -> None:
    """Found on the way: they were in no op of the outer loop, so --resume reused a result of other steps."""
    keys = []
    for inner in (3, 5):
        spec = write(tmp_path, text=NESTED.replace("INNER", str(inner)), name=f"nest{inner}.yaml")
        found = compute_keys(plan_file(spec), str(tmp_path))
        keys.append((found.loops["outer"].key, found.revisions["outer"].key))
    assert keys[0][0] != keys[1][0] and keys[0][1] != keys[1][1]


# ------------------------------------------------------------------- bad input (specs/invalid/240-249)

CORPUS = {  # file: (code, words the message or hint has)
    "240-checkpoint-path-escapes": ("output-path", "escapes the output directory"),
    "241-checkpoint-path-absolute": ("output-path", "is absolute"),
    "242-checkpoint-path-is-an-output": ("checkpoint-path", "the run would make a folder of it"),
    "243-checkpoint-path-is-the-spec": ("checkpoint-path", "is the spec itself"),
    "244-checkpoint-path-is-a-data-file": ("checkpoint-path", "the file 'X' loads"),
    "245-best-only-without-a-metric": ("checkpoint-best", "watches no metric"),
    "246-best-only-monitor-not-made": ("checkpoint-best", "did you mean 'val_loss'?"),
    "247-best-only-between-evaluations": ("checkpoint-best", "every: a multiple of 10"),
    "248-checkpoint-monitor-without-best-only": ("checkpoint-best", "read only with best_only: true"),
}
ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("name", CORPUS)
def test_bad_checkpoint_input_is_said_at_file_line_col_with_a_hint(name: str) -> None:
    from orchestrator import check_file

    path = ROOT / "specs" / "invalid" / f"{name}.yaml"
    expect = path.read_text().splitlines()[0].removeprefix("# expect: ")
    checked = check_file(path, display_name=f"{name}.yaml")
    (diagnostic,) = checked.diagnostics
    code, words = CORPUS[name]
    assert diagnostic.code == code and diagnostic.hint.strip()
    assert words in diagnostic.render()
    assert diagnostic.render() == f"{name}.yaml:{expect}"
