"""Text to a :class:`~orchestrator.spec.records.Document`: compose, check, construct; every failure a LoadError.

The entry points (:func:`load_file`, :func:`load_text`, :func:`parse_value`)
are here. PyYAML's own errors (scanner, parser, libyaml's nesting limit) and
the problems our composer and constructor raise all become diagnostics with
a line and a column, never a raw ``yaml`` exception.
"""

from __future__ import annotations

import os
import re
from typing import Any

from ...errors import Diagnostic, LoadError
from ..records import Document
from .compose import TOO_DEEP_HINT, TOO_DEEP_MESSAGE, compose
from .constructor import SpecLoader, spec_loader
from .locate import Locator
from .problems import Problem, fail, find_paths, key_part, mark_position
from .pyyaml import (
    TAG_PREFIX,
    ConstructorError,
    MappingNode,
    MarkedYAMLError,
    Node,
    SafeLoader,
    SequenceNode,
    YAMLError,
    is_libyaml,
)
from .read import MAX_SPEC_BYTES, check_characters, decode, read_bounded, refuse_size

_SYNTAX_HINT = "check indentation and quoting near here"
_MAPPING_HINT = "a spec starts with 'version: 1'"


def load_file(path: str | os.PathLike[str], display_name: str | None = None) -> Document:
    """Load a spec file; ``display_name`` (default: ``path`` as given) names it in diagnostics."""
    name = display_name if display_name is not None else os.fspath(path)
    raw = read_bounded(path, name)
    directory = os.path.dirname(os.path.abspath(path))
    return parse(decode(raw, name), name, directory, SpecLoader)


def load_text(text: str | bytes, file: str = "<string>", directory: str = ".") -> Document:
    """Load a spec from memory; ``directory`` is where relative paths in it resolve."""
    return load_text_with(text, file, directory, SpecLoader)


def parse_value(text: str) -> Any:
    """One value written on the command line (``--set lr=1e-3``), read as YAML reads it in a spec.

    Same loader, same rules: YAML 1.2 floats, safe tags only. Raises ``ValueError`` with the
    reader's first line when the text is not one YAML value.
    """
    if "\n" in text or "\r" in text:
        raise ValueError("a value on the command line is one line")
    try:
        doc = parse(f"value: {text}" if text.strip() else "value: ''", "--set", ".", SpecLoader)
    except LoadError as exc:
        # the reader's position is in the wrapped text: the message alone is what the user can use
        raise ValueError(re.sub(r" that starts at line \d+, column \d+", "", exc.diagnostics[0].message)) from None
    return doc.data["value"]


def load_text_with(text: str | bytes, file: str, directory: str, loader_class: type) -> Document:
    """load_text with an explicit loader class (tests run the pure-Python one too)."""
    if len(text) > MAX_SPEC_BYTES:  # a str of more characters has at least as many bytes
        refuse_size(len(text), file)
    decoded = decode(text, file) if isinstance(text, bytes) else text.removeprefix("\ufeff")
    return parse(decoded, file, os.path.abspath(directory), loader_class)


def parse(text: str, file: str, directory: str, loader_class: type) -> Document:
    """Compose, check and construct ``text``; every failure becomes a LoadError."""
    check_characters(text, file)
    loader = loader_class(text)
    root: Node | None = None
    try:
        root = compose(loader)
        _check_top_level(root)
        data = loader.construct_document(root)
    except Problem as problem:
        raise LoadError([problem.diagnostic(file, root)]) from None
    except MarkedYAMLError as err:
        if _is_libyaml_nesting_limit(err):
            raise LoadError([_too_deep_diagnostic(err, file, text, loader_class)]) from None
        raise LoadError([_yaml_error_diagnostic(err, file, text)]) from None
    except YAMLError as err:  # unmarked (e.g. a reader error): no better position
        fail("yaml-syntax", file, str(err).splitlines()[0], _SYNTAX_HINT)
    finally:
        loader.dispose()
    if loader.duplicates:
        assert root is not None
        raise LoadError(_duplicate_diagnostics(loader.duplicates, root, file))
    assert root is not None  # a document with data has a root node
    return Document(file=file, data=data, locate_fn=Locator(root), directory=directory)


def _is_libyaml_nesting_limit(err: MarkedYAMLError) -> bool:
    """libyaml's own nesting bound (PyYAML 6.0.4: 'exceeded maximum nesting depth')."""
    return err.problem is not None and "maximum nesting depth" in err.problem


def _too_deep_diagnostic(err: MarkedYAMLError, file: str, text: str, loader_class: type) -> Diagnostic:
    """Report libyaml's nesting limit as our own ``yaml-too-deep``, at our bound.

    libyaml's scanner looks ahead over a flow collection for a possible simple
    key, so it can reach its limit (about 1,000 levels) before our composer
    has seen 200 events. The pure Python scanner has no such look-ahead
    limit: reading the text again with it finds the place where our bound is
    crossed, so the diagnostic is the same whichever bound was hit first. A
    pure Python loader with a limit of its own is reported at its mark.
    """
    if is_libyaml(loader_class):
        try:
            parse(text, file, ".", spec_loader(SafeLoader))
        except LoadError as again:
            return again.diagnostics[0]
    mark = err.problem_mark or err.context_mark
    position = mark_position(mark) if mark is not None else (1, 1)
    return Diagnostic("yaml-too-deep", file, position[0], position[1], (), TOO_DEEP_MESSAGE, TOO_DEEP_HINT)


def _check_top_level(root: Node | None) -> None:
    if isinstance(root, MappingNode):
        return
    found = _describe(root)
    raise Problem(
        "not-a-mapping",
        f"the top level must be a mapping (found {found})",
        _MAPPING_HINT,
        position=mark_position(root.start_mark) if root is not None and found != "an empty document" else (1, 1),
    )


def _describe(root: Node | None) -> str:
    if root is None:
        return "an empty document"
    if isinstance(root, SequenceNode):
        return "a list"
    name = root.tag[len(TAG_PREFIX) :] if root.tag.startswith(TAG_PREFIX) else ""
    if name == "null":
        return "an empty document" if root.value == "" else "null"
    return {"int": "a number", "float": "a number", "bool": "a boolean", "timestamp": "a date"}.get(name, "a string")


def _yaml_error_diagnostic(err: MarkedYAMLError, file: str, text: str = "") -> Diagnostic:
    """Scanner/parser errors (and constructor errors PyYAML raises itself)."""
    mark = err.problem_mark or err.context_mark
    line, column = mark_position(mark) if mark is not None else (1, 1)
    if _indenting_tab(text, line, column):
        # libyaml says "found a tab character that violates indentation while
        # scanning a plain scalar", PyYAML "found character '\t' that cannot
        # start any token": both mean the same everyday slip.
        return Diagnostic("yaml-syntax", file, line, column, (),
                          "a tab character is used for indentation; YAML indents with spaces only",
                          "replace the tab with spaces")
    message = err.problem or err.context or "invalid YAML"
    if err.problem and err.context:
        message += f" {err.context}"
        context_mark = err.context_mark
        if context_mark is not None and mark_position(context_mark) != (line, column):
            message += f" that starts at line {context_mark.line + 1}, column {context_mark.column + 1}"
    if isinstance(err, ConstructorError):
        return Diagnostic("yaml-value", file, line, column, (), message, "check the value near here")
    return Diagnostic("yaml-syntax", file, line, column, (), message, _SYNTAX_HINT)


def _indenting_tab(text: str, line: int, column: int) -> bool:
    """True when the character at (line, column) is a tab with only whitespace before it on its line."""
    lines = text.split("\n", line)
    if not 1 <= line <= len(lines):
        return False
    row = lines[line - 1]
    return 0 < column <= len(row) and row[column - 1] == "\t" and not row[: column - 1].strip(" \t")


def _duplicate_diagnostics(duplicates: list[tuple[Any, Node, Node, Node]], root: Node, file: str) -> list[Diagnostic]:
    paths = find_paths(root, {id(mapping) for *_, mapping in duplicates})
    diagnostics = []
    for key, first, second, mapping in duplicates:
        line, column = mark_position(second.start_mark)
        part = key if isinstance(key, (str, int)) else str(key)
        written, first_written = key_part(second), key_part(first)
        first_line = first.start_mark.line + 1
        if written == first_written:
            message = f"duplicate key '{written}' (first defined on line {first_line})"
        else:  # equal once constructed: '0x1' and '1', or 'true' and '1'
            message = f"duplicate key '{written}' (the same key as '{first_written}' on line {first_line})"
        diagnostics.append(
            Diagnostic(
                "duplicate-key",
                file,
                line,
                column,
                paths.get(id(mapping), ()) + (part,),
                message,
                "remove one of them; YAML would silently keep the last",
            )
        )
    return sorted(diagnostics, key=lambda d: (d.line, d.column))
