"""Our own composer: parser events to nodes in one iterative pass, checking aliases, tags and nesting.

*Why our own.* Nodes are composed from parser events by an iterative loop
here instead of ``loader.get_single_node()``: libyaml's composer recurses in C
and crashes the interpreter (SIGSEGV) on ~50,000 nested brackets, the pure
Python one raises ``RecursionError`` near 500. The loop costs about the same as
libyaml's composer (both spend most of their time in the Python resolver), and
it lets the alias bound, the recursion check, the tag check and the nesting
bound (``MAX_NESTING_DEPTH``) happen in the same single pass, with exact
positions. Construction then uses the loader's own ``construct_document``.

*Bounded aliases.* Anchors and aliases are handy, but nine nested levels of nine
aliases ("billion laughs") expand a 1 KiB file into 10^9 nodes. While composing,
the expanded size of every node is computed once (an alias reuses the size of
its anchor), so the bound ``MAX_EXPANDED_NODES`` is checked in time linear in
the file, before any Python object is built. An alias to a node that contains it
would be an infinite structure and is refused too.
"""

from __future__ import annotations

from typing import Any, NoReturn

from ...errors import YamlPath
from .problems import Problem, key_part, mark_position, show_tag
from .pyyaml import (
    MAP_TAG,
    SCALAR_TAGS,
    SEQ_TAG,
    STR_TAG,
    AliasEvent,
    MappingEndEvent,
    MappingNode,
    MappingStartEvent,
    Node,
    ScalarEvent,
    ScalarNode,
    SequenceEndEvent,
    SequenceNode,
    SequenceStartEvent,
    StreamEndEvent,
)

MAX_EXPANDED_NODES: int = 2_000_000
"""Bound on the node count once every alias is expanded (alias bombs)."""

MAX_NESTING_DEPTH: int = 200
"""Bound on nested mappings/lists; later stages walk the data recursively."""

TOO_DEEP_MESSAGE = f"the document nests deeper than {MAX_NESTING_DEPTH} levels"
TOO_DEEP_HINT = "flatten the structure; no spec needs nesting this deep"

_TAG_HINT = "only plain YAML is accepted: mappings, lists, strings, numbers, booleans, null"
_ALIAS_HINT = "an alias bomb? reduce the use of anchors (&) and aliases (*)"


def compose(loader: Any) -> Node | None:
    """Compose the single document of the stream into nodes, iteratively; None for an empty stream.

    Checks tags, nesting depth, aliases (undefined, duplicate anchors, recursive,
    expanded size) on the way. Scalars stay inline: this loop runs once per event.
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
                tag = resolve(ScalarNode, event.value, event.implicit) if event.implicit[0] else STR_TAG
            elif tag not in SCALAR_TAGS:
                _refuse_tag(tag, "a value", event, stack)
            node: Node = ScalarNode(tag, event.value, event.start_mark, event.end_mark, style=event.style)
            size = 1
            if event.anchor is not None:
                _define_anchor(anchors, event, node, stack)
                sizes[event.anchor] = 1
        elif kind is AliasEvent:
            node, size = _resolve_alias(anchors, sizes, event, stack)
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
            _refuse_expansion(node, stack)
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


def _open_collection(event: Any, is_mapping: bool, anchors: dict[str, Node], stack: list[list[Any]]) -> None:
    if len(stack) >= MAX_NESTING_DEPTH:
        raise Problem(
            "yaml-too-deep",
            TOO_DEEP_MESSAGE,
            TOO_DEEP_HINT,
            position=mark_position(event.start_mark),
            path=_stack_path(stack)[:8],  # the outer parts say where; 200 more say nothing
        )
    default, node_class, noun = (MAP_TAG, MappingNode, "a mapping") if is_mapping else (SEQ_TAG, SequenceNode, "a list")
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
        raise Problem(
            "yaml-multiple-documents",
            "the file holds more than one YAML document",
            "a spec is a single document: remove the second '---' or split the file",
            position=mark_position(event.start_mark),
        )


def _define_anchor(anchors: dict[str, Node], event: Any, node: Node, stack: list[list[Any]]) -> None:
    first = anchors.get(event.anchor)
    if first is not None:
        # PyYAML refuses a second anchor of the same name too; it is nearly
        # always a copy-paste slip that silently re-targets later aliases.
        raise Problem(
            "yaml-alias",
            f"anchor '&{event.anchor}' is defined twice (first on line {first.start_mark.line + 1})",
            "rename one of them; each anchor name must be unique",
            position=mark_position(event.start_mark),
            path=_stack_path(stack),
        )
    anchors[event.anchor] = node


def _resolve_alias(
    anchors: dict[str, Node], sizes: dict[str, int], event: Any, stack: list[list[Any]]
) -> tuple[Node, int]:
    """The anchored node an alias repeats, and its expanded size."""
    node = anchors.get(event.anchor)
    if node is None:
        raise Problem(
            "yaml-alias",
            f"alias '*{event.anchor}' refers to an anchor that is not defined before it",
            f"define '&{event.anchor}' on a node above this alias",
            position=mark_position(event.start_mark),
            path=_stack_path(stack),
        )
    size = sizes.get(event.anchor, 0)
    if not size:  # anchored node still open: it would contain itself
        _refuse_recursion(event, stack)
    return node, size


def _refuse_recursion(event: Any, stack: list[list[Any]]) -> NoReturn:
    raise Problem(
        "yaml-recursive",
        f"alias '*{event.anchor}' is inside the node it refers to, which would be infinite",
        f"an alias cannot point to an anchor (&{event.anchor}) that contains it",
        position=mark_position(event.start_mark),
        path=_stack_path(stack),
    )


def _refuse_expansion(node: Node, stack: list[list[Any]]) -> NoReturn:
    """Too many nodes once aliases are expanded: reported at the outermost open collection."""
    raise Problem(
        "yaml-alias-bomb",
        f"the document expands to more than {MAX_EXPANDED_NODES:,} nodes through aliases",
        _ALIAS_HINT,
        position=mark_position(stack[0][0].start_mark if stack else node.start_mark),
    )


def _refuse_tag(tag: str, noun: str, event: Any, stack: list[list[Any]]) -> NoReturn:
    shown = show_tag(tag)
    # A known scalar tag on a collection ('!!str [1]') is misplaced, not foreign.
    known = tag in SCALAR_TAGS or tag in (SEQ_TAG, MAP_TAG)
    message = f"tag '{shown}' is not allowed on {noun}" if known else f"tag '{shown}' is not allowed"
    raise Problem(
        "yaml-tag", message, _TAG_HINT, position=mark_position(event.start_mark), path=_stack_path(stack)
    )


def _stack_path(stack: list[list[Any]]) -> YamlPath:
    """The YAML path of the node being composed, from the open frames (errors only)."""
    parts: list[str | int] = []
    for node, pending_key, _size, _anchor in stack:
        if type(node) is SequenceNode:
            parts.append(len(node.value))
        elif pending_key is not None:  # inside a value (None: composing a key)
            parts.append(key_part(pending_key))
    return tuple(parts)
