"""Read a spec file into plain data, keeping a lazy way back to line and column.

This is the only module that imports ``yaml``. It turns a file (or a string)
into a :class:`~orchestrator.model.Document`: a plain, JSON-compatible ``dict``
plus ``locate_fn``, which maps a YAML path such as ``("graph", 2, "inputs")`` back
to the 1-based line and column the user wrote it on. Every problem is raised as
a :class:`~orchestrator.errors.LoadError` carrying diagnostics, never as a raw
``yaml`` exception.

Design decisions:

*Safe YAML only.* Documents are parsed with ``yaml.CSafeLoader`` (libyaml) when
it is available, else ``yaml.SafeLoader``. Any tag outside plain YAML (Python
tags such as ``!!python/object``, ``!!binary``, ``!!set``, local ``!foo`` tags) is
refused before anything is constructed, so no tag can run code or produce data
that is not JSON-compatible.

*Lazy positions.* Parsing dominates the cost of a 100k-op spec, and almost all
positions are never asked for: only diagnostics need them. So no index of
positions is built up front; the composed node tree is kept and ``locate_fn``
walks it along the requested path when (and only when) a diagnostic needs a
line. A missing path resolves to its deepest existing ancestor.

*Duplicate keys are errors.* YAML loaders silently keep the last of two equal
keys, so a copy-pasted op silently loses half its settings. Every key written
twice in the same mapping is reported (all of them, in one error). Keys that come
from a merge (``<<: *base``) and are then overridden are the point of merging and
are not duplicates.

*Bounded aliases.* Anchors and aliases are handy, but nine nested levels of nine
aliases ("billion laughs") expand a 1 KiB file into 10^9 nodes. While composing,
the expanded size of every node is computed once (an alias reuses the size of
its anchor), so the bound ``MAX_EXPANDED_NODES`` is checked in time linear in
the file, before any Python object is built. An alias to a node that contains it
would be an infinite structure and is refused too.

*Numbers as YAML 1.2 reads them.* PyYAML follows YAML 1.1, where a float
needs a dot and a signed exponent: ``1e-3``, ``1e5`` and ``-2E4`` are strings
there, so ``scalar: 1e-3`` would be refused as text and ``params: {lr: 1e-3}``
would hand user code a string. The loader adds YAML 1.2's (core schema)
float forms to the resolver of both loader bases: an exponent with or without
a sign or a dot, and a signed ``-.5``. Integers stay integers (``09`` and
``1_000`` resolve as before); ``.inf`` and ``.nan`` stay floats (validation
refuses them where a duration or a size is expected).

*Our own composer.* Nodes are composed from parser events by an iterative loop
here instead of ``loader.get_single_node()``: libyaml's composer recurses in C
and crashes the interpreter (SIGSEGV) on ~50,000 nested brackets, the pure
Python one raises ``RecursionError`` near 500. The loop costs about the same as
libyaml's composer (both spend most of their time in the Python resolver), and
it lets the alias bound, the recursion check, the tag check and the nesting
bound (``MAX_NESTING_DEPTH``) happen in the same single pass, with exact
positions. Construction then uses the loader's own ``construct_document``.
"""

from __future__ import annotations

import codecs
import datetime
import os
import re
from typing import Any, Callable, NoReturn

import yaml
from yaml.constructor import ConstructorError, SafeConstructor
from yaml.events import (
    AliasEvent,
    MappingEndEvent,
    MappingStartEvent,
    ScalarEvent,
    SequenceEndEvent,
    SequenceStartEvent,
    StreamEndEvent,
)
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from .errors import Diagnostic, LoadError, YamlPath, format_bytes
from .model import Document, Position

__all__ = [
    "LOADER_BASE",
    "MAX_EXPANDED_NODES",
    "MAX_NESTING_DEPTH",
    "MAX_SPEC_BYTES",
    "SpecLoader",
    "load_file",
    "load_text",
]

MAX_SPEC_BYTES: int = 64 * 1024 * 1024
"""Files bigger than this are refused before they are read."""

MAX_EXPANDED_NODES: int = 2_000_000
"""Bound on the node count once every alias is expanded (alias bombs)."""

MAX_NESTING_DEPTH: int = 200
"""Bound on nested mappings/lists; later stages walk the data recursively."""

LOADER_BASE: type = yaml.CSafeLoader if yaml.__with_libyaml__ else yaml.SafeLoader
"""The safe loader :class:`SpecLoader` derives from: libyaml's when installed."""

_YAML = "tag:yaml.org,2002:"
_STR_TAG = _YAML + "str"
_MERGE_TAG = _YAML + "merge"
_SEQ_TAG = _YAML + "seq"
_MAP_TAG = _YAML + "map"
# The tags the resolver gives plain YAML scalars; explicit spellings of these
# (``!!str 12``) are harmless. ``value`` (a lone ``=``) and ``merge`` (``<<``)
# are resolver quirks of YAML 1.1 and are read as strings outside merge keys.
_FLOAT_TAG = _YAML + "float"
# YAML 1.2 core schema floats that YAML 1.1 (PyYAML) reads as strings: an
# exponent (1e5, 1e-3, -2E4, 1.0e3, .5e3), or a sign before a leading dot
# (-.5). Forms both versions read as floats already stay with PyYAML's own
# resolver; forms that are integers in either version never match here.
_YAML12_FLOAT = re.compile(r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)[eE][-+]?[0-9]+|[-+]\.[0-9]+)$")
_SCALAR_TAGS = frozenset(
    _YAML + name
    for name in ("null", "bool", "int", "float", "str", "timestamp", "value", "merge")
)

# Characters YAML forbids in a stream (same set as PyYAML's reader). Checked up
# front so the error has an exact line and column: libyaml reports a byte offset.
_NON_PRINTABLE = re.compile("[^\x09\x0a\x0d\x20-\x7e\x85\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")

_TAG_HINT = "only plain YAML is accepted: mappings, lists, strings, numbers, booleans, null"
_SYNTAX_HINT = "check indentation and quoting near here"
_MAPPING_HINT = "a spec starts with 'version: 1'"
_ALIAS_HINT = "an alias bomb? reduce the use of anchors (&) and aliases (*)"


# --------------------------------------------------------------------- problems


class _Problem(Exception):
    """One problem found while composing or constructing, before the file name is known.

    Either ``position``/``path`` are known where it is raised (composer), or
    ``node`` is given and the path is searched for in the tree afterwards
    (constructor, which does not track paths).
    """

    def __init__(
        self,
        code: str,
        message: str,
        hint: str,
        *,
        position: Position = (1, 1),
        path: YamlPath = (),
        node: Node | None = None,
    ):
        super().__init__(message)
        self.code, self.message, self.hint = code, message, hint
        self.position, self.path, self.node = position, path, node

    def diagnostic(self, file: str, root: Node | None) -> Diagnostic:
        position, path = self.position, self.path
        if self.node is not None:
            position = _mark_position(self.node.start_mark)
            if root is not None:
                path = _find_paths(root, {id(self.node)}).get(id(self.node), path)
        return Diagnostic(self.code, file, position[0], position[1], path, self.message, self.hint)


def _mark_position(mark: Any) -> Position:
    """yaml marks are 0-based; diagnostics are 1-based."""
    return (mark.line + 1, mark.column + 1)


def _text_position(text: str, offset: int) -> Position:
    """1-based line and column of a character offset in ``text``."""
    line = text.count("\n", 0, offset) + 1
    column = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return (line, column)


def _fail(code: str, file: str, message: str, hint: str, position: Position = (1, 1)) -> NoReturn:
    raise LoadError([Diagnostic(code, file, position[0], position[1], (), message, hint)])


def _show_tag(tag: str) -> str:
    """Write a tag back the way users spell it: ``!!python/object:os.system``."""
    return "!!" + tag[len(_YAML) :] if tag.startswith(_YAML) else tag


# ------------------------------------------------------------------ constructor


class _SpecConstructor(SafeConstructor):
    """SafeConstructor that reports duplicate keys and yields JSON-compatible values.

    Usable standalone (``_SpecConstructor()``) to construct single scalar keys
    for :class:`_Locator`, and as the first base of :class:`SpecLoader`.
    """

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)  # cooperative: the loader base takes the stream
        # (key, first key node, second key node, mapping node) per duplicate.
        self.duplicates: list[tuple[Any, Node, Node, Node]] = []
        self._checked: set[int] = set()

    def flatten_mapping(self, node: MappingNode) -> None:
        # flatten_mapping is the first thing to touch a mapping (construct_mapping
        # calls it, and it recurses into merge sources before they are built),
        # and it rewrites node.value with the merged pairs. Checking here, once
        # per node, sees exactly the pairs the user wrote; merged-in keys are
        # never compared with the keys that override them.
        if id(node) not in self._checked:
            self._checked.add(id(node))
            self._check_duplicates(node)
        super().flatten_mapping(node)

    def _check_duplicates(self, node: MappingNode) -> None:
        seen: dict[Any, Node] = {}
        for key_node, _ in node.value:
            tag = key_node.tag
            if tag == _STR_TAG:
                key: Any = key_node.value  # fast path: nearly every key is a plain string
            elif tag == _MERGE_TAG:
                continue
            else:
                key = self.construct_object(key_node)
                try:
                    hash(key)
                except TypeError:
                    continue  # construct_mapping reports unhashable keys itself
            first = seen.get(key, _MISSING)
            if first is _MISSING:
                seen[key] = key_node
            else:
                self.duplicates.append((key, first, key_node, node))

    def construct_iso_timestamp(self, node: ScalarNode) -> str:
        # Keep YAML 1.1 timestamp resolution but hand on ISO strings: the data
        # must stay JSON-compatible for schema validation. A value that looks
        # like a date but is not one (2024-13-01) stays the text it was.
        try:
            value = SafeConstructor.construct_yaml_timestamp(self, node)
        except (ValueError, TypeError, AttributeError):
            return str(self.construct_scalar(node))
        assert isinstance(value, (datetime.date, datetime.datetime))
        return value.isoformat()

    def construct_checked_int(self, node: ScalarNode) -> Any:
        return self._checked_scalar(SafeConstructor.construct_yaml_int, node)

    def construct_checked_float(self, node: ScalarNode) -> Any:
        return self._checked_scalar(SafeConstructor.construct_yaml_float, node)

    def construct_checked_bool(self, node: ScalarNode) -> Any:
        return self._checked_scalar(SafeConstructor.construct_yaml_bool, node)

    def _checked_scalar(self, construct: Callable[[Any, ScalarNode], Any], node: ScalarNode) -> Any:
        # PyYAML raises bare ValueError/KeyError for '!!int abc', '!!bool maybe'
        # or the odd implicit '0b_'; turn them into a positioned diagnostic.
        try:
            return construct(self, node)
        except (ValueError, KeyError, TypeError, AttributeError, IndexError):
            message = f"'{node.value}' is not a valid {_show_tag(node.tag)}"
            raise _Problem("yaml-value", message, "fix the value or remove the tag", node=node) from None


_MISSING: Any = object()

_SpecConstructor.add_constructor(_YAML + "timestamp", _SpecConstructor.construct_iso_timestamp)  # type: ignore[type-var]
_SpecConstructor.add_constructor(_YAML + "int", _SpecConstructor.construct_checked_int)  # type: ignore[type-var]
_SpecConstructor.add_constructor(_YAML + "float", _SpecConstructor.construct_checked_float)  # type: ignore[type-var]
_SpecConstructor.add_constructor(_YAML + "bool", _SpecConstructor.construct_checked_bool)  # type: ignore[type-var]
# A lone '=' or '<<' outside a merge key has no SafeConstructor at all (PyYAML
# fails on 'x: ='); they are just strings.
_SpecConstructor.add_constructor(_YAML + "value", SafeConstructor.construct_yaml_str)  # type: ignore[type-var]
_SpecConstructor.add_constructor(_MERGE_TAG, SafeConstructor.construct_yaml_str)  # type: ignore[type-var]


def _loader_class(base: type) -> type:
    """The spec loader for a safe loader base (CSafeLoader or SafeLoader).

    Both bases resolve plain scalars with PyYAML's Python resolver (libyaml
    only parses), which is where the YAML 1.2 float forms are added: the
    class method copies the resolver table into the new class, so the shared
    ``yaml.SafeLoader`` is left as it is. It is appended after PyYAML's own
    resolvers, which win for every form they know (ints stay ints).
    """
    loader: Any = type("SpecLoader", (_SpecConstructor, base), {"__module__": __name__})
    loader.add_implicit_resolver(_FLOAT_TAG, _YAML12_FLOAT, list("-+.0123456789"))
    return loader  # type: ignore[no-any-return]


SpecLoader: type = _loader_class(LOADER_BASE)
"""The loader used: ``_SpecConstructor`` behaviour on top of :data:`LOADER_BASE`."""


# --------------------------------------------------------------------- composer


def _compose(loader: Any) -> Node | None:
    """Compose the single document of the stream into nodes, iteratively.

    Checks tags, nesting depth, aliases (undefined, duplicate anchors,
    recursive, expanded size) on the way. Returns None for an empty stream.
    """
    get_event = loader.get_event
    resolve = loader.resolve
    get_event()  # StreamStartEvent
    if isinstance(get_event(), StreamEndEvent):
        return None  # no document at all (empty file, only comments)
    anchors: dict[str, Node] = {}
    sizes: dict[str, int] = {}  # expanded size of each *finished* anchored node
    # One frame per open collection: [node, pending key node, expanded size, anchor].
    stack: list[list[Any]] = []
    aliased = False
    while True:
        event = get_event()
        kind = type(event)
        if kind is ScalarEvent:
            tag = event.tag
            if tag is None or tag == "!":
                # Quoted scalars (implicit[0] false) are always strings; only
                # plain ones go through the (costly) implicit resolvers.
                tag = resolve(ScalarNode, event.value, event.implicit) if event.implicit[0] else _STR_TAG
            elif tag not in _SCALAR_TAGS:
                _refuse_tag(tag, "a value", event, stack)
            node: Node = ScalarNode(tag, event.value, event.start_mark, event.end_mark, style=event.style)
            size = 1
            if event.anchor is not None:
                _define_anchor(anchors, event, node, stack)
                sizes[event.anchor] = 1
        elif kind is AliasEvent:
            node = _resolve_alias(anchors, event, stack)
            size = sizes.get(event.anchor, 0)
            if not size:  # anchored node still open: it would contain itself
                _refuse_recursion(event, stack)
            aliased = True
        elif kind is MappingStartEvent or kind is SequenceStartEvent:
            _open_collection(event, kind is MappingStartEvent, anchors, stack)
            continue
        elif kind is MappingEndEvent or kind is SequenceEndEvent:
            node, _, size, anchor = stack.pop()
            node.end_mark = event.end_mark
            if anchor is not None:
                sizes[anchor] = size
        else:  # pragma: no cover - the parser emits nothing else inside a document
            raise AssertionError(f"unexpected event {event!r}")
        if aliased and size > MAX_EXPANDED_NODES:
            raise _Problem(
                "yaml-alias-bomb",
                f"the document expands to more than {MAX_EXPANDED_NODES:,} nodes through aliases",
                _ALIAS_HINT,
                position=_mark_position(stack[0][0].start_mark if stack else node.start_mark),
            )
        if not stack:
            _expect_stream_end(loader)
            return node
        frame = stack[-1]
        frame[2] += size
        parent = frame[0]
        if type(parent) is SequenceNode:
            parent.value.append(node)
        elif frame[1] is None:
            frame[1] = node
        else:
            parent.value.append((frame[1], node))
            frame[1] = None


_TOO_DEEP_MESSAGE = f"the document nests deeper than {MAX_NESTING_DEPTH} levels"
_TOO_DEEP_HINT = "flatten the structure; no spec needs nesting this deep"


def _open_collection(event: Any, is_mapping: bool, anchors: dict[str, Node], stack: list[list[Any]]) -> None:
    if len(stack) >= MAX_NESTING_DEPTH:
        raise _Problem(
            "yaml-too-deep",
            _TOO_DEEP_MESSAGE,
            _TOO_DEEP_HINT,
            position=_mark_position(event.start_mark),
            path=_stack_path(stack)[:8],  # the outer parts say where; 200 more say nothing
        )
    default, node_class, noun = (_MAP_TAG, MappingNode, "a mapping") if is_mapping else (_SEQ_TAG, SequenceNode, "a list")
    tag = event.tag
    if tag is None or tag == "!":
        tag = default  # the safe resolver has no path resolvers: always the default tag
    elif tag != default:
        _refuse_tag(tag, noun, event, stack)
    node = node_class(tag, [], event.start_mark, None, flow_style=event.flow_style)
    if event.anchor is not None:
        _define_anchor(anchors, event, node, stack)
    stack.append([node, None, 1, event.anchor])


def _expect_stream_end(loader: Any) -> None:
    """After the root node: the document end, then the stream end, nothing else."""
    loader.get_event()  # DocumentEndEvent
    event = loader.get_event()
    if not isinstance(event, StreamEndEvent):  # a DocumentStartEvent
        raise _Problem(
            "yaml-multiple-documents",
            "the file holds more than one YAML document",
            "a spec is a single document: remove the second '---' or split the file",
            position=_mark_position(event.start_mark),
        )


def _define_anchor(anchors: dict[str, Node], event: Any, node: Node, stack: list[list[Any]]) -> None:
    first = anchors.get(event.anchor)
    if first is not None:
        # PyYAML refuses a second anchor of the same name too; it is nearly
        # always a copy-paste slip that silently re-targets later aliases.
        raise _Problem(
            "yaml-alias",
            f"anchor '&{event.anchor}' is defined twice (first on line {first.start_mark.line + 1})",
            "rename one of them; each anchor name must be unique",
            position=_mark_position(event.start_mark),
            path=_stack_path(stack),
        )
    anchors[event.anchor] = node


def _resolve_alias(anchors: dict[str, Node], event: Any, stack: list[list[Any]]) -> Node:
    node = anchors.get(event.anchor)
    if node is None:
        raise _Problem(
            "yaml-alias",
            f"alias '*{event.anchor}' refers to an anchor that is not defined before it",
            f"define '&{event.anchor}' on a node above this alias",
            position=_mark_position(event.start_mark),
            path=_stack_path(stack),
        )
    return node


def _refuse_recursion(event: Any, stack: list[list[Any]]) -> NoReturn:
    raise _Problem(
        "yaml-recursive",
        f"alias '*{event.anchor}' is inside the node it refers to, which would be infinite",
        f"an alias cannot point to an anchor (&{event.anchor}) that contains it",
        position=_mark_position(event.start_mark),
        path=_stack_path(stack),
    )


def _refuse_tag(tag: str, noun: str, event: Any, stack: list[list[Any]]) -> NoReturn:
    shown = _show_tag(tag)
    # A known scalar tag on a collection ('!!str [1]') is misplaced, not foreign.
    known = tag in _SCALAR_TAGS or tag in (_SEQ_TAG, _MAP_TAG)
    message = f"tag '{shown}' is not allowed on {noun}" if known else f"tag '{shown}' is not allowed"
    raise _Problem(
        "yaml-tag", message, _TAG_HINT, position=_mark_position(event.start_mark), path=_stack_path(stack)
    )


def _stack_path(stack: list[list[Any]]) -> YamlPath:
    """The YAML path of the node being composed, from the open frames (errors only)."""
    parts: list[str | int] = []
    for node, pending_key, _size, _anchor in stack:
        if type(node) is SequenceNode:
            parts.append(len(node.value))
        elif pending_key is not None:  # inside a value (None: composing a key)
            parts.append(_key_part(pending_key))
    return tuple(parts)


def _key_part(key_node: Node) -> str:
    return str(key_node.value) if isinstance(key_node, ScalarNode) else "?"


def _find_paths(root: Node, targets: set[int]) -> dict[int, YamlPath]:
    """Paths of the nodes with the given ids, in document order (errors only)."""
    found: dict[int, YamlPath] = {}
    visited: set[int] = set()
    stack: list[tuple[Node, YamlPath]] = [(root, ())]
    while stack and len(found) < len(targets):
        node, path = stack.pop()
        if id(node) in targets and id(node) not in found:
            found[id(node)] = path
        if isinstance(node, ScalarNode) or id(node) in visited:
            continue
        visited.add(id(node))  # aliases share nodes (and may even form cycles)
        children: list[tuple[Node, YamlPath]] = []
        if isinstance(node, SequenceNode):
            children = [(child, path + (index,)) for index, child in enumerate(node.value)]
        else:
            for key_node, value_node in node.value:
                children += [(key_node, path), (value_node, path + (_key_part(key_node),))]
        stack.extend(reversed(children))
    return found


# ---------------------------------------------------------------------- locator


class _Locator:
    """``locate_fn`` of a Document: walks the kept node tree along a path on demand."""

    __slots__ = ("_root", "_indexes")

    # Mappings with more pairs than this get a lookup dict the first time they
    # are searched, so many diagnostics in one huge mapping stay linear.
    INDEX_ABOVE = 32

    def __init__(self, root: Node):
        self._root = root
        self._indexes: dict[int, dict[str, tuple[Node, Node]]] = {}

    def __call__(self, path: YamlPath, key: bool = False) -> Position:
        node = self._root
        key_node: Node | None = None
        for part in path:
            child = self._child(node, part)
            if child is None:
                return _mark_position(node.start_mark)  # deepest existing ancestor
            key_node, node = child
        if key and key_node is not None:
            return _mark_position(key_node.start_mark)
        return _mark_position(node.start_mark)

    def written(self, path: YamlPath, key: bool = False) -> str | None:
        """The text the file has at ``path`` (its key's, with ``key``): ``on`` for the key ``True``.

        None when the path does not exist or does not end at a scalar.
        Validation names keys and values the way the user wrote them: YAML 1.1
        reads ``on:`` as the boolean true, and "unknown key 'True'" would not say why.
        """
        node = self._root
        key_node: Node | None = None
        for part in path:
            child = self._child(node, part)
            if child is None:
                return None
            key_node, node = child
        found = key_node if key else node
        return str(found.value) if isinstance(found, ScalarNode) else None

    def _child(self, node: Node, part: str | int) -> tuple[Node | None, Node] | None:
        if isinstance(node, SequenceNode):
            if isinstance(part, int) and 0 <= part < len(node.value):
                return (None, node.value[part])
            return None
        if not isinstance(node, MappingNode):
            return None
        if len(node.value) > self.INDEX_ABOVE:
            return self._index(node).get(str(part))
        # Last pair wins, as in the constructed dict (merged pairs come first).
        for key_node, value_node in reversed(node.value):
            if _key_matches(key_node, part):
                return (key_node, value_node)
        # Then a key that is not text, by its spelling: diagnostics name 'on', not 'True'.
        for key_node, value_node in reversed(node.value):
            if isinstance(key_node, ScalarNode) and key_node.tag != _STR_TAG and key_node.value == part:
                return (key_node, value_node)
        return None

    def _index(self, node: MappingNode) -> dict[str, tuple[Node, Node]]:
        index = self._indexes.get(id(node))
        if index is None:
            index = {}
            spelled: dict[str, tuple[Node, Node]] = {}
            for key_node, value_node in node.value:  # later pairs overwrite: last wins
                if isinstance(key_node, ScalarNode):
                    index[_key_text(key_node)] = (key_node, value_node)
                    if key_node.tag != _STR_TAG:
                        spelled[str(key_node.value)] = (key_node, value_node)
            for text, pair in spelled.items():  # a key's own text comes first, as above
                index.setdefault(text, pair)
            self._indexes[id(node)] = index
        return index


_KEY_CONSTRUCTOR = _SpecConstructor()


def _key_text(key_node: ScalarNode) -> str:
    """The key as the data has it, as text: ``1`` for ``0x1``, ``True`` for ``yes``."""
    if key_node.tag == _STR_TAG:
        return str(key_node.value)
    construct = _KEY_CONSTRUCTOR.yaml_constructors.get(key_node.tag)
    try:
        return str(construct(_KEY_CONSTRUCTOR, key_node)) if construct else str(key_node.value)
    except Exception:  # a key that cannot be built cannot be asked for either
        return str(key_node.value)


def _key_matches(key_node: Node, part: str | int) -> bool:
    if not isinstance(key_node, ScalarNode):
        return False
    if key_node.tag == _STR_TAG and isinstance(part, str):
        return bool(key_node.value == part)
    return _key_text(key_node) == str(part)


# ------------------------------------------------------------------ entry points


def load_file(path: str | os.PathLike[str], display_name: str | None = None) -> Document:
    """Load a spec file; ``display_name`` (default: ``path`` as given) names it in diagnostics."""
    name = display_name if display_name is not None else os.fspath(path)
    raw = _read_bounded(path, name)
    directory = os.path.dirname(os.path.abspath(path))
    return _parse(_decode(raw, name), name, directory, SpecLoader)


def load_text(text: str | bytes, file: str = "<string>", directory: str = ".") -> Document:
    """Load a spec from memory; ``directory`` is where relative paths in it resolve."""
    return _load_text_with(text, file, directory, SpecLoader)


def parse_value(text: str) -> Any:
    """One value written on the command line (``--set lr=1e-3``), read as YAML reads it in a spec.

    Same loader, same rules: YAML 1.2 floats, safe tags only. Raises ``ValueError`` with the
    reader's first line when the text is not one YAML value.
    """
    if "\n" in text or "\r" in text:
        raise ValueError("a value on the command line is one line")
    try:
        doc = _parse(f"value: {text}" if text.strip() else "value: ''", "--set", ".", SpecLoader)
    except LoadError as exc:
        # the reader's position is in the wrapped text: the message alone is what the user can use
        raise ValueError(re.sub(r" that starts at line \d+, column \d+", "", exc.diagnostics[0].message)) from None
    return doc.data["value"]


def _load_text_with(text: str | bytes, file: str, directory: str, loader_class: type) -> Document:
    """load_text with an explicit loader class (tests run the pure-Python one too)."""
    if len(text) > MAX_SPEC_BYTES:  # a str of more characters has at least as many bytes
        _refuse_size(len(text), file)
    decoded = _decode(text, file) if isinstance(text, bytes) else text.removeprefix("\ufeff")
    return _parse(decoded, file, os.path.abspath(directory), loader_class)


def _read_bounded(path: str | os.PathLike[str], name: str) -> bytes:
    """Read the file, refusing too big ones by their size before reading them."""
    try:
        size = os.stat(path).st_size
        if size > MAX_SPEC_BYTES:
            _refuse_size(size, name)
        with open(path, "rb") as handle:
            # Read one byte past the limit: stat lies for pipes and /proc files.
            raw = handle.read(MAX_SPEC_BYTES + 1)
    except OSError as err:
        _fail("io", name, f"cannot read file: {err.strerror or err}", "check the path")
    if len(raw) > MAX_SPEC_BYTES:
        _refuse_size(len(raw), name)
    return raw


def _refuse_size(size: int, file: str) -> NoReturn:
    _fail(
        "too-large",
        file,
        f"file is {format_bytes(size)}; the limit is {format_bytes(MAX_SPEC_BYTES)}",
        "a spec this large is a mistake; split the data out of the spec",
    )


def _decode(raw: bytes, file: str) -> str:
    """Strict UTF-8 (a leading BOM is dropped); a bad byte is reported with its position."""
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        # utf-8-sig decodes after the BOM, so its offsets are relative to it.
        bom = len(codecs.BOM_UTF8) if raw.startswith(codecs.BOM_UTF8) else 0
        offset = err.start + bom
        line = raw.count(b"\n", 0, offset) + 1
        line_start = max(raw.rfind(b"\n", 0, offset) + 1, bom)
        column = len(raw[line_start:offset].decode("utf-8", "replace")) + 1  # in characters
        _fail(
            "encoding",
            file,
            f"file is not valid UTF-8 (byte 0x{raw[offset]:02x} at offset {offset})",
            "save the file as UTF-8",
            (line, column),
        )


def _check_characters(text: str, file: str) -> None:
    match = _NON_PRINTABLE.search(text)
    if match is not None:
        code_point = ord(match.group())
        _fail(
            "yaml-syntax",
            file,
            f"character U+{code_point:04X} is not allowed in YAML",
            f"remove it, or write it as the escape \\u{code_point:04x} inside double quotes",
            _text_position(text, match.start()),
        )


def _parse(text: str, file: str, directory: str, loader_class: type) -> Document:
    """Compose, check and construct ``text``; every failure becomes a LoadError."""
    _check_characters(text, file)
    loader = loader_class(text)
    root: Node | None = None
    try:
        root = _compose(loader)
        _check_top_level(root)
        data = loader.construct_document(root)
    except _Problem as problem:
        raise LoadError([problem.diagnostic(file, root)]) from None
    except yaml.MarkedYAMLError as err:
        if _is_libyaml_nesting_limit(err):
            raise LoadError([_too_deep_diagnostic(err, file, text, loader_class)]) from None
        raise LoadError([_yaml_error_diagnostic(err, file, text)]) from None
    except yaml.YAMLError as err:  # unmarked (e.g. a reader error): no better position
        _fail("yaml-syntax", file, str(err).splitlines()[0], _SYNTAX_HINT)
    finally:
        loader.dispose()
    if loader.duplicates:
        assert root is not None
        raise LoadError(_duplicate_diagnostics(loader.duplicates, root, file))
    assert root is not None  # a document with data has a root node
    return Document(file=file, data=data, locate_fn=_Locator(root), directory=directory)


def _is_libyaml_nesting_limit(err: yaml.MarkedYAMLError) -> bool:
    """libyaml's own nesting bound (PyYAML 6.0.4: 'exceeded maximum nesting depth')."""
    return err.problem is not None and "maximum nesting depth" in err.problem


def _too_deep_diagnostic(err: yaml.MarkedYAMLError, file: str, text: str, loader_class: type) -> Diagnostic:
    """Report libyaml's nesting limit as our own ``yaml-too-deep``, at our bound.

    libyaml's scanner looks ahead over a flow collection for a possible simple
    key, so it can reach its limit (about 1,000 levels) before our composer
    has seen 200 events. The pure Python scanner has no such look-ahead
    limit: reading the text again with it finds the place where our bound is
    crossed, so the diagnostic is the same whichever bound was hit first. A
    pure Python loader with a limit of its own is reported at its mark.
    """
    if yaml.__with_libyaml__ and issubclass(loader_class, yaml.CSafeLoader):
        try:
            _parse(text, file, ".", _loader_class(yaml.SafeLoader))
        except LoadError as again:
            return again.diagnostics[0]
    mark = err.problem_mark or err.context_mark
    position = _mark_position(mark) if mark is not None else (1, 1)
    return Diagnostic("yaml-too-deep", file, position[0], position[1], (), _TOO_DEEP_MESSAGE, _TOO_DEEP_HINT)


def _check_top_level(root: Node | None) -> None:
    if isinstance(root, MappingNode):
        return
    found = _describe(root)
    raise _Problem(
        "not-a-mapping",
        f"the top level must be a mapping (found {found})",
        _MAPPING_HINT,
        position=_mark_position(root.start_mark) if root is not None and found != "an empty document" else (1, 1),
    )


def _describe(root: Node | None) -> str:
    if root is None:
        return "an empty document"
    if isinstance(root, SequenceNode):
        return "a list"
    name = root.tag[len(_YAML) :] if root.tag.startswith(_YAML) else ""
    if name == "null":
        return "an empty document" if root.value == "" else "null"
    return {"int": "a number", "float": "a number", "bool": "a boolean", "timestamp": "a date"}.get(name, "a string")


def _yaml_error_diagnostic(err: yaml.MarkedYAMLError, file: str, text: str = "") -> Diagnostic:
    """Scanner/parser errors (and constructor errors PyYAML raises itself)."""
    mark = err.problem_mark or err.context_mark
    line, column = _mark_position(mark) if mark is not None else (1, 1)
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
        if context_mark is not None and _mark_position(context_mark) != (line, column):
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
    paths = _find_paths(root, {id(mapping) for *_, mapping in duplicates})
    diagnostics = []
    for key, first, second, mapping in duplicates:
        line, column = _mark_position(second.start_mark)
        part = key if isinstance(key, (str, int)) else str(key)
        written, first_written = _key_part(second), _key_part(first)
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
