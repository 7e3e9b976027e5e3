"""Expansion of constructs (scope, replicate, sweep, iterate) into plain ops.

The graph a user writes nests; every later stage wants a flat list of
:class:`~orchestrator.model.Op` in graph order. Names are stable and readable:

* ``scope`` adds its device to the device chain of every op inside; names are
  unchanged (as TF's ``tf.device`` does not touch names).
* ``replicate`` named ``towers`` makes ``towers/<i>/<op>`` for each copy,
  ``towers/split/<x>`` for each split input (``:i`` is copy i's piece) and
  ``towers.<out>`` for each combined output.
* ``sweep`` named ``hp`` makes ``hp/<i>/<op>`` per value, ``hp/<i>/<param>``
  (the value as a scalar op), and with ``select`` ``hp.best`` (the best
  value) and ``hp.<op>`` (that op's value in the best copy, made only when
  something refers to it).
* ``iterate`` named ``train`` plans one step: ``train/<op>`` for the body,
  ``train/<state>`` for each carried state (it lives on its initial value's
  device), ``train.<state>`` for the final state and ``train.<metric>`` for a
  metric's series over the steps.

Inside a body, a name that the body defines refers to the copy's own op;
any other name refers to the enclosing graph. The expansion parses device
strings and checks only what it alone can see — names a construct must find
in its own body (``combine``, ``select``, ``update``) and device patterns that
match nothing; every other check belongs to ``validate``.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

from .devices import DeviceSpec
from .errors import DeviceSpecError, Diagnostic, YamlPath
from .model import Cluster, DeviceRequest, Document, Loop, Op, OpRef, StateVar
from .ops import COMMON_KEYS

CONSTRUCTS = ("scope", "replicate", "iterate", "sweep")
COMBINE_KIND = {"add_n": "add_n", "mean": "mean_n", "concat": "concat"}

MAX_EXPANDED_OPS = 1_000_000
"""Bound on the values a graph expands to (ops, and the outputs of ``split``/``call``).

Constructs multiply: eight nested replicates over ten devices are 10^8 ops
from a 500-byte file, an expansion bomb like YAML's billion laughs. The size
is computed from the written graph before anything is expanded, in time
linear in the file, and a graph over the bound is refused.
"""


@dataclass(frozen=True)
class Expansion:
    ops: tuple[Op, ...]
    loops: tuple[Loop, ...]
    diagnostics: tuple[Diagnostic, ...]
    complete: bool = True  # False: the graph was too big to expand, ``ops`` is empty


Resolver = Callable[[str], OpRef]


def did_you_mean(word: str, candidates: Iterable[str]) -> str:
    """``did you mean 'worker'?`` for the closest candidate, or ``""`` (validate re-exports it)."""
    close = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return f"did you mean '{close[0]}'?" if close else ""


def parse_ref(text: str) -> OpRef:
    """``name`` or ``name:i`` (output i of a multi-output op)."""
    name, sep, index = text.rpartition(":")
    if sep and index.isdigit() and name:
        return OpRef(name, int(index))
    return OpRef(text)


@dataclass
class _Expander:
    doc: Document
    cluster: Cluster | None
    ops: list[Op] = field(default_factory=list)
    loops: list[Loop] = field(default_factory=list)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    pick_candidates: set[str] = field(default_factory=set)

    # ------------------------------------------------------------------ helpers

    def device(self, text: Any, path: YamlPath, source: str) -> DeviceRequest | None:
        try:
            return DeviceRequest(DeviceSpec.parse(str(text)), source, path)
        except DeviceSpecError as exc:
            self.diagnostics.append(self.doc.diagnostic(
                "device-syntax", path, str(exc),
                "write /job:NAME/task:N/device:CPU:0, /gpu:1 or GPU:1"))
            return None

    def device_list(self, spec: Any, path: YamlPath, source: str,
                    chain: tuple[DeviceRequest, ...] = ()) -> list[DeviceRequest]:
        """A list of device strings, or one pattern expanded within the enclosing scopes."""
        if isinstance(spec, list):
            found = [self.device(text, (*path, i), source) for i, text in enumerate(spec)]
            return [d for d in found if d is not None]
        pattern = self.device(spec, path, source)
        if pattern is None or self.cluster is None:
            return []
        scoped = DeviceSpec()
        for req in chain:  # /gpu:* inside scope /job:worker/task:1 means that task's GPUs
            scoped = scoped.merge(req.spec)
        matches = self.cluster.matching(scoped.merge(pattern.spec))
        if not matches:
            self.diagnostics.append(self.doc.diagnostic(
                "device-pattern", path, f"device pattern '{spec}' matches no device of the cluster",
                "list devices explicitly or add GPUs to a job"))
        return [DeviceRequest(d.spec, source, path) for d in matches]

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
    def local_names(items: Sequence[Any]) -> set[str]:
        """Names a body defines at its own level, including names constructs export."""
        names: set[str] = set()
        for item in items:
            if not isinstance(item, dict):
                continue
            if "scope" in item:
                names |= _Expander.local_names(item.get("ops") or [])
            elif "replicate" in item:
                combine = (item.get("replicate") or {}).get("combine") or {}
                names |= {f"{item.get('name')}.{out}" for out in combine}
            elif "iterate" in item:
                body = item.get("iterate") or {}
                names |= {f"{item.get('name')}.{k}" for k in list(body.get("state") or {}) + list(body.get("metrics") or {})}
            elif "sweep" in item:
                body = item.get("sweep") or {}
                names.add(f"{item.get('name')}.best")
                names |= {f"{item.get('name')}.{n}" for n in _Expander.local_names(body.get("body") or [])}
            elif "name" in item:
                names.add(str(item["name"]))
        return names

    @staticmethod
    def scoped(prefix: str, local: set[str], subs: Mapping[str, OpRef], outer: Resolver) -> Resolver:
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

    def items(self, items: Sequence[Any], path: YamlPath, prefix: str,
              chain: tuple[DeviceRequest, ...], resolve: Resolver, group: str | None) -> None:
        for index, item in enumerate(items):
            here = (*path, index)
            if "scope" in item:
                req = self.device(item["scope"], (*here, "scope"), "scope")
                self.items(item.get("ops") or [], (*here, "ops"), prefix,
                           chain + ((req,) if req else ()), resolve, group)
            elif "replicate" in item:
                self.replicate(item, here, prefix, chain, resolve)
            elif "iterate" in item:
                self.iterate(item, here, prefix, chain, resolve)
            elif "sweep" in item:
                self.sweep(item, here, prefix, chain, resolve)
            else:
                self.op(item, here, prefix, chain, resolve, group)

    def op(self, item: Mapping[str, Any], path: YamlPath, prefix: str,
           chain: tuple[DeviceRequest, ...], resolve: Resolver, group: str | None) -> None:
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
        self.ops.append(Op(
            name=prefix + str(item["name"]), kind=str(item["op"]), inputs=refs, params=params, path=path,
            input_keys=keys, device_chain=chain, after=tuple(str(resolve(str(a))) for a in item.get("after") or []),
            tags=tuple(item.get("tags") or ()), retries=int(item.get("retries", 0)),
            timeout=item.get("timeout"), group=group, outputs=_output_count(item),
        ))

    def replicate(self, item: Mapping[str, Any], path: YamlPath, prefix: str,
                  chain: tuple[DeviceRequest, ...], resolve: Resolver) -> None:
        name, spec = prefix + str(item["name"]), item["replicate"]
        rpath = (*path, "replicate")
        devices = self.device_list(spec["devices"], (*rpath, "devices"), f"replicate '{name}'", chain)
        if not devices:
            return
        subs_per_copy: list[dict[str, OpRef]] = [{} for _ in devices]
        for x, axis in (spec.get("split") or {}).items():
            split_name = f"{name}/split/{x}"
            source = resolve(str(x))
            self.ops.append(Op(split_name, "split", (source,), {"num": len(devices), "axis": axis},
                               (*rpath, "split", x), device_chain=chain, colocate_with=source,
                               group=name, outputs=len(devices)))
            for i, subs in enumerate(subs_per_copy):
                subs[str(x)] = OpRef(split_name, i)
        body = spec["body"]
        local = self.local_names(body)
        for i, req in enumerate(devices):
            copy_prefix = f"{name}/{i}/"
            inner = self.scoped(copy_prefix, local, subs_per_copy[i], resolve)
            self.items(body, (*rpath, "body"), copy_prefix, chain + (req,), inner, name)
        combine_chain = chain
        if "combine_device" in spec:
            req = self.device(spec["combine_device"], (*rpath, "combine_device"), f"replicate '{name}' combine_device")
            combine_chain = chain + ((req,) if req else ())
        for out, how in (spec.get("combine") or {}).items():
            if not self.body_defines(local, str(out), (*rpath, "combine", out), "combine", name, key=True):
                continue
            refs = tuple(OpRef(f"{name}/{i}/{out}") for i in range(len(devices)))
            params = {"axis": 0} if how == "concat" else {}
            self.ops.append(Op(f"{name}.{out}", COMBINE_KIND[how], refs, params, (*rpath, "combine", out),
                               device_chain=combine_chain, group=name))

    def sweep(self, item: Mapping[str, Any], path: YamlPath, prefix: str,
              chain: tuple[DeviceRequest, ...], resolve: Resolver) -> None:
        name, spec = prefix + str(item["name"]), item["sweep"]
        spath = (*path, "sweep")
        param, values, body = str(spec["param"]), list(spec["values"]), spec["body"]
        devices = self.device_list(spec["devices"], (*spath, "devices"), f"sweep '{name}'", chain) \
            if "devices" in spec else []
        local = self.local_names(body) | {param}
        for i, value in enumerate(values):
            copy_prefix = f"{name}/{i}/"
            copy_chain = chain + ((devices[i % len(devices)],) if devices else ())
            self.ops.append(Op(copy_prefix + param, "constant", (), {"value": value}, (*spath, "values", i),
                               device_chain=copy_chain, group=name))
            self.items(body, (*spath, "body"), copy_prefix, copy_chain,
                       self.scoped(copy_prefix, local, {}, resolve), name)
        select = spec.get("select")
        if not select:
            return
        mode, metric = next(iter(select.items()))
        sel_path = (*spath, "select", mode)
        if not self.body_defines(local - {param}, str(metric), sel_path, "select", name):
            return
        metrics = tuple(OpRef(f"{name}/{i}/{metric}") for i in range(len(values)))
        self.ops.append(Op(f"{name}.best", "select", metrics, {"mode": mode, "values": values}, sel_path,
                           device_chain=chain, group=name))
        for local_name in sorted(self.local_names(body)):
            picks = tuple(OpRef(f"{name}/{i}/{local_name}") for i in range(len(values)))
            self.ops.append(Op(f"{name}.{local_name}", "pick", metrics + picks, {"mode": mode, "n": len(values)},
                               sel_path, device_chain=chain, group=name))
            self.pick_candidates.add(f"{name}.{local_name}")

    def iterate(self, item: Mapping[str, Any], path: YamlPath, prefix: str,
                chain: tuple[DeviceRequest, ...], resolve: Resolver) -> None:
        name, spec = prefix + str(item["name"]), item["iterate"]
        ipath = (*path, "iterate")
        body, state, update = spec["body"], dict(spec["state"]), dict(spec["update"])
        step_prefix = f"{name}/"
        first = len(self.ops)
        subs: dict[str, OpRef] = {}
        for var, init in state.items():
            init_ref = resolve(str(init))
            placeholder = step_prefix + var
            self.ops.append(Op(placeholder, "state", (init_ref,), {}, (*ipath, "state", var),
                               device_chain=chain, colocate_with=init_ref, group=name))
            subs[var] = OpRef(placeholder)
        local = self.local_names(body)
        inner = self.scoped(step_prefix, local, subs, resolve)
        self.items(body, (*ipath, "body"), step_prefix, chain, inner, name)
        state_vars = []
        for var, init in state.items():
            target = update.get(var)
            update_ref = inner(str(target)) if target is not None else subs[var]
            state_vars.append(StateVar(var, resolve(str(init)), subs[var].op, update_ref))
            where = (*ipath, "update", var) if target is not None else (*ipath, "state", var)
            self.ops.append(Op(f"{name}.{var}", "identity", (update_ref,), {}, where,
                               colocate_with=update_ref, group=name))
        for var in update:
            if var not in state:
                self.diagnostics.append(self.doc.diagnostic(
                    "unknown-state", (*ipath, "update", var), f"update names '{var}', which is not a state variable",
                    f"state variables: {', '.join(state)}", key=True))
        metrics = []
        for metric, target in (spec.get("metrics") or {}).items():
            ref = inner(str(target))
            metrics.append((metric, ref))
            self.ops.append(Op(f"{name}.{metric}", "series", (ref,), {"steps": int(spec["steps"])},
                               (*ipath, "metrics", metric), colocate_with=ref, group=name))
        body_names = tuple(op.name for op in self.ops[first:] if op.name.startswith(step_prefix))
        self.loops.append(Loop(name, int(spec["steps"]), int(spec.get("window", 50)), tuple(state_vars),
                               body_names, tuple(metrics), ipath))


def _output_count(item: Mapping[str, Any]) -> int:
    if item.get("op") == "split":
        return int(item.get("num", 1))
    if item.get("op") == "call":
        return int(item.get("outputs", 1))
    return 1


class _Sizer:
    """The number of values each written item expands to (an upper bound), memoised per item."""

    def __init__(self, cluster: Cluster | None):
        self.cluster = cluster
        self.sizes: dict[int, int] = {}

    def items(self, items: Sequence[Any]) -> int:
        total = 0
        for item in items:  # plain ops inline: specs have 100k of them
            if "scope" in item or "replicate" in item or "iterate" in item or "sweep" in item:
                total += self.item(item)
            else:
                total += _output_count(item)
        return total

    def item(self, item: Any) -> int:
        size = self.sizes.get(id(item))
        if size is None:
            size = self.sizes[id(item)] = self._measure(item)
        return size

    def _measure(self, item: Any) -> int:
        if "scope" in item:
            return self.items(item.get("ops") or [])
        if "replicate" in item:
            spec = item["replicate"]
            copies = self.devices(spec.get("devices"))
            return copies * self.items(spec["body"]) + copies * len(spec.get("split") or {}) + \
                len(spec.get("combine") or {})
        if "sweep" in item:
            spec = item["sweep"]
            values = len(spec["values"])
            return values * (self.items(spec["body"]) + 1) + 1 + len(spec["body"])
        if "iterate" in item:
            spec = item["iterate"]
            return self.items(spec["body"]) + 2 * len(spec["state"]) + len(spec.get("metrics") or {})
        return _output_count(item)

    def devices(self, spec: Any) -> int:
        if isinstance(spec, list):
            return len(spec)
        if self.cluster is None:
            return 0
        try:
            return len(self.cluster.matching(DeviceSpec.parse(str(spec))))
        except DeviceSpecError:
            return 0

    @staticmethod
    def children(item: Any) -> tuple[Sequence[Any], tuple[str, ...]]:
        for kind in CONSTRUCTS:
            if kind in item:
                return (item.get("ops") or [], ("ops",)) if kind == "scope" else (item[kind]["body"], (kind, "body"))
        return [], ()


def _too_big(doc: Document, graph: Sequence[Any], cluster: Cluster | None) -> Diagnostic | None:
    """A diagnostic at the innermost item that alone expands past the bound; None when the graph fits."""
    sizer = _Sizer(cluster)
    total = sizer.items(graph)
    if total <= MAX_EXPANDED_OPS:
        return None
    limit = f"at most {MAX_EXPANDED_OPS:,} are supported"
    items, items_path, found, path = graph, ("graph",), None, ("graph",)
    while True:
        index = next((i for i, item in enumerate(items) if sizer.item(item) > MAX_EXPANDED_OPS), None)
        if index is None:
            break
        found, path = items[index], (*items_path, index)
        inner, parts = sizer.children(found)
        items, items_path = inner, (*path, *parts)
    if found is None:
        return doc.diagnostic("graph-size", ("graph",), f"the graph expands to {total:,} ops; {limit}",
                              "split the job into several specs")
    size = sizer.item(found)
    kind = next((k for k in CONSTRUCTS if k in found), None)
    if kind is None:  # one op with too many outputs
        key = "num" if found.get("op") == "split" else "outputs"
        return doc.diagnostic("graph-size", (*path, key), f"op '{found['name']}' makes {size:,} outputs; {limit}",
                              "split into fewer pieces" if key == "num" else "return fewer values")
    what = "the ops of this scope expand" if kind == "scope" else f"{kind} '{found['name']}' expands"
    return doc.diagnostic("graph-size", path if kind == "scope" else (*path, kind), f"{what} to {size:,} ops; {limit}",
                          "constructs multiply their bodies, and nested ones multiply again: "
                          "use fewer devices or values, or less nesting")


def expand(doc: Document, graph: Sequence[Any], cluster: Cluster | None) -> Expansion:
    """Flatten the (schema-valid) graph into plain ops in graph order."""
    too_big = _too_big(doc, graph, cluster)
    if too_big is not None:
        return Expansion((), (), (too_big,), complete=False)
    expander = _Expander(doc, cluster)
    expander.items(graph, ("graph",), "", (), parse_ref, None)
    ops = _prune_unused_picks(expander.ops, expander.pick_candidates, doc)
    return Expansion(tuple(ops), tuple(expander.loops), tuple(expander.diagnostics))


def _prune_unused_picks(ops: list[Op], candidates: set[str], doc: Document) -> list[Op]:
    """``sweep.<op>`` values move every copy's value to one device: keep only those used."""
    if not candidates:
        return ops
    used = {ref.op for op in ops for ref in op.inputs} | {a for op in ops for a in op.after}
    used |= {parse_ref(str(k)).op for k in (doc.data.get("outputs") or {})}
    return [op for op in ops if op.name not in candidates or op.name in used]
