"""``locate_fn`` of a Document: from a YAML path back to the line and column the user wrote it on.

*Lazy positions.* Parsing dominates the cost of a 100k-op spec, and almost all
positions are never asked for: only diagnostics need them. So no index of
positions is built up front; the composed node tree is kept and the
:class:`Locator` walks it along the requested path when (and only when) a
diagnostic needs a line. A missing path resolves to its deepest existing ancestor.
"""

from __future__ import annotations

from ...errors import YamlPath
from ..records import Position
from .constructor import SpecConstructor
from .problems import mark_position
from .pyyaml import STR_TAG, MappingNode, Node, ScalarNode, SequenceNode


class Locator:
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
                return mark_position(node.start_mark)  # deepest existing ancestor
            key_node, node = child
        if key and key_node is not None:
            return mark_position(key_node.start_mark)
        return mark_position(node.start_mark)

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
            if isinstance(key_node, ScalarNode) and key_node.tag != STR_TAG and key_node.value == part:
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
                    if key_node.tag != STR_TAG:
                        spelled[str(key_node.value)] = (key_node, value_node)
            for text, pair in spelled.items():  # a key's own text comes first, as above
                index.setdefault(text, pair)
            self._indexes[id(node)] = index
        return index


_KEY_CONSTRUCTOR = SpecConstructor()


def _key_text(key_node: ScalarNode) -> str:
    """The key as the data has it, as text: ``1`` for ``0x1``, ``True`` for ``yes``."""
    if key_node.tag == STR_TAG:
        return str(key_node.value)
    construct = _KEY_CONSTRUCTOR.yaml_constructors.get(key_node.tag)
    try:
        return str(construct(_KEY_CONSTRUCTOR, key_node)) if construct else str(key_node.value)
    except Exception:  # a key that cannot be built cannot be asked for either
        return str(key_node.value)


def _key_matches(key_node: Node, part: str | int) -> bool:
    if not isinstance(key_node, ScalarNode):
        return False
    if key_node.tag == STR_TAG and isinstance(part, str):
        return bool(key_node.value == part)
    return _key_text(key_node) == str(part)
