"""Problems found while loading, and the positions and paths that make them diagnostics.

The composer and the constructor find problems before the file name is known;
they raise :class:`Problem`, which the parser turns into a
:class:`~orchestrator.errors.Diagnostic`. PyYAML's marks are 0-based;
everything here speaks the diagnostics' 1-based lines and columns.
"""

from __future__ import annotations

from typing import Any, NoReturn

from ...errors import Diagnostic, LoadError, YamlPath
from ..records import Position
from .pyyaml import TAG_PREFIX, Node, ScalarNode, SequenceNode


class Problem(Exception):
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
            position = mark_position(self.node.start_mark)
            if root is not None:
                path = find_paths(root, {id(self.node)}).get(id(self.node), path)
        return Diagnostic(self.code, file, position[0], position[1], path, self.message, self.hint)


def mark_position(mark: Any) -> Position:
    """yaml marks are 0-based; diagnostics are 1-based."""
    return (mark.line + 1, mark.column + 1)


def text_position(text: str, offset: int) -> Position:
    """1-based line and column of a character offset in ``text``."""
    line = text.count("\n", 0, offset) + 1
    column = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return (line, column)


def fail(code: str, file: str, message: str, hint: str, position: Position = (1, 1)) -> NoReturn:
    raise LoadError([Diagnostic(code, file, position[0], position[1], (), message, hint)])


def show_tag(tag: str) -> str:
    """Write a tag back the way users spell it: ``!!python/object:os.system``."""
    return "!!" + tag[len(TAG_PREFIX) :] if tag.startswith(TAG_PREFIX) else tag


def key_part(key_node: Node) -> str:
    return str(key_node.value) if isinstance(key_node, ScalarNode) else "?"


def find_paths(root: Node, targets: set[int]) -> dict[int, YamlPath]:
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
                children += [(key_node, path), (value_node, path + (key_part(key_node),))]
        stack.extend(reversed(children))
    return found
