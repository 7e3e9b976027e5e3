"""Cache options that cannot work are refused before anything runs, with one line and exit 1 or 2.

A ``--cache-dir`` that is a file or lies under one, an empty one, ``--resume``
with ``--no-cache``; ``cache list`` and ``cache clear`` of a spec that does not
exist or of a directory that is a file. The refusals run in a fresh interpreter
that shows ``distributed`` was never imported: no cluster can have started.
(Permissions cannot make a directory unwritable here: tests may run as root,
whom they do not stop. A path under a regular file is unwritable for everyone.)
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from orchestrator import run_file
from orchestrator.api import cache_entries, clear_cache
from orchestrator.cache import directory_problem
from orchestrator.errors import OrchestratorError, UsageError

SPEC = """\
    version: 1
    cache: true
    graph:
      - {name: a, op: ones, shape: [2]}
    outputs: {a: "-"}
    """

REFUSE = """\
import contextlib, io, json, sys
from orchestrator.cli import run_cli

results = []
for argv in json.loads(sys.argv[1]):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err):
        code = run_cli(argv, out=out)
    results.append([code, out.getvalue(), err.getvalue().splitlines()])
print(json.dumps({"results": results, "imported": sorted({m.split(".")[0] for m in sys.modules} & {"distributed"})}))
"""


def _spec(tmp_path: Path, text: str = SPEC) -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def test_cache_options_that_cannot_work_are_refused_before_anything_starts(tmp_path: Path) -> None:
    spec, file = _spec(tmp_path), tmp_path / "a-file"
    file.write_text("not a directory")
    cases = [
        (["run", str(spec), "--cache-dir", str(file)], 1,
         f"error: cache directory '{file}' is a file, not a directory (give --cache-dir a directory this run can "
         "write, or --no-cache)"),
        (["run", str(spec), "--cache-dir", str(file / "sub")], 1,
         f"error: cache directory '{file / 'sub'}' is inside '{file}', which is a file, not a directory (give "
         "--cache-dir a directory this run can write, or --no-cache)"),
        (["run", str(spec), "--cache-dir", ""], 2,
         "--cache-dir is empty: give a directory, or leave the option out for .orchestrate/cache beside the spec"),
        (["run", str(spec), "--resume", "--no-cache"], 2,
         "--resume reads and writes the cache, and --no-cache turns it off: give one of them"),
        (["cache", "list", str(tmp_path / "missing.yaml")], 1,
         f"error: spec {tmp_path / 'missing.yaml'} does not exist (give a spec, or --cache-dir DIR)"),
        (["cache", "clear", str(tmp_path)], 1, f"error: spec {tmp_path} is not a file (give a spec, or --cache-dir DIR)"),
        (["cache", "list", "--cache-dir", str(file)], 1, f"error: cache directory '{file}' is a file, not a directory"),
        (["cache", "clear", "--cache-dir", str(file)], 1, f"error: cache directory '{file}' is a file, not a directory"),
        (["cache", "list", "--cache-dir", ""], 2, "orchestrate cache: --cache-dir is empty: give a directory"),
    ]
    done = subprocess.run([sys.executable, "-c", REFUSE, json.dumps([argv for argv, _, _ in cases])],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["results"] == [[code, "", [line]] for _, code, line in cases]
    assert report["imported"] == []
    assert file.read_text() == "not a directory"
    assert not (tmp_path / ".orchestrate").exists()


def test_a_cache_directory_is_checked_for_what_it_is_used_for(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("x")
    assert directory_problem(str(tmp_path), write=True) is None
    assert directory_problem(str(tmp_path / "not" / "yet"), write=True) is None  # made when first written
    assert not (tmp_path / "not").exists()  # checking makes nothing
    assert directory_problem(str(tmp_path / "a-file"), write=False) == \
        f"cache directory '{tmp_path / 'a-file'}' is a file, not a directory"
    problem = directory_problem(str(tmp_path / "a-file" / "x" / "y"), write=True)
    assert problem == f"cache directory '{tmp_path / 'a-file' / 'x' / 'y'}' is inside '{tmp_path / 'a-file'}', " \
                      "which is a file, not a directory"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]  # the write probe left nothing behind


def test_the_api_refuses_the_same_settings_and_missing_directories_hold_nothing(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    with pytest.raises(UsageError, match="--resume reads and writes the cache"):
        run_file(spec, resume=True, use_cache=False)
    with pytest.raises(UsageError, match="--cache-dir is empty"):
        run_file(spec, cache_dir=" ")
    with pytest.raises(OrchestratorError, match="is a file, not a directory"):
        cache_entries(str(spec))
    assert cache_entries(str(tmp_path / "never-made")) == []  # nothing cached yet: not an error
    assert clear_cache(str(tmp_path / "never-made")) == 0
    assert not (tmp_path / "never-made").exists()


@pytest.mark.cluster
def test_the_cache_directory_is_checked_only_when_the_run_uses_it(tmp_path: Path) -> None:
    """A spec that caches nothing runs where .orchestrate cannot be made; one that caches is refused there."""
    (tmp_path / ".orchestrate").write_text("a file where the cache directory's parent would be")
    spec = _spec(tmp_path, SPEC.replace("cache: true", "cache: false"))
    np.testing.assert_array_equal(run_file(spec, echo=lambda _: None).values["a"], np.ones(2))
    cached = _spec(tmp_path)
    with pytest.raises(OrchestratorError, match=r"cache directory '.*\.orchestrate/cache' is inside '.*\.orchestrate', "
                                                r"which is a file"):
        run_file(cached, echo=lambda _: None)
    elsewhere = tmp_path / "caches" / "new"
    run_file(cached, echo=lambda _: None, cache_dir=str(elsewhere))  # a directory not made yet is made
    assert [e["what"] for e in cache_entries(str(elsewhere))] == ["a"]
