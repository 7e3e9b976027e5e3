"""The invalid-spec corpus: every file in specs/invalid/ must fail with exactly the text it announces.

Each file starts with header comments::

    # expect: 12:7: graph[2].inputs[0]: input 'bb' of op 'c' is not defined (did you mean 'b'?)
    # strict: true        (only for files whose point is a warning)

An ``expect`` line is ``Diagnostic.render()`` without the leading ``file:``.
The real CLI runs in-process (``run_cli``), as ``orchestrate validate`` would;
a new file in the folder is picked up without touching this module.

Every error of the corpus has a hint, and ``orchestrate run`` refuses every
file (except those whose point is a warning) with the same diagnostics,
before any cluster starts: a fresh interpreter runs the whole corpus and
shows that ``distributed`` was never even imported.
"""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from dataclasses import dataclass
from glob import glob
from pathlib import Path

import pytest

from orchestrator.cli import run_cli

ROOT = Path(__file__).resolve().parent.parent
# Paths are relative to the repository root, as a user (and CI) would type them;
# the diagnostics echo the path exactly as given.
INVALID = sorted(glob("specs/invalid/*.yaml", root_dir=ROOT))
VALID = sorted(glob("specs/valid/*.yaml", root_dir=ROOT))
GITHUB_LINE = re.compile(r"^::(error|warning) file=(?P<file>[^,]+),line=(?P<line>\d+),col=(?P<col>\d+),"
                         r"title=(?P<title>[^:]+)::(?P<message>.+)$")


@pytest.fixture(autouse=True)
def _at_repo_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)


@dataclass(frozen=True)
class Header:
    expects: tuple[str, ...]
    strict: bool


def read_header(path: str) -> Header:
    """The ``# expect:`` and ``# strict:`` lines of the leading comment block."""
    expects: list[str] = []
    strict = False
    for line in (ROOT / path).read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        if line.startswith("# expect: "):
            expects.append(line.removeprefix("# expect: "))
        elif line.strip() == "# strict: true":
            strict = True
    return Header(tuple(expects), strict)


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """Exit code, stdout and stderr of ``orchestrate ARGV``, run in-process."""
    out = io.StringIO()
    code = run_cli(argv, out=out)
    captured = capsys.readouterr()
    return code, out.getvalue() + captured.out, captured.err


# ------------------------------------------------------------------- the corpus


def test_the_corpus_is_large_enough() -> None:
    assert len(INVALID) >= 130, INVALID


def test_every_corpus_file_announces_what_it_expects() -> None:
    for path in INVALID:
        assert re.fullmatch(r"specs/invalid/\d{2,3}-[a-z0-9-]+\.yaml", path), f"{path}: name it NN-short-name.yaml"
        assert read_header(path).expects, f"{path}: no '# expect:' line"


@pytest.mark.parametrize("path", INVALID, ids=[Path(p).name for p in INVALID])
def test_invalid_spec_fails_with_the_expected_diagnostics(path: str, capsys: pytest.CaptureFixture[str]) -> None:
    header = read_header(path)
    code, out, err = run(["validate", path] + (["--strict"] if header.strict else []), capsys)
    assert "Traceback" not in out + err
    assert "internal error" not in err
    lines = out.splitlines()
    for expect in header.expects:
        assert f"{path}:{expect}" in lines, f"missing:\n  {path}:{expect}\ngot:\n  " + "\n  ".join(lines)
    # One deliberate problem per file (a few show several): nothing unannounced.
    reported = [line for line in lines if line.startswith(f"{path}:")]
    assert len(reported) == len(header.expects), "\n".join(reported)
    assert code == 1, out


def test_every_error_of_the_corpus_has_a_hint(capsys: pytest.CaptureFixture[str]) -> None:
    """A message says what is wrong, the hint what to write instead: no error goes without one."""
    code, out, _ = run(["validate", "--format", "json", *INVALID], capsys)
    assert code == 1
    files = json.loads(out)["files"]
    assert [f["file"] for f in files] == INVALID
    errors = [d for f in files for d in f["diagnostics"] if d["severity"] == "error"]
    assert len(errors) >= len(INVALID) - len([p for p in INVALID if read_header(p).strict])
    without = [f"{d['file']}:{d['line']}:{d['column']}: {d['path']}: {d['message']}"
               for d in errors if not d["hint"].strip()]
    assert not without, "errors without a hint:\n  " + "\n  ".join(without)


# ------------------------------------------------------------------- run refuses them too

# Files whose point is a warning are valid for `run` (it has no --strict): they are not refused.
REFUSED = [p for p in INVALID if not read_header(p).strict]


@pytest.mark.parametrize("path", REFUSED, ids=[Path(p).name for p in REFUSED])
def test_run_refuses_every_invalid_spec(path: str, capsys: pytest.CaptureFixture[str],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """``orchestrate run`` prints the same diagnostics on stderr and exits 1 without running anything."""
    import orchestrator.api

    def no_run(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"{path}: run would have started a cluster")

    monkeypatch.setattr(orchestrator.api, "run_plan", no_run)
    code, out, err = run(["run", path], capsys)
    assert code == 1, out + err
    assert "Traceback" not in out + err and "internal error" not in err
    expects = [f"{path}:{expect}" for expect in read_header(path).expects]
    assert err.splitlines()[0] == expects[0], err
    assert sorted(line for line in err.splitlines() if line.startswith(f"{path}:")) == sorted(expects), err
    assert not out, "nothing is printed on stdout: no dashboard link, no placement"


RUN_ALL = """\
import contextlib, io, json, sys
from orchestrator.cli import run_cli

results = {}
for path in sys.argv[1:]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = run_cli(["run", path], out=io.StringIO())
    results[path] = [code, err.getvalue().splitlines()[:1]]
loaded = sorted({name.split(".")[0] for name in sys.modules} & {"distributed", "tornado", "cupy"})
print(json.dumps({"results": results, "imported": loaded}))
"""


def test_run_starts_no_cluster_for_any_invalid_spec() -> None:
    """In a fresh interpreter (this one may have imported distributed for other tests): without
    ``distributed`` imported, no cluster (LocalCluster, Scheduler, Nanny) can have been started."""
    done = subprocess.run([sys.executable, "-c", RUN_ALL, *REFUSED], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["imported"] == []
    for path in REFUSED:
        code, first = report["results"][path]
        assert code == 1, (path, first)
        assert first == [f"{path}:{read_header(path).expects[0]}"], (path, first)


@pytest.mark.parametrize("path", [p for p in INVALID if read_header(p).strict],
                         ids=[Path(p).name for p in INVALID if read_header(p).strict])
def test_warning_files_pass_without_strict(path: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["validate", path], capsys)
    assert code == 0, out + err
    assert ": warning: " in out


def test_valid_specs_pass(capsys: pytest.CaptureFixture[str]) -> None:
    assert VALID
    code, out, err = run(["validate", *VALID], capsys)
    assert code == 0, out + err
    assert "all valid" in out.splitlines()[-1]
    assert "Traceback" not in out + err


# ------------------------------------------------------------------- formats


SEVERAL = "specs/invalid/80-several-errors.yaml"


def test_json_format(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["validate", "--format", "json", SEVERAL], capsys)
    assert code == 1
    report = json.loads(out)
    assert report["errors"] == 3 and report["warnings"] == 0
    (file,) = report["files"]
    assert file["file"] == SEVERAL and file["valid"] is False
    first = file["diagnostics"][0]
    assert first == {
        "code": "size", "severity": "error", "file": SEVERAL, "line": 8, "column": 38,
        "path": "cluster.jobs.worker.memory_limit", "message": "cannot read 'lots' as a size",
        "hint": "write e.g. 512MB, 2GiB or a number of bytes",
    }
    assert [d["code"] for d in file["diagnostics"]] == ["size", "unknown-op", "unknown-input"]


def test_json_format_of_a_valid_file(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["validate", "--format", "json", VALID[0]], capsys)
    assert code == 0
    assert json.loads(out)["errors"] == 0


def test_github_format(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["validate", "--format", "github", SEVERAL], capsys)
    assert code == 1
    lines = out.splitlines()
    assert len(lines) == 3
    matches = [GITHUB_LINE.match(line) for line in lines]
    assert all(matches), lines
    first = matches[0]
    assert first is not None
    assert (first["file"], first["line"], first["col"]) == (SEVERAL, "8", "38")
    assert first["message"] == "cannot read 'lots' as a size (write e.g. 512MB, 2GiB or a number of bytes)"
    assert "size" in first["title"]
    assert lines[2].startswith(f"::error file={SEVERAL},line=12,col=36,")
    assert lines[2].endswith("::input 'bb' of op 'c' is not defined (did you mean 'b'?)")


def test_github_format_marks_warnings(capsys: pytest.CaptureFixture[str]) -> None:
    path = "specs/invalid/53-rule-matches-nothing.yaml"
    code, out, _ = run(["validate", "--format", "github", path], capsys)
    assert code == 0
    assert out.startswith(f"::warning file={path},line=")


# ------------------------------------------------------------------- usage


@pytest.mark.parametrize("argv", [
    ["validate"],                                       # no files
    ["validate", "--format", "yaml", SEVERAL],          # unknown format
    ["validate", "--bogus", SEVERAL],                   # unknown flag
])
def test_usage_errors_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(argv, capsys)
    assert code == 2
    assert "Traceback" not in out + err
    assert err.strip(), "a usage error says what is wrong"


def test_a_missing_file_is_a_diagnostic_not_a_crash(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["validate", "specs/invalid/does-not-exist.yaml"], capsys)
    assert code == 1
    assert out.startswith("specs/invalid/does-not-exist.yaml:1:1: <root>: cannot read file:")
    assert "Traceback" not in out + err
