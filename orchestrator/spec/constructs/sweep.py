"""``sweep``: one copy of a body per parameter value, one model per device.

A sweep named ``hp`` over ``param`` makes ``hp/<i>/<op>`` per value and
``hp/<i>/<param>`` (the value as a scalar op). With ``select: {min: loss}``
it also makes ``hp.best`` (the best value) and ``hp.<op>`` (that op's value
in the best copy, kept only when something refers to it).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from ...errors import YamlPath
from ..records import Op, OpRef
from .base import Chain, Expander, Resolver


class Sweep:
    key: str = "sweep"
    name_fields: tuple[str, ...] = ()
    body_fields: tuple[str, ...] = ()
    internal_ops: Mapping[str, str] = {"select": "sweep's select: {min: loss} makes it", "pick": "sweep's select: {min: loss} makes it"}
    reference_roles: Mapping[str, str] = {}

    def expand(self, ex: Expander, item: Mapping[str, Any], path: YamlPath, prefix: str, chain: Chain,
               resolve: Resolver, group: str | None) -> None:
        name, spec = prefix + str(item["name"]), item["sweep"]
        spath = (*path, "sweep")
        param, values, body = str(spec["param"]), list(spec["values"]), spec["body"]
        devices = ex.device_list(spec["devices"], (*spath, "devices"), f"sweep '{name}'", chain) \
            if "devices" in spec else []
        local = ex.local_names(body) | {param}
        for i, value in enumerate(values):
            copy_prefix = f"{name}/{i}/"
            copy_chain = chain + ((devices[i % len(devices)],) if devices else ())
            ex.ops.append(Op(copy_prefix + param, "constant", (), {"value": value}, (*spath, "values", i),
                             device_chain=copy_chain, group=name))
            ex.items(body, (*spath, "body"), copy_prefix, copy_chain, ex.scoped(copy_prefix, local, {}, resolve), name)
        select = spec.get("select")
        if not select:
            return
        mode, metric = next(iter(select.items()))
        sel_path = (*spath, "select", mode)
        if not ex.body_defines(local - {param}, str(metric), sel_path, "select", name):
            return
        metrics = tuple(OpRef(f"{name}/{i}/{metric}") for i in range(len(values)))
        ex.ops.append(Op(f"{name}.best", "select", metrics, {"mode": mode, "values": values}, sel_path,
                         device_chain=chain, group=name))
        for local_name in sorted(ex.local_names(body)):
            picks = tuple(OpRef(f"{name}/{i}/{local_name}") for i in range(len(values)))
            ex.ops.append(Op(f"{name}.{local_name}", "pick", metrics + picks, {"mode": mode, "n": len(values)},
                             sel_path, device_chain=chain, group=name))
            ex.pick_candidates.add(f"{name}.{local_name}")

    def local_names(self, ex: Expander, item: Mapping[str, Any]) -> set[str]:
        body = (item.get("sweep") or {}).get("body") or []
        return {f"{item.get('name')}.best"} | {f"{item.get('name')}.{n}" for n in ex.local_names(body)}

    def body(self, item: Mapping[str, Any]) -> tuple[Sequence[Any], tuple[str, ...]]:
        return item["sweep"]["body"], ("sweep", "body")

    def size(self, item: Mapping[str, Any], items: Callable[[Sequence[Any]], int],
             devices: Callable[[Any], int]) -> int:
        spec = item["sweep"]
        values = len(spec["values"])
        return values * (items(spec["body"]) + 1) + 1 + len(spec["body"])


SWEEP = Sweep()
