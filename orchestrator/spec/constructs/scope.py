"""``scope``: a nested device block (TF's ``with tf.device(...)``).

Its device is added to the device chain of every op inside; names are
unchanged (as ``tf.device`` leaves names alone).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from ...errors import YamlPath
from .base import Chain, Expander, Resolver


class Scope:
    key: str = "scope"
    name_fields: tuple[str, ...] = ()
    body_fields: tuple[str, ...] = ()
    internal_ops: Mapping[str, str] = {}
    reference_roles: Mapping[str, str] = {}

    def expand(self, ex: Expander, item: Mapping[str, Any], path: YamlPath, prefix: str, chain: Chain,
               resolve: Resolver, group: str | None) -> None:
        req = ex.device(item["scope"], (*path, "scope"), "scope")
        # transparent: its ops keep the names and the construct (group) of the body around it
        ex.items(item.get("ops") or [], (*path, "ops"), prefix, chain + ((req,) if req else ()), resolve, group)

    def local_names(self, ex: Expander, item: Mapping[str, Any]) -> set[str]:
        return ex.local_names(item.get("ops") or [])

    def body(self, item: Mapping[str, Any]) -> tuple[Sequence[Any], tuple[str, ...]]:
        return item.get("ops") or [], ("ops",)

    def size(self, item: Mapping[str, Any], items: Callable[[Sequence[Any]], int],
             devices: Callable[[Any], int]) -> int:
        return items(item.get("ops") or [])


SCOPE = Scope()
