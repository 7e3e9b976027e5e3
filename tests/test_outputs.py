"""Outputs: paths stay inside the output directory, files are written all or nothing.

* output paths that escape the output directory are refused, by validate and
  again at run time, unless ``run.allow_absolute_paths`` says otherwise;
* a run that fails midway leaves earlier output files byte-for-byte as they
  were, with no temporary files left behind, and an op that raises is
  reported with its op, device, exception and the user's line (exit code 1);
* files are written with the mode a plain ``open`` would give, and a symlink
  cannot lead an output out of the output directory.
"""

from __future__ import annotations

import contextlib
import os
import resource
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from orchestrator import run_file
from orchestrator.api import check_file
from orchestrator.atomic import FileSet
from orchestrator.errors import OpFailedError, RunError
from orchestrator.execute.outputs import resolve_output

from cli_helpers import CPU0, cli, write

import stat

BIN = Path(sys.executable).parent

from orchestrator.atomic import write_text

# ------------------------------------------------------------------- output paths


OUTPUTS = """\
    version: 1
    graph:
      - {name: a, op: ones, shape: [2]}
      - {name: b, op: zeros, shape: [2]}
      - {name: s, op: save, inputs: [a], path: ../saved.npy}
    outputs:
      a: ../../etc/x.npy
      b: /tmp/abs.npy
    """


def test_output_paths_outside_the_output_directory_are_refused(tmp_path: Path) -> None:
    checked = check_file(write(tmp_path / "spec.yaml", OUTPUTS))
    assert [(d.path, d.message, d.hint) for d in checked.diagnostics] == [
        (("graph", 2, "path"), "save path '../saved.npy' escapes the output directory",
         "remove '..' or set run.allow_absolute_paths: true"),
        (("outputs", "a"), "output path '../../etc/x.npy' escapes the output directory",
         "remove '..' or set run.allow_absolute_paths: true"),
        (("outputs", "b"), "output path '/tmp/abs.npy' is absolute",
         "use a path relative to the output directory, or set run.allow_absolute_paths: true"),
    ]


def test_output_paths_outside_are_accepted_when_allowed(tmp_path: Path) -> None:
    checked = check_file(write(tmp_path / "spec.yaml", OUTPUTS + "run: {allow_absolute_paths: true}\n"))
    assert checked.ok(strict=True), [d.render() for d in checked.diagnostics]


@pytest.mark.parametrize("target", ["../../etc/x.npy", "../x.npy", "a/../../x.npy", "/tmp/abs.npy", "/etc/passwd"])
def test_resolve_output_refuses_escaping_paths_unless_allowed(tmp_path: Path, target: str) -> None:
    base = str(tmp_path / "out")
    with pytest.raises(RunError, match=r"escapes the output directory .*allow_absolute_paths"):
        resolve_output(target, base, allow_outside=False)
    resolved = resolve_output(target, base, allow_outside=True)
    assert resolved == os.path.normpath(os.path.join(base, target))


@pytest.mark.parametrize("target", ["x.npy", "sub/x.npy", "a/../x.npy", "./x.npy"])
def test_resolve_output_keeps_paths_inside(tmp_path: Path, target: str) -> None:
    base = str(tmp_path / "out")
    resolved = resolve_output(target, base, allow_outside=False)
    assert os.path.commonpath([resolved, base]) == base


def test_csv_outputs_of_more_than_two_dimensions_are_refused_before_running(tmp_path: Path) -> None:
    checked = check_file(write(tmp_path / "spec.yaml", """\
        version: 1
        graph:
          - {name: a, op: ones, shape: [2, 2, 2]}
          - {name: s, op: save, inputs: [a], path: s.csv}
        outputs:
          a: a.csv
        """))
    assert [(d.code, d.path) for d in checked.diagnostics] == [("output-format", ("graph", 1, "path")),
                                                               ("output-format", ("outputs", "a"))]
    assert checked.diagnostics[0].message == "op 's' saves shape [2, 2, 2]; a CSV file holds at most 2 dimensions"
    assert checked.diagnostics[1].message == "output 'a' has shape [2, 2, 2]; a CSV file holds at most 2 dimensions"


# ------------------------------------------------------------------- runs that fail


USER_MODULE = '''\
def boom(x, xp):
    values = x * 2
    raise ValueError("boom")
'''


def failing_spec(tmp_path: Path) -> Path:
    (tmp_path / "hardening_usermod.py").write_text(USER_MODULE, encoding="utf-8")
    return write(tmp_path / "failing.yaml", """\
        version: 1
        graph:
          - {name: a, op: ones, shape: [3]}
          - {name: b, op: mul, inputs: [a], scalar: 2}
          - {name: c, op: call, fn: "hardening_usermod:boom", inputs: [b]}
        outputs:
          a: out/a.npy
          b: out/b.csv
          c: out/c.npy
        """)


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.startswith(".") and p.name.endswith(".tmp"))


@pytest.mark.cluster
def test_a_run_failing_midway_leaves_earlier_outputs_unchanged(tmp_path: Path) -> None:
    spec = failing_spec(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    before = {"a.npy": b"old a: not even an array", "b.csv": b"1,2,3\n", "c.npy": b"old c"}
    for name, content in before.items():
        (out / name).write_bytes(content)
    with pytest.raises(OpFailedError) as failed:
        run_file(spec, echo=lambda s: None)
    assert failed.value.op == "c" and failed.value.error == "ValueError: boom"
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert leftovers(out) == []


@pytest.mark.cluster
def test_a_run_failing_while_writing_outputs_leaves_earlier_outputs_unchanged(tmp_path: Path) -> None:
    """A file appears where an output's folder should be while the run computes (validation saw none)."""
    (tmp_path / "blocker.py").write_text(
        "import os\n"
        "def block(x, xp, where=''):\n"
        "    with open(where, 'wb') as f:\n"
        "        f.write(b\"a file where b's directory should be\")\n"
        "    return x\n", encoding="utf-8")
    out = tmp_path / "out"
    spec = write(tmp_path / "spec.yaml", f"""\
        version: 1
        graph:
          - {{name: a, op: ones, shape: [3]}}
          - {{name: b, op: call, fn: "blocker:block", inputs: [a], params: {{where: "{out / 'blocked'}"}}}}
        outputs:
          a: out/a.npy
          b: out/blocked/b.npy
        """)
    out.mkdir()
    (out / "a.npy").write_bytes(b"old a")
    with pytest.raises((RunError, OSError)):
        run_file(spec, echo=lambda s: None)
    assert (out / "a.npy").read_bytes() == b"old a"  # a was ready to be written, but not alone
    assert (out / "blocked").read_bytes() == b"a file where b's directory should be"
    assert leftovers(out) == []


@pytest.mark.cluster
def test_an_op_that_raises_names_op_device_error_and_user_line(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    spec = failing_spec(tmp_path)
    code, out, err = cli(["run", str(spec), "--no-progress"], capsys)
    assert code == 1, out + err
    assert "op 'c'" in err
    assert CPU0 in err
    assert "ValueError: boom" in err
    user_file = tmp_path / "hardening_usermod.py"
    assert f"{user_file}:3" in err
    assert 'raise ValueError("boom")' in err
    assert "Traceback" not in out + err
    assert "internal error" not in err
    assert not (tmp_path / "out").exists()  # nothing written, not even the directory's first file


def test_atomic_write_gives_the_umask_mode(tmp_path: Path) -> None:
    target = tmp_path / "x.txt"
    write_text(target, "hello")
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~mask
    assert target.read_text() == "hello"
    assert [p.name for p in tmp_path.iterdir()] == ["x.txt"]  # no temporary left behind



def test_output_symlink_out_of_the_output_directory_is_refused(tmp_path: Path) -> None:
    import pytest

    from orchestrator.errors import RunError
    from orchestrator.execute.outputs import resolve_output

    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    out.mkdir()
    elsewhere.mkdir()
    (out / "link").symlink_to(elsewhere)
    with pytest.raises(RunError, match="escapes the output directory"):
        resolve_output("link/x.npy", str(out), allow_outside=False)
    assert resolve_output("link/x.npy", str(out), allow_outside=True).endswith("link/x.npy")
    assert resolve_output("sub/x.npy", str(out), allow_outside=False) == str(out / "sub" / "x.npy")


@pytest.mark.cluster
@pytest.mark.parametrize("granularity", ["partition", "op"])
def test_a_failed_run_leaves_existing_checkpoints_untouched(tmp_path: Path, granularity: str) -> None:
    """A save op ran before the failure: its new checkpoint is dropped, the old one stays (issue 13.5)."""
    (tmp_path / "hardening_usermod.py").write_text(USER_MODULE, encoding="utf-8")
    spec = write(tmp_path / "ckpt.yaml", """\
        version: 1
        graph:
          - {name: a, op: ones, shape: [3]}
          - {name: keep, op: save, inputs: [a], path: out/ckpt.npy}
          - {name: c, op: call, fn: "hardening_usermod:boom", inputs: [a], after: [keep]}
        """)
    out = tmp_path / "out"
    out.mkdir()
    (out / "ckpt.npy").write_bytes(b"yesterday's checkpoint")
    with pytest.raises(OpFailedError):
        run_file(spec, echo=lambda s: None, granularity=granularity)
    assert (out / "ckpt.npy").read_bytes() == b"yesterday's checkpoint"
    assert [p.name for p in out.iterdir()] == ["ckpt.npy"]  # no staging file, no temp file left


@pytest.mark.cluster
def test_a_successful_run_puts_its_checkpoints_in_place(tmp_path: Path) -> None:
    spec = write(tmp_path / "ckpt.yaml", """\
        version: 1
        graph:
          - {name: a, op: ones, shape: [3]}
          - {name: keep, op: save, inputs: [a], path: out/ckpt.npy}
        """)
    lines: list[str] = []
    run_file(spec, echo=lines.append)
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "ckpt.npy"), np.ones(3))
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["ckpt.npy"]
    assert any(line.startswith("saved ") and line.endswith("ckpt.npy") for line in lines)


def test_an_output_directory_that_would_overwrite_an_input_is_refused_before_anything_runs(tmp_path: Path) -> None:
    """Validation checks the spec's own output directory; --output-dir is checked again by the run."""
    (tmp_path / "data").mkdir()
    np.save(tmp_path / "data" / "x.npy", np.arange(3.0))
    spec = write(tmp_path / "spec.yaml", """\
        version: 1
        graph:
          - {name: x, op: load, path: data/x.npy, shape: [3]}
        outputs:
          x: x.npy
        """)
    with pytest.raises(RunError, match=r"output 'x' would be written over .*data/x.npy, which is the file op 'x' loads"):
        run_file(spec, echo=lambda s: None, output_dir=str(tmp_path / "data"))
    np.testing.assert_array_equal(np.load(tmp_path / "data" / "x.npy"), np.arange(3.0))



# ------------------------------------------------------------------- file names, metrics


NAMELESS = """\
    version: 1
    graph:
      - {name: a, op: ones, shape: [2]}
      - {name: s, op: save, inputs: [a], path: ckpt/.npy}
      - {name: t, op: save, inputs: [a], path: ckpt/, format: npy}
    outputs:
      a: results/.npy
      t: .csv
    """


def test_a_file_without_a_name_before_its_suffix_is_refused(tmp_path: Path) -> None:
    checked = check_file(write(tmp_path / "spec.yaml", NAMELESS))
    assert [(d.path, d.message, d.hint) for d in checked.diagnostics] == [
        (("graph", 1, "path"), "save path 'ckpt/.npy' has no file name before '.npy'", "name the file, e.g. ckpt/s.npy"),
        (("graph", 2, "path"), "save path 'ckpt/' has no file name", "name the file, e.g. ckpt/t.npy"),
        (("outputs", "a"), "output path 'results/.npy' has no file name before '.npy'",
         "name the file, e.g. results/a.npy"),
        (("outputs", "t"), "output path '.csv' has no file name before '.csv'", "name the file, e.g. t.csv"),
    ]
    named = NAMELESS.replace("ckpt/.npy", "ckpt/s.npy").replace("ckpt/,", "ckpt/t,").replace("results/.npy", "r.npy")
    assert check_file(write(tmp_path / "spec.yaml", named.replace(".csv", "t.csv"))).ok(strict=True)


def test_an_empty_set_that_leaves_an_output_without_a_name_is_refused_before_running(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = write(tmp_path / "spec.yaml", """\
        version: 1
        params:
          tag: {type: string, default: base}
        graph:
          - {name: a, op: ones, shape: [2]}
        outputs: {a: "results/${params.tag}.npy"}
        """)
    code, out, err = cli(["run", str(spec), "--set", "tag="], capsys)
    assert code == 1 and not out
    assert err.splitlines()[0] == (
        f"{spec}:6:14: outputs.a: output path 'results/.npy' has no file name before '.npy' (name the file, e.g. "
        "results/a.npy; ${params.tag} = '', from --set tag=)")
    assert not (tmp_path / "results").exists()


LOOP_METRIC = """\
    version: 1
    graph:
      - {name: w0, op: zeros, shape: [3]}
      - name: train
        iterate:
          steps: 4
          window: 2
          state: {w: w0}
          body:
            - {name: w1, op: add, inputs: [w], scalar: 1.0}
            - {name: loss, op: METRIC, inputs: [w1]}
          update: {w: w1}
          metrics: {loss: loss}
    outputs: {train.loss: out/loss.csv}
    """


def test_a_metric_whose_shape_is_known_to_be_an_array_is_refused(tmp_path: Path) -> None:
    checked = check_file(write(tmp_path / "spec.yaml", LOOP_METRIC.replace("METRIC", "identity")))
    assert [(d.line, d.column, d.message) for d in checked.diagnostics] == [
        (13, 23, "metric 'loss' of 'train' is 'loss', of shape [3]; a metric is one number per step")]
    assert check_file(write(tmp_path / "spec.yaml", LOOP_METRIC.replace("METRIC", "mean"))).ok(strict=True)


NESTED_METRIC = """\
    version: 1
    graph:
      - {name: w0, op: zeros, shape: [3]}
      - name: train
        iterate:
          steps: 2
          state: {w: w0}
          body:
            - name: inner
              iterate:
                steps: 2
                state: {v: w}
                body:
                  - {name: v1, op: add, inputs: [v], scalar: 1.0}
                update: {v: v1}
            - {name: loss, op: call, fn: "metricfns:same", inputs: [inner.v]}
          update: {w: inner.v}
          metrics: {loss: loss}
    outputs: {train.loss: out/loss.csv}
    """


@pytest.mark.cluster
@pytest.mark.parametrize(("text", "granularity"), [
    (LOOP_METRIC.replace("op: METRIC", 'op: call, fn: "metricfns:same"'), "partition"),
    (LOOP_METRIC.replace("op: METRIC", 'op: call, fn: "metricfns:same"'), "op"),
    (NESTED_METRIC, "partition"),
], ids=["windows", "op-granularity", "nested"])
def test_a_metric_that_turns_out_an_array_fails_the_run_naming_it(tmp_path: Path, text: str,
                                                                  granularity: str) -> None:
    """A call without ``output:`` has no shape before it runs: its first value says, and nothing is written."""
    (tmp_path / "metricfns.py").write_text("def same(x, xp):\n    return x\n", encoding="utf-8")
    spec = write(tmp_path / "spec.yaml", text)
    assert check_file(spec).ok(strict=True)
    with pytest.raises(RunError) as failed:
        run_file(spec, echo=lambda s: None, granularity=granularity)
    assert str(failed.value) == ("metric 'train.loss' is not a number: at step 1 its value has shape [3] (a metric is "
                                 "one number per step: reduce it in the loop's body, e.g. with op: mean)")
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------- all or nothing: writes that fail


FULL = """\
    version: 1
    graph:
      - {name: w0, op: zeros, shape: [400000]}
      - name: train
        iterate:
          steps: 4
          window: 2
          state: {w: w0}
          body:
            - {name: w1, op: add, inputs: [w], scalar: 1.0}
            - {name: loss, op: mean, inputs: [w1]}
          update: {w: w1}
          metrics: {loss: loss}
    outputs:
      train.loss: out/m.csv
      train.w: out/w.npy
    """
OLD = {"m.csv": b"yesterday's metric\n", "w.npy": b"yesterday's weights"}


def _limited(size: int) -> Callable[[], None]:
    def limit() -> None:  # in the child: a file may grow to `size` bytes (Python ignores SIGXFSZ: EFBIG instead)
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
    return limit


@contextlib.contextmanager
def _small_disk(where: Path) -> Iterator[None]:
    """A 2 MiB tmpfs at ``where`` (root only): a disk that fills up, as a real one does."""
    where.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(where)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()} (the file-size limit case covers it)")
    try:
        yield
    finally:
        subprocess.run(["umount", str(where)], check=True)


@pytest.mark.parametrize("how", ["file size limit", "full disk"])
def test_a_write_that_fails_names_the_file_and_leaves_the_old_outputs(tmp_path: Path, how: str) -> None:
    """The metric CSV is small and written first, the weights do not fit: neither takes its place (issue 31.2)."""
    spec = write(tmp_path / "full.yaml", FULL)
    out = tmp_path / "out"
    with _small_disk(out) if how == "full disk" else contextlib.nullcontext():
        out.mkdir(exist_ok=True)
        for name, content in OLD.items():
            (out / name).write_bytes(content)
        done = subprocess.run([str(BIN / "orchestrate"), "run", str(spec), "--sync", "--no-progress"],
                              capture_output=True, text=True, cwd=tmp_path, timeout=120,
                              preexec_fn=_limited(1 << 20) if how == "file size limit" else None)
        reason = "File too large" if how == "file size limit" else "No space left on device"
        assert done.returncode == 1, done.stderr
        assert done.stderr.splitlines() == [
            f"error: cannot write out/w.npy: {reason}; no output of this run was written; the files already there "
            "are as they were (out/m.csv, out/w.npy)"]
        assert {p.name: p.read_bytes() for p in out.iterdir()} == OLD  # no temporary, no live file left


def test_a_rename_that_fails_midway_puts_the_old_files_back(tmp_path: Path) -> None:
    """The second target is a folder: the first file, already renamed, is put back as it was."""
    (tmp_path / "a.npy").write_bytes(b"old a")
    (tmp_path / "b.npy").mkdir()
    files = FileSet()
    for name in ("a.npy", "b.npy", "c.npy"):
        with files.open(str(tmp_path / "sub" / ".." / name)) as handle:
            handle.write(b"new " + name.encode())
    with pytest.raises(IsADirectoryError) as failed:
        files.commit()
    assert failed.value.filename == str(tmp_path / "sub" / ".." / "b.npy")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.npy", "b.npy"]  # no temporary, no old copy, no sub/
    assert (tmp_path / "a.npy").read_bytes() == b"old a"


def test_a_commit_keeps_the_old_files_until_it_settles_and_undo_puts_them_back(tmp_path: Path) -> None:
    (tmp_path / "a.npy").write_bytes(b"old a")
    files = FileSet()
    for name in ("a.npy", "b.npy"):
        with files.open(str(tmp_path / name)) as handle:
            handle.write(b"new")
    assert files.commit() == [str(tmp_path / "a.npy"), str(tmp_path / "b.npy")]
    assert (tmp_path / "a.npy").read_bytes() == b"new"
    assert files.undo() == ""  # another part of the commit failed
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.npy"] and (tmp_path / "a.npy").read_bytes() == b"old a"


@pytest.mark.cluster
def test_a_save_is_committed_with_the_outputs_or_not_at_all(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A save op's file (written on its worker) and the outputs: an output that cannot be written leaves
    the saved file as it was too; when all can be, the run says each file it wrote and saved."""
    spec = write(tmp_path / "spec.yaml", """\
        version: 1
        graph:
          - {name: a, op: ones, shape: [3]}
          - {name: keep, op: save, inputs: [a], path: out/ckpt.npy}
        outputs:
          a: out/a.npy
          keep: out/b.npy
        """)
    out = tmp_path / "out"
    out.mkdir()
    (out / "a.npy").write_bytes(b"old a")
    (out / "ckpt.npy").write_bytes(b"old checkpoint")
    (out / "b.npy").mkdir()  # a folder where an output goes (made after validation, as a checkpoint path made one)
    code, said, err = cli(["run", str(spec), "--no-progress"], capsys)
    assert code == 1, said + err
    assert err.splitlines() == [f"error: cannot write {os.path.relpath(out / 'b.npy')}: a folder is there; no output "
                                f"of this run was written; the files already there are as they were "
                                f"({os.path.relpath(out / 'a.npy')}, {os.path.relpath(out / 'b.npy')})"]
    assert sorted(p.name for p in out.iterdir()) == ["a.npy", "b.npy", "ckpt.npy"]
    assert (out / "a.npy").read_bytes() == b"old a" and (out / "ckpt.npy").read_bytes() == b"old checkpoint"
    (out / "b.npy").rmdir()
    code, said, err = cli(["run", str(spec), "--no-progress"], capsys)
    assert code == 0, said + err
    assert [line.split()[1] for line in said.splitlines() if line.startswith(("wrote ", "saved "))] == [
        os.path.relpath(out / name) for name in ("a.npy", "b.npy", "ckpt.npy")]
    np.testing.assert_array_equal(np.load(out / "ckpt.npy"), np.ones(3))
    assert sorted(p.name for p in out.iterdir()) == ["a.npy", "b.npy", "ckpt.npy"]


# ------------------------------------------------------------------- a sweep's table is an output


TABLED = """\
    version: 1
    graph:
      - {name: x, op: load, path: data/c.csv, shape: [4]}
      - name: s
        sweep:
          grid: {lam: [1.0, 2.0]}
          body:
            - {name: t, op: sum, inputs: [x]}
          table: {path: TABLE, metrics: [t]}
    outputs:
      x: o.csv
    """


@pytest.mark.parametrize(("table", "message", "hint"), [
    ("../t.csv", "table path '../t.csv' escapes the output directory", "remove '..' or set run.allow_absolute_paths: true"),
    ("/tmp/t.csv", "table path '/tmp/t.csv' is absolute",
     "use a path relative to the output directory, or set run.allow_absolute_paths: true"),
    ("o.csv", "table path 'o.csv' is also written by output 'x' (line 11)",
     "give each output and checkpoint a file of its own"),
    ("data/c.csv", "table path 'data/c.csv' is the file 'x' loads: the run would overwrite it",
     "write the result to another file"),
    ("t.npy", "table path 't.npy' is not a .csv file",
     "a table is written as CSV: end its path in .csv, e.g. results/search.csv"),
])
def test_a_table_path_obeys_the_rules_of_output_paths(tmp_path: Path, table: str, message: str, hint: str) -> None:
    (tmp_path / "data").mkdir()
    np.savetxt(tmp_path / "data" / "c.csv", np.ones(4))
    checked = check_file(write(tmp_path / "spec.yaml", TABLED.replace("TABLE", table)))
    assert [(d.line, d.column, d.message, d.hint) for d in checked.diagnostics] == [(9, 21, message, hint)]


def test_a_table_over_a_loaded_file_is_refused_at_run_time_with_output_dir(tmp_path: Path) -> None:
    """Validation sees the spec's output directory; --output-dir moves the table onto the data it loads."""
    (tmp_path / "data").mkdir()
    np.savetxt(tmp_path / "data" / "c.csv", np.ones(4))
    before = (tmp_path / "data" / "c.csv").read_bytes()
    spec = write(tmp_path / "spec.yaml", TABLED.replace("TABLE", "c.csv"))
    assert check_file(spec).ok(strict=True)
    with pytest.raises(RunError, match=r"^the table of sweep 's' would be written over .*data/c.csv, which is the file "
                                       r"op 'x' loads: write it somewhere else$"):
        run_file(spec, echo=lambda s: None, output_dir=str(tmp_path / "data"), sync=True)
    assert (tmp_path / "data" / "c.csv").read_bytes() == before
