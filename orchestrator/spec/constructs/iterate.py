"""``iterate``: a body run for ``steps`` with carried state (the seeds' training loop).

An iterate named ``train`` plans one step: ``train/<op>`` for the body,
``train/<state>`` for each carried state (it lives on its initial value's
device), ``train.<state>`` for the final state and ``train.<metric>`` for a
metric's series over the steps. It also makes a :class:`~orchestrator.spec.records.Loop`
record, which the executor runs window by window.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence
from dataclasses import replace

from ...errors import YamlPath
from ..records import Loop, Op, OpRef, StateVar
from .base import Chain, Expander, Resolver
from .training import checkpoint_of, expand_batches, expand_evaluation, stopping_of


MAX_STEPS = 10_000_000
"""Bound on a loop's steps. A loop's metrics keep one value per step on the client, and every step is
at least one round of work on the cluster: ``steps: 1e12`` is a slip, not a plan (it would run for years)."""


class Iterate:
    key: str = "iterate"
    name_fields: tuple[str, ...] = ("state", "update", "metrics")
    body_fields: tuple[str, ...] = ("update", "metrics")
    internal_ops: Mapping[str, str] = {"state": "carried values are declared under iterate: state: {w: w0}",
                    "series": "iterate's metrics: {loss: loss} makes it",
                    "minibatch": "iterate's batches: {data: {x: X}, size: 32} makes it",
                    "evaluations": "iterate's evaluate: {every: 50, body: [...], metrics: {...}} makes it"}
    reference_roles: Mapping[str, str] = {"state": "the initial value '{ref}' of state '{var}' in '{group}'",
                       "update": "the update '{ref}' of state '{var}' in '{group}'",
                       "metrics": "the metric '{ref}' of '{group}'"}

    def expand(self, ex: Expander, item: Mapping[str, Any], path: YamlPath, prefix: str, chain: Chain,
               resolve: Resolver, group: str | None) -> None:
        name, spec = prefix + str(item["name"]), item["iterate"]
        ipath = (*path, "iterate")
        body, state, update = spec["body"], dict(spec["state"]), dict(spec["update"])
        if "steps" not in spec and "epochs" not in (spec.get("batches") or {}):
            ex.diagnostics.append(ex.doc.diagnostic(
                "loop-steps", ipath, f"iterate '{name}' says neither how many steps it runs nor how many epochs",
                "give steps: N, or batches: {..., epochs: E}"))
            return
        steps = int(spec.get("steps", 0))  # 0: epochs x batches per epoch, settled once the data's rows are known
        if steps > MAX_STEPS:
            ex.diagnostics.append(ex.doc.diagnostic(
                "loop-steps", (*ipath, "steps"), f"steps: {steps:,} is more than the "
                f"{MAX_STEPS:,} a loop may run", "split the work into several runs or loops; a loop keeps one value "
                "of each metric per step on the client"))
            return
        step_prefix = f"{name}/"
        first, made = len(ex.ops), len(ex.loops)
        own = ex.scope  # where the loop itself stands
        state_scope, export_scope = replace(own, loop=name, role="state"), replace(own, loop=name, role="export")
        subs: dict[str, OpRef] = {}
        for var, init in state.items():
            init_ref = resolve(str(init))
            placeholder = step_prefix + var
            ex.ops.append(Op(placeholder, "state", (init_ref,), {}, (*ipath, "state", var),
                             device_chain=chain, colocate_with=init_ref, group=name, scope=state_scope))
            subs[var] = OpRef(placeholder)
        local = ex.local_names(body) | {str(k) for k in (spec.get("batches") or {}).get("data", {})}
        inner = ex.scoped(step_prefix, local, subs, resolve)
        with ex.within(loop=name, role="step"):
            batches = expand_batches(ex, spec, ipath, step_prefix, chain, resolve, name)
            ex.items(body, (*ipath, "body"), step_prefix, chain, inner, name)
        state_vars = []
        for var, init in state.items():
            target = update.get(var)
            update_ref = inner(str(target)) if target is not None else subs[var]
            state_vars.append(StateVar(var, resolve(str(init)), subs[var].op, update_ref))
            where = (*ipath, "update", var) if target is not None else (*ipath, "state", var)
            ex.ops.append(Op(f"{name}.{var}", "identity", (update_ref,), {}, where,
                             colocate_with=update_ref, group=name, scope=export_scope))
        for var in update:
            if var not in state:
                ex.diagnostics.append(ex.doc.diagnostic(
                    "unknown-state", (*ipath, "update", var), f"update names '{var}', which is not a state variable",
                    f"state variables: {', '.join(state)}", key=True))
        metrics = []
        for metric, target in (spec.get("metrics") or {}).items():
            ref = inner(str(target))
            metrics.append((metric, ref))
            ex.ops.append(Op(f"{name}.{metric}", "series", (ref,), {"steps": steps},
                             (*ipath, "metrics", metric), colocate_with=ref, group=name, scope=export_scope))
        body_names = tuple(op.name for op in ex.ops[first:] if op.name.startswith(step_prefix))
        evaluation = expand_evaluation(ex, spec, ipath, name, chain, subs, resolve, steps)
        children = tuple(lp.name for lp in ex.loops[made:] if lp.parent == name)
        ex.loops.append(Loop(name, steps, int(spec.get("window", 50)), tuple(state_vars), body_names, tuple(metrics),
                             ipath, checkpoint_of(spec), evaluation, stopping_of(spec), batches, parent=own.loop,
                             children=children, scope=own))

    def local_names(self, ex: Expander, item: Mapping[str, Any]) -> set[str]:
        body = item.get("iterate") or {}
        evaluated = list((body.get("evaluate") or {}).get("metrics") or {})
        return {f"{item.get('name')}.{k}" for k in [*(body.get("state") or {}), *(body.get("metrics") or {}),
                                                    *evaluated]}

    def body(self, item: Mapping[str, Any]) -> tuple[Sequence[Any], tuple[str, ...]]:
        return item["iterate"]["body"], ("iterate", "body")

    def size(self, item: Mapping[str, Any], items: Callable[[Sequence[Any]], int],
             devices: Callable[[Any], int]) -> int:
        spec = item["iterate"]
        evaluation = spec.get("evaluate") or {}
        return items(spec["body"]) + 2 * len(spec["state"]) + len(spec.get("metrics") or {}) + \
            (items(evaluation["body"]) + len(evaluation.get("metrics") or {}) if evaluation else 0) + \
            len((spec.get("batches") or {}).get("data") or {})


ITERATE = Iterate()
