"""Tests of orchestrator.spec.load: real YAML text and real files, no mocks.

Most behaviour is checked with both loaders: libyaml's (the one used when it is
installed) and the pure-Python one (used when it is not), through
``load._load_text_with``.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
import yaml

from orchestrator.spec import load
from orchestrator.errors import Diagnostic, LoadError
from orchestrator.spec.records import Document

TAG_HINT = "only plain YAML is accepted: mappings, lists, strings, numbers, booleans, null"
DUP_HINT = "remove one of them; YAML would silently keep the last"
MAPPING_HINT = "a spec starts with 'version: 1'"

LOADERS = [load.SpecLoader, load._loader_class(yaml.SafeLoader)]
LOADER_IDS = ["default", "pure-python"]


@pytest.fixture(params=LOADERS, ids=LOADER_IDS)
def loader_class(request: pytest.FixtureRequest) -> type:
    return request.param


def parse(text: str | bytes, loader_class: type = load.SpecLoader) -> Document:
    return load._load_text_with(text, "spec.yaml", ".", loader_class)


def problems(text: str | bytes, loader_class: type = load.SpecLoader) -> list[Diagnostic]:
    with pytest.raises(LoadError) as caught:
        parse(text, loader_class)
    return list(caught.value.diagnostics)


def only_problem(text: str | bytes, loader_class: type = load.SpecLoader) -> Diagnostic:
    found = problems(text, loader_class)
    assert len(found) == 1, [d.render() for d in found]
    return found[0]


def write(tmp_path: Path, content: str | bytes, name: str = "spec.yaml") -> Path:
    path = tmp_path / name
    if isinstance(content, str):
        path.write_text(content, encoding="utf-8")
    else:
        path.write_bytes(content)
    return path


SPEC = """\
version: 1
graph:
  - name: a
    op: add
    inputs: [x, y]
  - name: b
    params:
      scale: 2
2: two
yes: true
"""


# ------------------------------------------------------------------- loader choice


def test_libyaml_loader_is_used_when_available() -> None:
    if yaml.__with_libyaml__:
        assert load.LOADER_BASE is yaml.CSafeLoader
    else:
        assert load.LOADER_BASE is yaml.SafeLoader
    assert issubclass(load.SpecLoader, load.LOADER_BASE)
    assert issubclass(load.SpecLoader, yaml.constructor.SafeConstructor)


# ------------------------------------------------------------------- documents


def test_load_file_returns_plain_data_and_names_the_file_as_given(tmp_path: Path) -> None:
    path = write(tmp_path, SPEC)
    doc = load.load_file(path)
    assert doc.file == str(path)
    assert doc.directory == str(tmp_path.resolve())
    assert doc.data["graph"][0] == {"name": "a", "op": "add", "inputs": ["x", "y"]}
    assert load.load_file(str(path), display_name="shown.yaml").file == "shown.yaml"


def test_load_file_directory_is_absolute_for_a_relative_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path, "version: 1\n")
    monkeypatch.chdir(tmp_path)
    doc = load.load_file("spec.yaml")
    assert doc.file == "spec.yaml"
    assert doc.directory == os.path.abspath(".")


def test_load_text_accepts_str_and_bytes() -> None:
    doc = load.load_text("version: 1\n")
    assert (doc.file, doc.data, doc.directory) == ("<string>", {"version": 1}, os.path.abspath("."))
    assert load.load_text(b"version: 1\n", file="x.yaml", directory="/tmp").data == {"version": 1}


# ------------------------------------------------------------------- positions


def test_locate_nested_paths(loader_class: type) -> None:
    doc = parse(SPEC, loader_class)
    assert doc.locate(()) == (1, 1)
    assert doc.locate(("version",)) == (1, 10)
    assert doc.locate(("graph",)) == (3, 3)
    assert doc.locate(("graph", 1)) == (6, 5)
    assert doc.locate(("graph", 0, "inputs")) == (5, 13)
    assert doc.locate(("graph", 0, "inputs", 1)) == (5, 17)
    assert doc.locate(("graph", 1, "params", "scale")) == (8, 14)


def test_locate_keys(loader_class: type) -> None:
    doc = parse(SPEC, loader_class)
    assert doc.locate(("graph", 1, "params", "scale"), key=True) == (8, 7)
    assert doc.locate(("graph", 0, "inputs"), key=True) == (5, 5)
    # The last part is a sequence index: there is no key, the item itself is meant.
    assert doc.locate(("graph", 0, "inputs", 1), key=True) == (5, 17)


def test_locate_missing_paths_resolve_to_the_deepest_ancestor(loader_class: type) -> None:
    doc = parse(SPEC, loader_class)
    assert doc.locate(("graph", 7, "name")) == (3, 3)
    assert doc.locate(("graph", 0, "missing")) == (3, 5)
    assert doc.locate(("graph", 0, "missing"), key=True) == (3, 5)
    assert doc.locate(("graph", 0, "name", "deeper")) == (3, 11)
    assert doc.locate(("nope",)) == (1, 1)
    assert doc.locate(("graph", "name")) == (3, 3)  # a key asked of a list


def test_locate_non_string_keys_by_their_text(loader_class: type) -> None:
    doc = parse(SPEC, loader_class)
    assert doc.data[2] == "two" and doc.data[True] is True
    assert doc.locate((2,), key=True) == (9, 1)
    assert doc.locate(("2",), key=True) == (9, 1)
    assert doc.locate((True,), key=True) == (10, 1)


def test_locate_in_a_large_mapping_and_last_key_wins() -> None:
    text = "version: 1\n" + "".join(f"k{i}: {i}\n" for i in range(100))
    doc = parse(text)
    assert doc.locate(("k99",), key=True) == (101, 1)
    assert doc.locate(("k100",)) == (1, 1)


def test_keys_that_are_not_text_are_also_found_by_their_spelling(loader_class: type) -> None:
    """Diagnostics name ``on:`` as the user wrote it; its path must still lead to it."""
    doc = parse("a: {on: 1, 'on': 2}\nb: {yes: 1, x: 2}\n" + "big:\n" + "".join(f"  k{i}: {i}\n" for i in range(40))
                + "  Off: 3\n", loader_class)
    assert doc.data["a"] == {True: 1, "on": 2}
    assert doc.locate(("b", "yes"), key=True) == (2, 5)
    assert doc.locate(("big", "Off"), key=True) == (44, 3)  # a mapping large enough to be indexed
    assert doc.locate(("a", "on"), key=True) == (1, 12)  # text written as text comes first
    assert doc.locate(("a", "True"), key=True) == (1, 5)


def test_the_written_text_of_keys_and_values(loader_class: type) -> None:
    doc = parse("a: {on: 1e3, NO: x}\nb: [0x1f, '1.50']\nc: {k: [1]}\n", loader_class)
    written = doc.locate_fn.written  # type: ignore[attr-defined]
    assert written(("a", "True"), True) == "on"
    assert written(("a", "on"), True) == "on"
    assert written(("a", "False"), True) == "NO"
    assert written(("a", "True")) == "1e3"
    assert written(("b", 0)) == "0x1f" and written(("b", 1)) == "1.50"
    assert written(("b", 0), True) is None  # a list item has no key
    assert written(("c", "k")) is None  # not a scalar
    assert written(("missing",)) is None and written(("a", "x")) is None


def test_locate_keys_that_came_from_a_merge(loader_class: type) -> None:
    text = "base: &b\n  x: 1\n  y: 2\nop:\n  <<: *b\n  x: 5\n"
    doc = parse(text, loader_class)
    assert doc.data["op"] == {"x": 5, "y": 2}
    assert doc.locate(("op", "x")) == (6, 6)  # the explicit override
    assert doc.locate(("op", "y")) == (3, 6)  # where the merged value is written


# ------------------------------------------------------------------- duplicates


def test_duplicate_key_is_reported_at_the_second_one(loader_class: type) -> None:
    text = "version: 1\ngraph:\n  - name: a\n    op: add\n    name: b\n"
    problem = only_problem(text, loader_class)
    assert problem.code == "duplicate-key"
    assert problem.render() == (
        f"spec.yaml:5:5: graph[0].name: duplicate key 'name' (first defined on line 3) ({DUP_HINT})"
    )


def test_every_duplicate_key_is_reported(loader_class: type) -> None:
    text = "a: 1\nb:\n  x: 1\n  x: 2\n  x: 3\na: 4\n"
    found = problems(text, loader_class)
    assert [(d.code, d.line, d.column, d.path) for d in found] == [
        ("duplicate-key", 4, 3, ("b", "x")),
        ("duplicate-key", 5, 3, ("b", "x")),
        ("duplicate-key", 6, 1, ("a",)),
    ]
    assert found[1].message == "duplicate key 'x' (first defined on line 3)"
    assert found[2].message == "duplicate key 'a' (first defined on line 1)"


@pytest.mark.parametrize("second", ["0x1", "true"])  # 1 == True: one dict key
def test_duplicate_keys_compare_constructed_values(second: str, loader_class: type) -> None:
    problem = only_problem(f"1: a\n{second}: b\n", loader_class)
    assert (problem.code, problem.line, problem.path) == ("duplicate-key", 2, (1,))
    assert problem.message == f"duplicate key '{second}' (the same key as '1' on line 1)"


def test_merge_keys_overridden_explicitly_are_not_duplicates(loader_class: type) -> None:
    text = (
        "defaults: &defaults\n  device: cpu\n  retries: 1\n"
        "more: &more\n  <<: *defaults\n  retries: 2\n"
        "op:\n  <<: [*more, *defaults]\n  device: gpu\n"
    )
    doc = parse(text, loader_class)
    assert doc.data["more"] == {"device": "cpu", "retries": 2}
    assert doc.data["op"] == {"device": "gpu", "retries": 2}


def test_a_duplicate_inside_a_merge_source_is_still_found(loader_class: type) -> None:
    text = "base: &b\n  x: 1\n  x: 2\nop:\n  <<: *b\n"
    problem = only_problem(text, loader_class)
    assert (problem.line, problem.column, problem.path) == (3, 3, ("base", "x"))


# ------------------------------------------------------------------- tags


def test_python_tag_is_refused_at_its_position(loader_class: type) -> None:
    text = "version: 1\nrun: !!python/object/apply:os.system ['echo hi']\n"
    problem = only_problem(text, loader_class)
    assert problem.code == "yaml-tag"
    assert problem.render() == (
        f"spec.yaml:2:6: run: tag '!!python/object/apply:os.system' is not allowed ({TAG_HINT})"
    )


def test_python_name_tag_on_a_scalar_is_refused(loader_class: type) -> None:
    text = "graph:\n  - op: !!python/name:os.system ''\n"
    problem = only_problem(text, loader_class)
    assert (problem.code, problem.line, problem.column, problem.path) == ("yaml-tag", 2, 9, ("graph", 0, "op"))
    assert problem.message == "tag '!!python/name:os.system' is not allowed"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a: !custom 1\n", "tag '!custom' is not allowed"),
        ("a: !!binary aGVsbG8=\n", "tag '!!binary' is not allowed"),
        ("a: !!set {x, y}\n", "tag '!!set' is not allowed"),
        ("a: !!str [1]\n", "tag '!!str' is not allowed on a list"),
    ],
)
def test_unknown_or_non_plain_tags_are_refused(text: str, message: str, loader_class: type) -> None:
    problem = only_problem(text, loader_class)
    assert (problem.code, problem.line, problem.column, problem.message) == ("yaml-tag", 1, 4, message)


def test_explicit_plain_tags_are_fine(loader_class: type) -> None:
    doc = parse("a: !!str 12\nb: !!float 1\nc: !!null ''\nd: =\n", loader_class)
    assert doc.data == {"a": "12", "b": 1.0, "c": None, "d": "="}


def test_an_explicit_tag_with_a_wrong_value_is_an_error(loader_class: type) -> None:
    problem = only_problem("a:\n  b: !!int abc\n", loader_class)
    assert problem.render() == "spec.yaml:2:6: a.b: 'abc' is not a valid !!int (fix the value or remove the tag)"


# ------------------------------------------------------------------- aliases


def test_anchors_and_aliases_are_allowed(loader_class: type) -> None:
    doc = parse("shape: &s [2, 3]\na: {shape: *s}\nb: {shape: *s}\n", loader_class)
    assert doc.data == {"shape": [2, 3], "a": {"shape": [2, 3]}, "b": {"shape": [2, 3]}}


def billion_laughs(levels: int = 9, width: int = 9) -> str:
    lines = ["l0: &l0 [" + ", ".join(["lol"] * width) + "]"]
    for level in range(1, levels):
        lines.append(f"l{level}: &l{level} [" + ", ".join([f"*l{level - 1}"] * width) + "]")
    return "\n".join(lines) + "\n"


def test_alias_bomb_is_refused(loader_class: type) -> None:
    problem = only_problem(billion_laughs(), loader_class)
    assert problem.code == "yaml-alias-bomb"
    assert problem.render() == (
        "spec.yaml:1:1: <root>: the document expands to more than 2,000,000 nodes through aliases"
        " (an alias bomb? reduce the use of anchors (&) and aliases (*))"
    )


def test_many_aliases_below_the_bound_are_fine() -> None:
    doc = parse(billion_laughs(levels=4, width=9))  # 9**4 leaves
    assert len(doc.data["l3"][8][8][8]) == 9


def test_recursive_alias_is_refused(loader_class: type) -> None:
    problem = only_problem("version: 1\nloop: &x\n  - 1\n  - *x\n", loader_class)
    assert problem.code == "yaml-recursive"
    assert (problem.line, problem.column, problem.path) == (4, 5, ("loop", 1))
    assert problem.message == "alias '*x' is inside the node it refers to, which would be infinite"


def test_undefined_alias_and_duplicate_anchor(loader_class: type) -> None:
    undefined = only_problem("a: *nope\n", loader_class)
    assert (undefined.code, undefined.line, undefined.column) == ("yaml-alias", 1, 4)
    assert undefined.message == "alias '*nope' refers to an anchor that is not defined before it"
    twice = only_problem("a: &x 1\nb: &x 2\n", loader_class)
    assert (twice.code, twice.line, twice.column) == ("yaml-alias", 2, 4)
    assert twice.message == "anchor '&x' is defined twice (first on line 1)"


def test_deep_nesting_is_refused_without_crashing(loader_class: type) -> None:
    # libyaml's own composer recurses in C: 50,000 brackets kill the interpreter.
    problem = only_problem("a: " + "[" * 100_000 + "]" * 100_000 + "\n", loader_class)
    assert problem.code == "yaml-too-deep"
    assert (problem.line, problem.column) == (1, 4 + load.MAX_NESTING_DEPTH - 1)
    assert problem.message == f"the document nests deeper than {load.MAX_NESTING_DEPTH} levels"


def test_deep_block_nesting_is_refused_at_our_bound(loader_class: type) -> None:
    # 1,100 block levels: libyaml 6.0.4 stops at about 1,000 ("while increasing
    # block level"), older libyaml and the pure scanner go on; the bound is ours.
    text = "".join("  " * level + "a:\n" for level in range(1_100)) + "  " * 1_100 + "b: 1\n"
    problem = only_problem(text, loader_class)
    assert problem.code == "yaml-too-deep"
    assert (problem.line, problem.column) == (load.MAX_NESTING_DEPTH + 1, 2 * load.MAX_NESTING_DEPTH + 1)
    assert problem.hint == "flatten the structure; no spec needs nesting this deep"


class _LimitedScanner(yaml.SafeLoader):
    """A pure scanner with libyaml 6.0.4's flow-level limit, raised as libyaml raises it."""

    def fetch_flow_collection_start(self, token_class: type) -> None:
        if self.flow_level >= 1_000:
            mark = self.get_mark()
            raise yaml.scanner.ScannerError(
                "while increasing flow level", mark, "exceeded maximum nesting depth", mark
            )
        super().fetch_flow_collection_start(token_class)  # type: ignore[misc]


@pytest.mark.parametrize("brackets", [100_000, 1_001])
def test_a_scanner_nesting_limit_is_reported_as_too_deep(brackets: int) -> None:
    # Whichever bound is hit first, the user sees yaml-too-deep with our hint,
    # never the scanner's "exceeded maximum nesting depth" as a syntax error.
    limited = load._loader_class(_LimitedScanner)
    problem = only_problem("a: " + "[" * brackets + "]" * brackets + "\n", limited)
    assert problem.code == "yaml-too-deep"
    assert problem.message == f"the document nests deeper than {load.MAX_NESTING_DEPTH} levels"
    assert problem.hint == "flatten the structure; no spec needs nesting this deep"
    assert problem.line == 1


def test_libyaml_nesting_limit_is_reported_at_our_bound() -> None:
    # PyYAML 6.0.4's libyaml raises its own ScannerError at about 1,000 flow
    # levels, before our composer sees level 200; 6.0.3 composes to our bound.
    # Either way the same diagnostic, at the same place.
    if not yaml.__with_libyaml__:
        pytest.skip("PyYAML was built without libyaml")
    text = "a: " + "[" * 5_000 + "]" * 5_000 + "\n"
    problem = only_problem(text, load._loader_class(yaml.CSafeLoader))
    assert (problem.code, problem.line, problem.column) == ("yaml-too-deep", 1, 4 + load.MAX_NESTING_DEPTH - 1)
    assert problem.path == ("a", 0, 0, 0, 0, 0, 0, 0)


# ------------------------------------------------------------------- syntax


def test_syntax_error_has_the_exact_position(loader_class: type) -> None:
    problem = only_problem("version: 1\ngraph: a: b\n", loader_class)
    assert (problem.code, problem.line, problem.column, problem.path) == ("yaml-syntax", 2, 9, ())
    assert problem.message.startswith("mapping values are not allowed")
    assert problem.hint == "check indentation and quoting near here"


def test_syntax_error_message_includes_the_context(loader_class: type) -> None:
    problem = only_problem("version: 1\ngraph\nops: 2\n", loader_class)
    assert (problem.code, problem.line, problem.column) == ("yaml-syntax", 3, 1)
    assert problem.message == (
        "could not find expected ':' while scanning a simple key that starts at line 2, column 1"
    )


def test_unclosed_flow_sequence(loader_class: type) -> None:
    problem = only_problem("a: [1, 2\nb: 3\n", loader_class)
    assert problem.code == "yaml-syntax"
    assert "flow" in problem.message and problem.line >= 2


def test_control_character_is_refused_with_its_position(loader_class: type) -> None:
    problem = only_problem("a: 1\nb: é\x01\n", loader_class)
    assert problem.render() == (
        "spec.yaml:2:5: <root>: character U+0001 is not allowed in YAML"
        " (remove it, or write it as the escape \\u0001 inside double quotes)"
    )


def test_multiple_documents_are_refused_at_the_second(loader_class: type) -> None:
    problem = only_problem("version: 1\n---\nversion: 2\n", loader_class)
    assert (problem.code, problem.line, problem.column) == ("yaml-multiple-documents", 2, 1)
    assert problem.message == "the file holds more than one YAML document"


def test_one_explicit_document_is_fine(loader_class: type) -> None:
    assert parse("---\nversion: 1\n...\n", loader_class).data == {"version": 1}


# ------------------------------------------------------------------- encoding


def test_non_utf8_file_reports_the_bad_byte(tmp_path: Path) -> None:
    path = write(tmp_path, b"version: 1\nname: caf\xe9 \xc3\xa9\n")
    with pytest.raises(LoadError) as caught:
        load.load_file(path, display_name="bad.yaml")
    (problem,) = caught.value.diagnostics
    assert problem.render() == (
        "bad.yaml:2:10: <root>: file is not valid UTF-8 (byte 0xe9 at offset 20) (save the file as UTF-8)"
    )


def test_non_utf8_column_counts_characters_and_skips_the_bom() -> None:
    problem = only_problem(b"\xef\xbb\xbfa: \xc3\xa9\xff\n")
    assert (problem.code, problem.line, problem.column) == ("encoding", 1, 5)
    assert problem.message == "file is not valid UTF-8 (byte 0xff at offset 8)"


def test_utf8_bom_is_accepted(tmp_path: Path) -> None:
    doc = load.load_file(write(tmp_path, b"\xef\xbb\xbfversion: 1\nname: caf\xc3\xa9\n"))
    assert doc.data == {"version": 1, "name": "café"}
    assert doc.locate(("name",)) == (2, 7)
    assert load.load_text("\ufeffversion: 1\n").data == {"version": 1}


# ------------------------------------------------------------------- top level


@pytest.mark.parametrize(
    ("text", "found", "position"),
    [
        ("- version: 1\n", "a list", (1, 1)),
        ("\n\nhello\n", "a string", (3, 1)),
        ("42\n", "a number", (1, 1)),
        ("", "an empty document", (1, 1)),
        ("# only a comment\n", "an empty document", (1, 1)),
        ("---\n", "an empty document", (1, 1)),
    ],
)
def test_top_level_must_be_a_mapping(text: str, found: str, position: tuple[int, int], loader_class: type) -> None:
    problem = only_problem(text, loader_class)
    assert problem.code == "not-a-mapping"
    assert (problem.line, problem.column) == position
    assert problem.render() == (
        f"spec.yaml:{position[0]}:{position[1]}: <root>: "
        f"the top level must be a mapping (found {found}) ({MAPPING_HINT})"
    )


# ------------------------------------------------------------------- values


def test_dates_become_iso_strings_and_data_is_json_compatible(loader_class: type) -> None:
    text = "day: 2024-01-01\nat: 2024-01-01 10:30:00+02:00\nnot_a_day: 2024-13-01\nkeyed: {2024-02-03: x}\n"
    doc = parse(text, loader_class)
    assert doc.data == {
        "day": "2024-01-01",
        "at": "2024-01-01T10:30:00+02:00",
        "not_a_day": "2024-13-01",
        "keyed": {"2024-02-03": "x"},
    }
    json.dumps(doc.data)


def test_inf_and_nan_stay_floats(loader_class: type) -> None:
    data = parse("a: .inf\nb: -.inf\nc: .nan\n", loader_class).data
    assert data["a"] == math.inf and data["b"] == -math.inf and math.isnan(data["c"])


def test_non_string_keys_are_left_as_they_are(loader_class: type) -> None:
    assert parse("1: a\nnull: b\nno: c\n", loader_class).data == {1: "a", None: "b", False: "c"}


# ------------------------------------------------------------------- files


def test_too_large_file_is_refused_without_reading_it(tmp_path: Path) -> None:
    path = tmp_path / "huge.yaml"
    with open(path, "wb") as handle:
        handle.truncate(100 * 2**20)  # sparse: no 100 MB written
    with pytest.raises(LoadError) as caught:
        load.load_file(path)
    (problem,) = caught.value.diagnostics
    assert (problem.code, problem.line, problem.column) == ("too-large", 1, 1)
    assert problem.message == "file is 100.0 MiB; the limit is 64.0 MiB"


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "absent.yaml"
    with pytest.raises(LoadError) as caught:
        load.load_file(path)
    (problem,) = caught.value.diagnostics
    assert problem.code == "io"
    assert problem.render() == f"{path}:1:1: <root>: cannot read file: No such file or directory (check the path)"


def test_a_directory_is_not_a_spec(tmp_path: Path) -> None:
    with pytest.raises(LoadError) as caught:
        load.load_file(tmp_path, display_name="dir")
    (problem,) = caught.value.diagnostics
    assert (problem.code, problem.message) == ("io", "cannot read file: Is a directory")


def test_errors_from_load_file_name_the_display_name(tmp_path: Path) -> None:
    path = write(tmp_path, "a: 1\na: 2\n")
    with pytest.raises(LoadError) as caught:
        load.load_file(path, display_name="shown.yaml")
    assert str(caught.value) == (
        f"shown.yaml:2:1: a: duplicate key 'a' (first defined on line 1) ({DUP_HINT})"
    )
