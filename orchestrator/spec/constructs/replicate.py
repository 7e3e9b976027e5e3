"""``replicate``: multi-tower data parallelism (TF's make_parallel / MirroredStrategy).

A replicate named ``towers`` makes ``towers/<i>/<op>`` for each copy of its
body, one per device; ``towers/split/<x>`` for each split input (``:i`` is
copy i's piece, colocated with ``x``); and ``towers.<out>`` for each
combined output (``add_n``, ``mean`` or ``concat`` of the copies, on
``combine_device`` if given). Broadcast inputs are read by every copy. ``values: {seed: [1, 2]}`` gives
each copy its own values (a list with one per device, or ``{glob: ...}``
matching one file per device): a number is a scalar op of that name in the
copy, and any value is ``${copy.NAME}`` in the body's fields.

A ``mean`` weighs each copy by the rows of its piece, so that it equals the
mean over the whole batch when the split is uneven: its op records the
splits that weigh it (``split``), and validation, the first stage that knows
their lengths, records the weights themselves (:mod:`orchestrator.spec.validate.combine`).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from ...errors import YamlPath
from ..records import Op, OpRef
from .base import Chain, Expander, Resolver
from .space import SpaceReader, substitute_copy
from .sweep import is_number

COMBINE_KIND = {"add_n": "add_n", "mean": "mean_n", "concat": "concat"}


class Replicate:
    key: str = "replicate"
    name_fields: tuple[str, ...] = ("split", "combine")
    body_fields: tuple[str, ...] = ()
    internal_ops: Mapping[str, str] = {"mean_n": "replicate's combine: {c: mean} makes it; to average inputs use add_n then div "
                              "with scalar"}
    reference_roles: Mapping[str, str] = {"split": "the split input '{ref}' of '{group}'"}

    def expand(self, ex: Expander, item: Mapping[str, Any], path: YamlPath, prefix: str, chain: Chain,
               resolve: Resolver, group: str | None) -> None:
        name, spec = prefix + str(item["name"]), item["replicate"]
        rpath = (*path, "replicate")
        devices = ex.device_list(spec["devices"], (*rpath, "devices"), f"replicate '{name}'", chain)
        if not devices:
            return
        subs_per_copy: list[dict[str, OpRef]] = [{} for _ in devices]
        splits: list[str] = []
        for x, axis in (spec.get("split") or {}).items():
            split_name = f"{name}/split/{x}"
            source = resolve(str(x))
            ex.ops.append(Op(split_name, "split", (source,), {"num": len(devices), "axis": axis},
                             (*rpath, "split", x), device_chain=chain, colocate_with=source,
                             group=name, outputs=len(devices), scope=ex.scope))
            splits.append(split_name)
            for i, subs in enumerate(subs_per_copy):
                subs[str(x)] = OpRef(split_name, i)
        body = spec["body"]
        per_copy = self.per_copy(ex, spec, rpath, name, len(devices))
        numbers = [p for p in (per_copy[0] if per_copy else {}) if all(is_number(c[p]) for c in per_copy)]
        local = ex.local_names(body) | set(numbers)
        for i, req in enumerate(devices):
            copy_prefix = f"{name}/{i}/"
            inner = ex.scoped(copy_prefix, local, subs_per_copy[i], resolve)
            copy_body = body
            with ex.within(indices=(*ex.scope.indices, i)):
                if per_copy:
                    for param in numbers:
                        ex.ops.append(Op(copy_prefix + param, "constant", (), {"value": per_copy[i][param]},
                                         (*rpath, "values", param), device_chain=chain + (req,), group=name,
                                         scope=ex.scope))
                    copy_body = substitute_copy(body, per_copy[i])
                    if copy_body != body:
                        ex.copy_bodies.append(((*rpath, "body"), i, copy_body))
                ex.items(copy_body, (*rpath, "body"), copy_prefix, chain + (req,), inner, name)
        combine_chain = chain
        if "combine_device" in spec:
            combine = ex.device(spec["combine_device"], (*rpath, "combine_device"),
                                f"replicate '{name}' combine_device")
            combine_chain = chain + ((combine,) if combine else ())
        for out, how in (spec.get("combine") or {}).items():
            if not ex.body_defines(local, str(out), (*rpath, "combine", out), "combine", name, key=True):
                continue
            refs = tuple(OpRef(f"{name}/{i}/{out}") for i in range(len(devices)))
            params: dict[str, Any] = {}
            if how == "concat":
                params = {"axis": 0}
            elif how == "mean":  # whose pieces' rows weigh the copies (validation knows their lengths)
                params = {"split": list(splits)}
            ex.ops.append(Op(f"{name}.{out}", COMBINE_KIND[how], refs, params, (*rpath, "combine", out),
                             device_chain=combine_chain, group=name, scope=ex.scope))

    @staticmethod
    def per_copy(ex: Expander, spec: Mapping[str, Any], rpath: YamlPath, name: str, copies: int) -> list[dict[str, Any]]:
        """``values:``: one value per copy for each name (a list, or ``{glob: ...}``: a file each), checked."""
        written = spec.get("values")
        if not written:
            return []
        reader = SpaceReader(ex.doc, ex.diagnostics)
        columns = {}
        for param, axis in written.items():
            values = reader.axis(axis, (*rpath, "values", param), f"replicate '{name}'", str(param))
            if values and len(values) != copies:
                ex.diagnostics.append(ex.doc.diagnostic(
                    "replicate-values", (*rpath, "values", param), f"replicate '{name}' has {copies} copies (one "
                    f"per device) but {len(values)} values of '{param}'", f"give one value per device: {copies}",
                    key=True))
                return []
            if not values:
                return []
            columns[str(param)] = values
        return [{param: values[i] for param, values in columns.items()} for i in range(copies)]

    def local_names(self, ex: Expander, item: Mapping[str, Any]) -> set[str]:
        combine = (item.get("replicate") or {}).get("combine") or {}
        return {f"{item.get('name')}.{out}" for out in combine}

    def body(self, item: Mapping[str, Any]) -> tuple[Sequence[Any], tuple[str, ...]]:
        return item["replicate"]["body"], ("replicate", "body")

    def size(self, item: Mapping[str, Any], items: Callable[[Sequence[Any]], int],
             devices: Callable[[Any], int]) -> int:
        spec = item["replicate"]
        copies = devices(spec.get("devices"))
        return copies * items(spec["body"]) + copies * len(spec.get("split") or {}) + len(spec.get("combine") or {})


REPLICATE = Replicate()
