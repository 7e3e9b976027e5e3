"""What every construct provides, and the expander that calls it."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from ...devices import DeviceSpec
from ...errors import DeviceSpecError, Diagnostic, YamlPath, did_you_mean
from ..records import Cluster, DeviceRequest, Document, Loop, Op, OpRef, Scope
from ..scopes import TOP
from ..searches import Search
from ...ops import COMMON_KEYS, lookup
from .shapes import settle_shapes

Resolver = Callable[[str], OpRef]
Chain = tuple[DeviceRequest, ...]


class Construct(Protocol):
    """One construct of the spec language (scope, replicate, iterate, sweep).

    ``key`` marks a graph item as this construct (``- name: towers``
    ``replicate: {...}``). Everything the language knows about it lives in
    its module: how it expands into plain ops, the names it defines at its
    own level, how big it can get, where its body is, which of its fields
    are mappings keyed by names, and how a reference it makes reads in a
    message.
    """

    key: str
    name_fields: tuple[str, ...]  # mappings whose keys are names (split, combine, state, ...)
    body_fields: tuple[str, ...]  # fields whose references resolve inside the body (iterate's update)
    internal_ops: Mapping[str, str]  # internal op kinds it makes -> how a user asks for them instead
    reference_roles: Mapping[str, str]  # field -> how a reference made there reads: {ref} {var} {group}

    def expand(self, ex: Expander, item: Mapping[str, Any], path: YamlPath, prefix: str, chain: Chain,
               resolve: Resolver, group: str | None) -> None: ...
    def local_names(self, ex: Expander, item: Mapping[str, Any]) -> set[str]: ...
    def body(self, item: Mapping[str, Any]) -> tuple[Sequence[Any], tuple[str, ...]]: ...
    def size(self, item: Mapping[str, Any], items: Callable[[Sequence[Any]], int],
             devices: Callable[[Any], int]) -> int: ...


def parse_ref(text: str) -> OpRef:
    return OpRef.parse(text)


@dataclass
class Expander:
    """Flattens a graph: plain ops are made here, constructs by their own modules."""

    doc: Document
    cluster: Cluster | None
    registry: Mapping[str, Construct]
    ops: list[Op] = field(default_factory=list)
    loops: list[Loop] = field(default_factory=list)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    pick_candidates: set[str] = field(default_factory=set)
    cache_scopes: dict[str, bool] = field(default_factory=dict)  # construct name -> its ``cache:``
    searches: list[Search] = field(default_factory=list)  # every sweep's copies, in graph order
    copy_bodies: list[tuple[YamlPath, int, Any]] = field(default_factory=list)  # bodies ${copy.NAME} changed
    copies: int = 0  # the sweeps' copies made so far (a spec holds at most space.MAX_COPIES)
    scope: Scope = TOP  # where the ops made now stand: each loop, replicate copy and sweep copy narrows it

    @contextmanager
    def within(self, **narrower: Any) -> Iterator[Scope]:
        """Make the ops of a body in a narrower scope (``loop=``, ``role=``, a copy's ``indices=``, ...)."""
        outer = self.scope
        self.scope = replace(outer, **narrower)
        try:
            yield self.scope
        finally:
            self.scope = outer

    def construct_of(self, item: Mapping[str, Any]) -> Construct | None:
        return next((c for key, c in self.registry.items() if key in item), None)

    def local_names(self, items: Sequence[Any]) -> set[str]:
        """Names a body defines at its own level, including names constructs export."""
        names: set[str] = set()
        for item in items:
            if not isinstance(item, dict):
                continue
            construct = self.construct_of(item)
            if construct is not None:
                names |= construct.local_names(self, item)
            elif "name" in item:
                names.add(str(item["name"]))
        return names

    # ------------------------------------------------------------------ helpers for constructs

    def device(self, text: Any, path: YamlPath, source: str) -> DeviceRequest | None:
        try:
            return DeviceRequest(DeviceSpec.parse(str(text)), source, path)
        except DeviceSpecError as exc:
            self.diagnostics.append(self.doc.diagnostic(
                "device-syntax", path, str(exc), "write /job:NAME/task:N/device:CPU:0, /gpu:1 or GPU:1"))
            return None

    def device_list(self, spec: Any, path: YamlPath, source: str, chain: Chain = (),
                    with_lost: bool = False) -> list[DeviceRequest]:
        """A list of device strings, or one pattern expanded within the enclosing scopes (on the devices
        still there, or ``with_lost`` on every device, those a re-plan takes out included)."""
        if isinstance(spec, list):
            found = [self.device(text, (*path, i), source) for i, text in enumerate(spec)]
            return [d for d in found if d is not None]
        if isinstance(spec, str) and "," in spec:  # YAML reads "devices: /gpu:0, /gpu:1" as one string
            items = ", ".join(part.strip() for part in spec.split(","))
            self.diagnostics.append(self.doc.diagnostic(
                "device-syntax", path, f"'{spec}' is one device string with commas, not a list of devices",
                f"write a list: [{items}]"))
            return []
        pattern = self.device(spec, path, source)
        if pattern is None or self.cluster is None:
            return []
        scoped = DeviceSpec()
        for req in chain:  # /gpu:* inside scope /job:worker/task:1 means that task's GPUs
            scoped = scoped.merge(req.spec)
        merged = scoped.merge(pattern.spec)
        matches = self.cluster.matching_before_loss(merged) if with_lost else self.cluster.matching(merged)
        if not matches:
            self.diagnostics.append(self.doc.diagnostic(
                "device-pattern", path, f"device pattern '{spec}' matches no device of the cluster",
                "list devices explicitly or add GPUs to a job"))
        return [DeviceRequest(d.spec, source, path) for d in matches]

    def spread(self, devices: Sequence[DeviceRequest], copies: int) -> list[DeviceRequest | None]:
        """Copy ``i`` on ``devices[i % n]``, in turn; a re-plan moves the copies of a lost device to the
        devices left, in turn, and leaves every other copy where it was (the plan packs them within caps)."""
        if not devices:
            return [None] * copies
        lost = [self.cluster is not None and self.cluster.is_lost(d.spec) for d in devices]
        alive = [d for d, gone in zip(devices, lost) if not gone]
        out: list[DeviceRequest | None] = []
        moved = 0
        for i in range(copies):
            d = devices[i % len(devices)]
            if lost[i % len(devices)] and alive:  # with every device lost the placer names the lost one
                d = replace(alive[moved % len(alive)], source=f"{d.source} (moved off lost {d.spec})")
                moved += 1
            out.append(d)
        return out

    def body_defines(self, local: set[str], wanted: str, path: YamlPath, what: str, construct: str,
                     key: bool = False) -> bool:
        """True if a body defines ``wanted``; else a diagnostic (combine and select name body ops only).

        Without this check the reference would be looked up per copy and reported
        as ``towers/0/d`` and ``towers/1/d``, names the user never wrote.
        """
        if wanted in local:
            return True
        self.diagnostics.append(self.doc.diagnostic(
            f"{what}-unknown", path, f"{what} names '{wanted}', which the body of '{construct}' does not define",
            did_you_mean(wanted, local) or f"body ops: {', '.join(sorted(local))}", key=key))
        return False

    @staticmethod
    def scoped(prefix: str, local: set[str], subs: Mapping[str, OpRef], outer: Resolver) -> Resolver:
        """References inside a body: its own names get the copy's prefix, others resolve outside."""
        def resolve(text: str) -> OpRef:
            ref = parse_ref(text)
            if ref.op in subs:
                sub = subs[ref.op]
                return sub if ref.output is None else OpRef(sub.op, ref.output)
            if ref.op in local:
                return OpRef(prefix + ref.op, ref.output)
            return outer(text)
        return resolve

    # ------------------------------------------------------------------ items

    def items(self, items: Sequence[Any], path: YamlPath, prefix: str, chain: Chain, resolve: Resolver,
              group: str | None) -> None:
        for index, item in enumerate(items):
            here = (*path, index)
            construct = self.construct_of(item)
            if construct is not None:
                if "cache" in item and "name" in item:
                    self.cache_scopes[prefix + str(item["name"])] = bool(item["cache"])
                construct.expand(self, item, here, prefix, chain, resolve, group)
            else:
                self.op(item, here, prefix, chain, resolve, group)

    def op(self, item: Mapping[str, Any], path: YamlPath, prefix: str, chain: Chain, resolve: Resolver,
           group: str | None) -> None:
        raw_inputs = item.get("inputs") or []
        keys: tuple[str, ...] | None = None
        if isinstance(raw_inputs, dict):
            keys = tuple(raw_inputs)
            refs = tuple(resolve(str(v)) for v in raw_inputs.values())
        else:
            refs = tuple(resolve(str(v)) for v in raw_inputs)
        if "device" in item:
            req = self.device(item["device"], (*path, "device"), "op")
            chain = chain + ((req,) if req else ())
        params = {k: v for k, v in item.items() if k not in COMMON_KEYS}
        if "shape" in params or "output" in params:  # dimensions written as expressions become numbers
            settle_shapes(params, self.doc, path, self.diagnostics)
        self.ops.append(Op(
            name=prefix + str(item["name"]), kind=str(item["op"]), inputs=refs, params=params, path=path,
            input_keys=keys, device_chain=chain, after=tuple(str(resolve(str(a))) for a in item.get("after") or []),
            tags=tuple(item.get("tags") or ()), retries=int(item.get("retries", 0)),
            timeout=item.get("timeout"), group=group, outputs=output_count(item),
            cache=bool(item["cache"]) if "cache" in item else None, scope=self.scope,
        ))


def output_count(item: Mapping[str, Any]) -> int:
    """How many values a plain op written as ``item`` returns (as its op type declares)."""
    definition = lookup(str(item.get("op")))
    return definition.output_count(item) if definition is not None else 1
