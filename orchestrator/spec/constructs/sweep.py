"""``sweep``: one copy of a body per point of a search space (hyperparameter search, ensembles).

A sweep named ``hp`` makes ``hp/<i>/<op>`` for every copy ``i`` and
``hp/<i>/<param>`` for each number the copy is given (a scalar op); text
values (paths, names) reach the body as ``${copy.NAME}``. The space is a
list, a ``grid``, ``random`` draws or ``copies`` (:mod:`.space`). Copies are
spread over the devices of ``spread`` in turn; the plan packs them (several
at once on a device where they fit). Beside the copies it makes:

* ``select: {min: loss}``: ``hp.best`` (the best copy's value when the space
  has one number, else its index) and ``hp.<name>`` for each body op and
  number (its value in the best copy, made only when something reads it);
* ``gather: {losses: loss}``: ``hp.losses``, one row per copy (``stack``);
* ``combine: {pred: mean}``: ``hp.pred``, the copies' ``mean``, ``add_n``,
  ``concat``, or ``{weighted_by: w}`` a mean weighed by each copy's ``w``;
* ``table:``: a CSV the run writes, a row per copy (``spec.searches``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Mapping, Sequence

from ...errors import YamlPath
from ..records import Loop, Op, OpRef, Scope
from ..searches import Gathering, Search, SweepCopy, Table
from .base import Chain, Expander, Resolver
from .halving import read_rules
from .space import MAX_COPIES, SpaceReader, copy_id, substitute_copy

COMBINE_KIND = {"add_n": "add_n", "mean": "mean_n", "concat": "concat"}


def gathering(ex: Expander, name: str) -> Scope:
    """The scope of sweep ``name``'s ops that read every copy (select, pick, gather, combine, table)."""
    return replace(ex.scope, sweep=name, copy=None, part="gathering")


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class Sweep:
    key: str = "sweep"
    name_fields: tuple[str, ...] = ("gather", "combine")
    body_fields: tuple[str, ...] = ()
    internal_ops: Mapping[str, str] = {"select": "sweep's select: {min: loss} makes it",
                                       "pick": "sweep's select: {min: loss} makes it"}
    reference_roles: Mapping[str, str] = {}

    def expand(self, ex: Expander, item: Mapping[str, Any], path: YamlPath, prefix: str, chain: Chain,
               resolve: Resolver, group: str | None) -> None:
        name, spec = prefix + str(item["name"]), item["sweep"]
        spath = (*path, "sweep")
        copies = SpaceReader(ex.doc, ex.diagnostics, MAX_COPIES - ex.copies).copies(spec, spath, name)
        ex.copies += len(copies)
        if not copies:
            return
        devices = ex.spread(self.devices(ex, spec, spath, name, chain), len(copies))
        numbers = [p for p in copies[0] if all(is_number(c[p]) for c in copies)]
        body = spec["body"]
        local = ex.local_names(body) | set(numbers)
        halving, median = read_rules(ex, spec, spath, name, len(copies))
        rule = halving or median
        records: list[SweepCopy] = []
        spans: list[tuple[SweepCopy, int, int]] = []  # each copy's ops: ex.ops[first:end]
        for i, values in enumerate(copies):
            copy_prefix = f"{name}/{i}/"
            on = devices[i]
            copy_chain = chain + ((on,) if on is not None else ())
            copy_scope = replace(ex.scope, sweep=name, copy=i, indices=(*ex.scope.indices, i),
                                 copies=(*ex.scope.copies, (name, i)))
            first = len(ex.ops)
            for param in numbers:
                ex.ops.append(Op(copy_prefix + param, "constant", (), {"value": values[param]},
                                 self.value_path(spec, spath, i, param), device_chain=copy_chain, group=name,
                                 scope=replace(copy_scope, part="value")))
            copy_body = substitute_copy(body, values)
            if copy_body != body:  # the schema sees each copy's values where ${copy.NAME} stood
                ex.copy_bodies.append(((*spath, "body"), i, copy_body))
            made = len(ex.loops)
            with ex.within(sweep=name, copy=i, indices=copy_scope.indices, copies=copy_scope.copies, part="body"):
                ex.items(copy_body, (*spath, "body"), copy_prefix, copy_chain,
                         ex.scoped(copy_prefix, local, {}, resolve), name)
            if rule is not None and rule.steps:  # the copy's loop's windows end where the driver decides
                ex.loops[made:] = [replace(lp, rungs=rule.steps) if lp.name == copy_prefix + rule.loop else lp
                                   for lp in ex.loops[made:]]
            records.append(SweepCopy(i, copy_id(values), values, copy_prefix,
                                     last_ops(ex.ops[first:], ex.loops[made:]), top_loops(ex.loops[made:])))
            spans.append((records[-1], first, len(ex.ops)))
        first_gathering = len(ex.ops)
        self.select(ex, spec, spath, name, chain, local, numbers, copies)
        self.gather(ex, spec, spath, name, chain, local, len(copies))
        self.combine(ex, spec, spath, name, chain, local, numbers, copies)
        table = self.table(ex, spec, spath, name, local, len(copies), chain)
        # the gathering ops wait for every copy's last ops, and learn from them which copies failed
        waits = tuple(op for record in records for op in record.last)
        ex.ops[first_gathering:] = [replace(op, after=op.after + waits) for op in ex.ops[first_gathering:]]
        of_copy = {op.name: record.index for record, first, end in spans for op in ex.ops[first:end]}
        of_copy.update({op: record.index for record in records for op in record.last})
        marks = tuple(Gathering(op.name, tuple(of_copy.get(ref.op, -1) for ref in op.inputs) +
                                tuple(of_copy.get(a, -1) for a in op.after)) for op in ex.ops[first_gathering:])
        ex.searches.append(Search(name, tuple(copies[0]), tuple(records), spath, table, self.selected(spec),
                                  bool(spec.get("allow_failures", False)), halving, median, marks))

    @staticmethod
    def value_path(spec: Mapping[str, Any], spath: YamlPath, i: int, param: str) -> YamlPath:
        """Where copy ``i``'s value of ``param`` is written (or drawn), for diagnostics about it."""
        if "values" in spec:
            return (*spath, "values", i)
        if "copies" in spec:
            return (*spath, "copies", i, param)
        return (*spath, "grid" if "grid" in spec else "random", *(("params",) if "random" in spec else ()), param)

    @staticmethod
    def devices(ex: Expander, spec: Mapping[str, Any], spath: YamlPath, name: str, chain: Chain) -> list[Any]:
        if "devices" in spec:
            ex.diagnostics.append(ex.doc.diagnostic(
                "sweep-devices", (*spath, "devices"), f"sweep '{name}': devices: is now spread: (on an op, "
                "/gpu:* lets Dask choose a GPU; a sweep spreads its copies over every device listed or matched)",
                "rename devices: to spread:", "warning", key=True))
        written = spec.get("spread", spec.get("devices"))
        if written is None:
            return []
        where = (*spath, "spread" if "spread" in spec else "devices")
        return ex.device_list(written, where, f"sweep '{name}'", chain, with_lost=True)

    @staticmethod
    def selected(spec: Mapping[str, Any]) -> tuple[str, str] | None:
        select = spec.get("select")
        if not select:
            return None
        mode, metric = next(iter(select.items()))
        return str(mode), str(metric)

    def select(self, ex: Expander, spec: Mapping[str, Any], spath: YamlPath, name: str, chain: Chain,
               local: set[str], numbers: list[str], copies: list[dict[str, Any]]) -> None:
        chosen = self.selected(spec)
        if chosen is None:
            return
        mode, metric = chosen
        sel_path = (*spath, "select", mode)
        if not ex.body_defines(local - set(numbers), metric, sel_path, "select", name):
            return
        n = len(copies)
        one = len(copies[0]) == 1 and len(numbers) == 1
        values = [c[numbers[0]] for c in copies] if one else list(range(n))
        metrics = tuple(OpRef(f"{name}/{i}/{metric}") for i in range(n))
        ex.ops.append(Op(f"{name}.best", "select", metrics, {"mode": mode, "values": values}, sel_path,
                         device_chain=chain, group=name, scope=gathering(ex, name)))
        taken = set(spec.get("gather") or {}) | set(spec.get("combine") or {})  # those names are theirs
        for local_name in sorted(local - taken):
            picks = tuple(OpRef(f"{name}/{i}/{local_name}") for i in range(n))
            ex.ops.append(Op(f"{name}.{local_name}", "pick", metrics + picks, {"mode": mode, "n": n},
                             sel_path, device_chain=chain, group=name, scope=gathering(ex, name)))
            ex.pick_candidates.add(f"{name}.{local_name}")

    @staticmethod
    def gather(ex: Expander, spec: Mapping[str, Any], spath: YamlPath, name: str, chain: Chain,
               local: set[str], n: int) -> None:
        for out, of in (spec.get("gather") or {}).items():
            where = (*spath, "gather", out)
            if ex.body_defines(local, str(of), where, "gather", name):
                ex.ops.append(Op(f"{name}.{out}", "stack", tuple(OpRef(f"{name}/{i}/{of}") for i in range(n)),
                                 {"axis": 0}, where, device_chain=chain, group=name, scope=gathering(ex, name)))

    @staticmethod
    def combine(ex: Expander, spec: Mapping[str, Any], spath: YamlPath, name: str, chain: Chain,
                local: set[str], numbers: list[str], copies: list[dict[str, Any]]) -> None:
        for out, how in (spec.get("combine") or {}).items():
            where = (*spath, "combine", out)
            if not ex.body_defines(local, str(out), where, "combine", name, key=True):
                continue
            refs = tuple(OpRef(f"{name}/{i}/{out}") for i in range(len(copies)))
            params: dict[str, Any] = {"axis": 0} if how == "concat" else {}
            kind = COMBINE_KIND.get(how, "mean_n") if isinstance(how, str) else "mean_n"
            if kind == "mean_n":
                by = how.get("weighted_by") if isinstance(how, dict) else None
                if by is not None and str(by) not in numbers:
                    ex.diagnostics.append(ex.doc.diagnostic(
                        "combine-weights", (*where, "weighted_by"), f"combine '{out}' of sweep '{name}' is weighed by "
                        f"'{by}', which is not a number every copy is given",
                        f"numbers of the copies: {', '.join(numbers) or 'none'}"))
                    continue
                params = {"weights": [c[str(by)] for c in copies] if by is not None else [1] * len(copies)}
            ex.ops.append(Op(f"{name}.{out}", kind, refs, params, where, device_chain=chain, group=name,
                             scope=gathering(ex, name)))

    @staticmethod
    def table(ex: Expander, spec: Mapping[str, Any], spath: YamlPath, name: str, local: set[str], n: int,
              chain: Chain) -> Table | None:
        table = spec.get("table")
        if table is None:
            return None
        metrics = [str(m) for m in table["metrics"]]
        known = [ex.body_defines(local, m, (*spath, "table", "metrics", i), "table", name) for i, m in enumerate(metrics)]
        if all(known):  # every copy's metrics, copy by copy: the run reads them as rows
            refs = tuple(OpRef(f"{name}/{i}/{m}") for i in range(n) for m in metrics)
            ex.ops.append(Op(f"{name}.table", "stack", refs, {"axis": 0}, (*spath, "table", "metrics"),
                             device_chain=chain, group=name, scope=gathering(ex, name)))
        return Table(str(table["path"]), tuple(metrics), (*spath, "table"))

    def local_names(self, ex: Expander, item: Mapping[str, Any]) -> set[str]:
        spec = item.get("sweep") or {}
        body = spec.get("body") or []
        name = item.get("name")
        made = {f"{name}.{n}" for n in ex.local_names(body) | set(_params_written(spec))}
        made |= {f"{name}.{n}" for n in (spec.get("gather") or {})} | {f"{name}.{n}" for n in (spec.get("combine") or {})}
        return {f"{name}.best"} | made

    def body(self, item: Mapping[str, Any]) -> tuple[Sequence[Any], tuple[str, ...]]:
        return item["sweep"]["body"], ("sweep", "body")

    def size(self, item: Mapping[str, Any], items: Callable[[Sequence[Any]], int],
             devices: Callable[[Any], int]) -> int:
        spec = item["sweep"]
        copies = space_size(spec)
        extra = len(spec.get("gather") or {}) + len(spec.get("combine") or {})
        return copies * (items(spec["body"]) + len(_params_written(spec))) + 1 + len(spec["body"]) + extra


def last_ops(ops: Sequence[Op], loops: Sequence[Loop]) -> tuple[str, ...]:
    """The ops of one copy (``ops``, its loops ``loops``) that no other op of the copy reads, outside the loops'
    steps (a loop's failure reaches its results, ``LOOP.state`` and ``LOOP.metric``, which the driver makes)."""
    stepped = {name for loop in loops for name in (*loop.body, *loop.evaluated)}
    read = {ref.op for op in ops for ref in op.inputs} | {name for op in ops for name in op.after}
    return tuple(op.name for op in ops if op.name not in stepped and op.name not in read)


def top_loops(loops: Sequence[Loop]) -> tuple[str, ...]:
    """The loops of one copy that no other of them holds (a loop's body names start with its name and '/')."""
    return tuple(lp.name for lp in loops if not any(lp.name.startswith(o.name + "/") for o in loops if o is not lp))


def _params_written(spec: Mapping[str, Any]) -> list[str]:
    """The parameters of a space as written (which of them are numbers is known only once it is read)."""
    if "grid" in spec:
        return [str(k) for k in spec["grid"]]
    if "random" in spec:
        return [str(k) for k in (spec["random"].get("params") or {})]
    if "copies" in spec:
        return [str(k) for k in (spec["copies"][0] if spec["copies"] else {})]
    return [str(spec.get("param"))]


def space_size(spec: Mapping[str, Any]) -> int:
    """How many copies a space makes, before reading it (a glob axis counts as the files it may match: 1)."""
    if "grid" in spec:
        size = 1
        for axis in spec["grid"].values():
            size *= len(axis) if isinstance(axis, list) else 1
        return size
    if "random" in spec:
        return int(spec["random"].get("samples", 0))
    if "copies" in spec:
        return len(spec["copies"])
    return len(spec.get("values") or [])


SWEEP = Sweep()
