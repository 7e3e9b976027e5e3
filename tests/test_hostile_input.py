"""Hostile or broken input is refused quickly and clearly, never with a traceback.

* the invalid corpus, through the CLI: every line is a positioned diagnostic
  (``file:line:col:`` with both >= 1) or the summary, never a traceback
  (``test_invalid_corpus.py`` checks the exact texts; this module checks the
  guarantee for every line of every file, in every output format);
* YAML that attacks the loader (Python tags, alias bombs, 100 MB files) and
  specs that expand to absurd sizes (construct bombs, 10^9 tasks) are
  refused with their own diagnostic, in bounded time.

Time bounds here only catch hangs (a refusal that takes minutes); speed is
measured by the benchmarks.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from orchestrator.spec.load import MAX_SPEC_BYTES
from orchestrator.spec.records import OpRef

from cli_helpers import HANG, INVALID, at_repo_root, cli, codes, strict_file, timed_check, write  # noqa: F401 (a fixture)



# ------------------------------------------------------------------- the invalid corpus, line by line

DIAGNOSTIC = re.compile(r"^(specs/invalid/.+?):(\d+):(\d+): ")
SUMMARY = re.compile(r"^\d+ files? checked: ")


def test_the_invalid_corpus_has_at_least_60_files() -> None:
    assert len(INVALID) >= 60


@pytest.mark.parametrize("path", INVALID, ids=[Path(p).name for p in INVALID])
def test_every_output_line_is_a_positioned_diagnostic(path: str, at_repo_root: None,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(["validate", path], capsys)
    assert "Traceback" not in out + err and "internal error" not in out + err
    assert err == ""
    lines = out.splitlines()
    assert SUMMARY.match(lines[-1]), lines[-1]
    diagnostics = lines[:-1]
    assert diagnostics, "an invalid spec says what is wrong"
    for line in diagnostics:  # a message spanning lines would leave a line without a position
        match = DIAGNOSTIC.match(line)
        assert match, f"not a file:line:col: diagnostic: {line!r}"
        assert match[1] == path
        assert int(match[2]) >= 1 and int(match[3]) >= 1, line
    assert code == (0 if strict_file(path) else 1), out


def test_every_corpus_diagnostic_has_a_position_in_json_and_github_formats(at_repo_root: None,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(["validate", "--format", "json", *INVALID], capsys)
    assert code == 1 and "Traceback" not in out + err
    report = json.loads(out)
    assert [f["file"] for f in report["files"]] == INVALID
    for file in report["files"]:
        assert file["diagnostics"], file["file"]
        for d in file["diagnostics"]:
            assert d["file"] == file["file"]
            assert d["line"] >= 1 and d["column"] >= 1, d
            assert d["message"].strip() and d["code"].strip(), d
    code, out, err = cli(["validate", "--format", "github", *INVALID], capsys)
    assert code == 1 and "Traceback" not in out + err
    annotation = re.compile(r"^::(error|warning) file=specs/invalid/[^,]+,line=([1-9]\d*),col=([1-9]\d*),title=")
    assert all(annotation.match(line) for line in out.splitlines()), out


def test_the_whole_corpus_in_one_call_is_quick(at_repo_root: None, capsys: pytest.CaptureFixture[str]) -> None:
    start = time.perf_counter()
    code, _, _ = cli(["validate", *INVALID], capsys)
    assert code == 1
    assert time.perf_counter() - start < 30, "the corpus includes bombs: one of them was not refused quickly"

# ------------------------------------------------------------------- hostile YAML


@pytest.mark.parametrize("tag", [
    '!!python/object/apply:os.system ["touch {marker}"]',
    '!!python/object/apply:subprocess.check_call [["touch", "{marker}"]]',
    '!!python/object/new:os.system ["touch {marker}"]',
    "!!python/name:os.system",
    "!!python/module:os",
])
def test_python_tags_are_refused_and_run_nothing(tmp_path: Path, tag: str) -> None:
    marker = tmp_path / "pwned"
    spec = write(tmp_path / "spec.yaml", f"""\
        version: 1
        graph:
          - name: a
            op: constant
            value: {tag.format(marker=marker)}
        """)
    checked, elapsed = timed_check(spec)
    assert codes(checked) == ["yaml-tag"], [d.render() for d in checked.diagnostics]
    (d,) = checked.diagnostics
    assert (d.line, d.column, d.path) == (5, 12, ("graph", 0, "value"))
    assert "is not allowed" in d.message and tag.split()[0].split(":")[0] in d.message
    assert not marker.exists()
    assert elapsed < HANG


def test_a_python_tag_through_the_cli_runs_nothing_either(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    marker = tmp_path / "pwned"
    spec = write(tmp_path / "spec.yaml", f"""\
        version: 1
        graph:
          - {{name: a, op: constant, value: !!python/object/apply:os.system ["touch {marker}"]}}
        """)
    for command in ("validate", "plan", "run"):
        code, out, err = cli([command, str(spec)], capsys)
        assert code == 1 and "yaml-tag" not in err  # the code is for machines; people read the message
        assert "!!python/object/apply:os.system' is not allowed" in out + err
        assert "Traceback" not in out + err
    assert not marker.exists()


def billion_laughs(levels: int = 10, width: int = 10) -> str:
    lines = ["version: 1", 'l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, levels):
        lines.append(f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * width)}]")
    lines.append(f"graph: [{{name: a, op: constant, value: *l{levels - 1}}}]")
    return "\n".join(lines) + "\n"


def test_a_billion_laughs_is_refused_quickly(tmp_path: Path) -> None:
    spec = tmp_path / "laughs.yaml"
    spec.write_text(billion_laughs(), encoding="utf-8")
    assert spec.stat().st_size < 2000  # 10^10 strings once expanded
    checked, elapsed = timed_check(spec)
    assert codes(checked) == ["yaml-alias-bomb"]
    assert "expands to more than 2,000,000 nodes through aliases" in checked.diagnostics[0].message
    assert checked.diagnostics[0].line >= 1 and checked.diagnostics[0].column >= 1
    assert elapsed < HANG


def test_an_alias_bomb_in_mapping_merges_is_refused_quickly(tmp_path: Path) -> None:
    lines = ["version: 1", "m0: &m0 {a: 1, b: 2, c: 3, d: 4, e: 5, f: 6, g: 7, h: 8, i: 9, j: 10}"]
    for i in range(1, 9):
        lines.append(f"m{i}: &m{i} [{', '.join([f'*m{i - 1}'] * 10)}]")
    lines.append("graph: [{name: a, op: constant, value: 1, params: {x: *m8}}]")
    spec = tmp_path / "merge.yaml"
    spec.write_text("\n".join(lines) + "\n", encoding="utf-8")
    checked, elapsed = timed_check(spec)
    assert codes(checked) == ["yaml-alias-bomb"]
    assert elapsed < HANG


def test_a_sparse_100_mb_file_is_refused_before_it_is_read(tmp_path: Path) -> None:
    spec = tmp_path / "sparse.yaml"
    with open(spec, "wb") as handle:
        handle.truncate(100 * 1024 * 1024)  # a hole: no disk used, 100 MB of NUL bytes when read
    checked, elapsed = timed_check(spec)
    assert codes(checked) == ["too-large"]
    (d,) = checked.diagnostics
    assert (d.line, d.column) == (1, 1)
    assert d.message == f"file is 100.0 MiB; the limit is {MAX_SPEC_BYTES // 2**20}.0 MiB"
    assert elapsed < HANG


def test_a_real_100_mb_file_of_valid_yaml_is_refused(tmp_path: Path) -> None:
    spec = tmp_path / "big.yaml"
    line = b"  - {name: a, op: ones, shape: [2]}  # padding padding padding padding\n"
    with open(spec, "wb") as handle:
        handle.write(b"version: 1\ngraph:\n")
        handle.write(line * (100 * 1024 * 1024 // len(line) + 1))
    assert spec.stat().st_size > 100 * 1024 * 1024
    checked, elapsed = timed_check(spec)
    assert codes(checked) == ["too-large"]
    assert checked.diagnostics[0].message.startswith("file is 100.0 MiB; the limit is ")
    assert elapsed < HANG


def test_nesting_deeper_than_the_bound_is_refused(tmp_path: Path) -> None:
    spec = tmp_path / "deep.yaml"
    spec.write_text("version: 1\ngraph: " + "[" * 100_000 + "]" * 100_000 + "\n", encoding="utf-8")
    checked, elapsed = timed_check(spec)
    assert codes(checked) == ["yaml-too-deep"]
    assert elapsed < HANG


# ------------------------------------------------------------------- specs that expand to absurd sizes


def test_nested_replicates_are_refused_before_they_expand(tmp_path: Path) -> None:
    body = "[{name: c, op: ones, shape: [1]}]"
    for i in range(9):  # 10^9 copies of c from a file of one line
        body = f"[{{name: r{i}, replicate: {{devices: [{', '.join(['/cpu:0'] * 10)}], body: {body}}}}}]"
    spec = tmp_path / "bomb.yaml"
    spec.write_text(f"version: 1\ngraph: {body}\n", encoding="utf-8")
    checked, elapsed = timed_check(spec)
    assert codes(checked) == ["graph-size"], [d.render() for d in checked.diagnostics]
    assert "replicate 'r6' expands to" in checked.diagnostics[0].message  # the innermost one too big on its own
    assert "at most 1,000,000 are supported" in checked.diagnostics[0].message
    assert elapsed < HANG


def test_nested_sweeps_are_refused_before_they_expand(tmp_path: Path) -> None:
    body = "[{name: c, op: ones, shape: [1]}]"
    for i in range(9):
        body = f"[{{name: s{i}, sweep: {{param: p, values: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10], body: {body}}}}}]"
    spec = tmp_path / "bomb.yaml"
    spec.write_text(f"version: 1\ngraph: {body}\n", encoding="utf-8")
    checked, elapsed = timed_check(spec)
    assert codes(checked) == ["graph-size"]
    assert elapsed < HANG


@pytest.mark.parametrize("job, field", [
    ("{tasks: 1000000000}", "tasks"),
    ("{gpus: 1000000000}", "gpus"),
    ("{tasks: 10, gpus: 10, virtual_gpus: 1000}", "virtual_gpus"),
])
def test_a_cluster_of_a_billion_devices_is_refused(tmp_path: Path, job: str, field: str) -> None:
    spec = write(tmp_path / "spec.yaml", f"""\
        version: 1
        cluster: {{jobs: {{worker: {job}}}}}
        graph:
          - {{name: a, op: ones, shape: [2]}}
        """)
    checked, elapsed = timed_check(spec)
    assert codes(checked) == ["cluster-size"], [d.render() for d in checked.diagnostics]
    assert checked.diagnostics[0].path == ("cluster", "jobs", "worker", field)
    assert elapsed < HANG


@pytest.mark.parametrize("op", [
    "{name: b, op: split, inputs: [a], num: 1000000000}",
    "{name: b, op: call, fn: 'm:f', inputs: [a], outputs: 1000000000}",
])
def test_an_op_with_a_billion_outputs_is_refused(tmp_path: Path, op: str) -> None:
    spec = write(tmp_path / "spec.yaml", f"""\
        version: 1
        graph:
          - {{name: a, op: ones, shape: [2]}}
          - {op}
        """)
    checked, elapsed = timed_check(spec)
    assert codes(checked) == ["graph-size"]
    assert checked.diagnostics[0].message == "op 'b' makes 1,000,000,000 outputs; at most 1,000,000 are supported"
    assert elapsed < HANG


def test_shapes_are_inferred_without_allocating_arrays(tmp_path: Path) -> None:
    """A 60000 x 60000 matmul was once inferred by running np.matmul on empty arrays (minutes, 29 GB)."""
    spec = write(tmp_path / "spec.yaml", """\
        version: 1
        cluster: {jobs: {localhost: {memory_limit: 1GiB}}}
        graph:
          - {name: a, op: zeros, shape: [60000, 60000]}
          - {name: b, op: zeros, shape: [60000, 60000]}
          - {name: c, op: matmul, inputs: [a, b]}
        """)
    checked, elapsed = timed_check(spec)
    assert codes(checked) == ["memory"]
    assert checked.spec is not None and checked.spec.value(OpRef("c")).shape == (60000, 60000)
    assert elapsed < HANG


def test_arrays_larger_than_numpy_allows_are_refused(tmp_path: Path) -> None:
    spec = write(tmp_path / "spec.yaml", f"""\
        version: 1
        graph:
          - {{name: a, op: zeros, shape: [{10**30}, 2]}}
          - {{name: b, op: ones, shape: [2]}}
          - {{name: c, op: add, inputs: [a, b]}}
        """)
    checked, _ = timed_check(spec)
    assert codes(checked) == ["shape"]  # only 'a': 'c' is not blamed for it
    assert checked.diagnostics[0].path == ("graph", 0, "shape")
    assert "would be larger than any array can be" in checked.diagnostics[0].message


@pytest.mark.parametrize("size", ["1e400", "99999999999999999999999 TiB", 10**30])
def test_sizes_beyond_any_memory_are_diagnostics(tmp_path: Path, size: object) -> None:
    spec = write(tmp_path / "spec.yaml", f"""\
        version: 1
        cluster: {{jobs: {{localhost: {{memory_limit: {json.dumps(size)}}}}}}}
        graph:
          - {{name: a, op: ones, shape: [2]}}
        """)
    checked, _ = timed_check(spec)
    assert codes(checked) == ["size"], [d.render() for d in checked.diagnostics]


@pytest.mark.parametrize("yaml_key", ["1", "null", "yes", "1.5"])
def test_keys_that_are_not_text_are_diagnostics(tmp_path: Path, yaml_key: str) -> None:
    spec = write(tmp_path / "spec.yaml", f"""\
        version: 1
        cluster:
          jobs:
            {yaml_key}: {{gpus: 1}}
        graph:
          - {{name: a, op: ones, shape: [2]}}
          - name: t
            iterate:
              steps: 2
              state: {{{yaml_key}: a}}
              update: {{{yaml_key}: b}}
              body:
                - {{name: b, op: identity, inputs: [a]}}
        outputs:
          {yaml_key}: x.npy
        """)
    checked, _ = timed_check(spec)
    assert codes(checked) == ["key-type"] * 4, [d.render() for d in checked.diagnostics]
    assert [d.line for d in checked.diagnostics] == [4, 10, 11, 15]


