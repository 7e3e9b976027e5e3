"""Staged execution for specs with ``iterate`` loops.

Policy. A loop's body is planned once (one step's ops) and run ``steps``
times, so the whole unrolled graph is never built: the runner alternates
between *outer stages* — every op outside loops whose inputs are ready,
compiled and submitted as one graph — and *loops*, each run in windows of
``window`` steps. A window is one Dask graph of its steps' ops; step s reads
the carried state of step s−1 (inside the window, or from the previous
window by key). Random ops draw fresh numbers each step (their seed is
combined with the step number).

State. The driver holds futures for exactly what is still needed: outer
values read later, the carried state of the last finished window, and the
moves of outer values into the loop's devices (made once per device and
reused by every window). When a window is submitted the previous window's
futures are dropped, so Dask forgets its keys and client memory stays flat
however many steps run. Metric series (one scalar per step per metric) are
the only thing that grows, on the client.

After a loop, ``NAME.state`` is the final carried value (it stays where the
update op put it) and ``NAME.metric`` is the series, scattered to the device
its plan names.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..compile import GraphBuilder, Located, compile_plan
from ..errors import RunError
from ..model import Loop, OpRef

if TYPE_CHECKING:
    from .run import Runner


def _deps(runner: "Runner", name: str) -> set[str]:
    op = runner.spec.op(name)
    return {ref.op for ref in op.inputs} | set(op.after)


def run_staged(runner: "Runner", client: Any) -> dict[str, Any]:
    spec, plan = runner.spec, runner.plan
    loops = spec.loops
    for loop in loops:
        outer = next((other for other in loops if loop is not other and loop.name.startswith(other.name + "/")), None)
        if outer is not None:
            raise RunError(f"iterate '{loop.name}' is inside iterate '{outer.name}'; nested loops cannot run "
                           "(flatten them into one loop with more state)")
    body_of = {name: loop for loop in loops for name in loop.body}
    exports = {op.name for loop in loops for op in spec.ops if op.name.startswith(loop.name + ".")}
    order = [p.op for p in plan.placements]
    outer_ops = [name for name in order if name not in body_of and name not in exports]
    readers: dict[str, set[str]] = {}
    for name in order:
        for dep in _deps(runner, name):
            readers.setdefault(dep, set()).add(name)
    output_refs = {str(o.ref): o.ref for o in spec.outputs}

    known: dict[str, Located] = {}
    held: dict[str, Any] = {}  # key -> future: what must stay alive on the cluster
    client_values: dict[str, Any] = {}
    sinks: list[Any] = []
    done: set[str] = set()
    pending = list(loops)
    while True:
        ready: list[str] = []
        for name in outer_ops:
            if name not in done and all(d in done or d in ready for d in _deps(runner, name)):
                ready.append(name)
        if ready:
            compiled = compile_plan(plan, runner.token, runner.base_dir, only=ready, known=known, outputs=[],
                                    out_dir=runner.output_dir, task_names=runner.task_names)
            chosen = set(ready)
            needed = [compiled.values[n].key for n in ready
                      if readers.get(n, set()) - chosen or any(r.op == n for r in output_refs.values())]
            futures = runner.submit(client, compiled, needed)
            sinks += [futures[k] for k in compiled.sink_keys]
            known.update(compiled.values)
            held.update({k: futures[k] for k in needed})
            done |= chosen
        if not pending:
            break
        loop = next((lp for lp in pending if all(
            d in done or d in lp.body for name in lp.body for d in _deps(runner, name))), None)
        if loop is None:
            if ready:
                continue
            raise RunError("cannot order the loops of this spec: a loop reads a value made after it")
        pending.remove(loop)
        _run_loop(runner, client, loop, known, held, client_values, sinks)
        done |= set(loop.body) | {n for n in exports if n.startswith(loop.name + ".")}

    return _outputs(runner, client, known, held, client_values, sinks)


def _run_loop(runner: "Runner", client: Any, loop: Loop, known: dict[str, Located], held: dict[str, Any],
              client_values: dict[str, Any], sinks: list[Any]) -> None:
    spec, plan = runner.spec, runner.plan
    body = set(loop.body)
    order = [p.op for p in plan.placements if p.op in body]
    state_of = {var.placeholder: var for var in loop.state}
    read_in_body = {ref.op for name in order for ref in spec.op(name).inputs} | \
        {a for name in order for a in spec.op(name).after}
    ends = {var.update.op for var in loop.state} | {ref.op for _, ref in loop.metrics}
    body_sinks = [n for n in order if n not in read_in_body and n not in ends and n not in state_of]
    outer_keys = {located.key for located in known.values()}

    carried: dict[str, Located] = {var.name: _lookup(known, var.init) for var in loop.state}
    carried_futures: dict[str, Any] = {}
    in_flight: tuple[dict[str, Any], list[list[str]], list[str], int] | None = None
    outer_moves: dict[tuple[str, str], str] = {}
    series: dict[str, list[Any]] = {name: [] for name, _ in loop.metrics}
    index = runner.spec.loops.index(loop)
    for start in range(0, loop.steps, loop.window):
        builder = GraphBuilder(plan, runner.token, runner.base_dir, suffix=f"-{runner.token}-L{index}w{start}",
                               known_moves=outer_moves, shared_keys=outer_keys, out_dir=runner.output_dir,
                               task_names=runner.task_names)
        metric_keys: list[list[str]] = []
        sink_keys: list[str] = []
        for step in range(start, min(loop.steps, start + loop.window)):
            suffix = f"-{runner.token}-{step}"
            values: dict[str, Located] = {}

            def resolve(ref: OpRef, values: dict[str, Located] = values) -> Located:
                if ref.op in body:
                    return builder.item(values[ref.op], ref)
                return _lookup(known, ref, builder)

            for name in order:
                var = state_of.get(name)
                if var is not None:
                    # the carried value is read where it lives; readers elsewhere get it moved
                    values[name] = carried[var.name]
                    continue
                values[name] = builder.add_op(name, resolve, step=step, suffix=suffix)
            carried = {var.name: resolve(var.update) for var in loop.state}
            metric_keys.append([builder.materialize(resolve(ref), ref).key for _, ref in loop.metrics])
            sink_keys += [values[n].key for n in body_sinks]
        compiled = builder.build({}, {})
        persistent = {pair: key for pair, key in compiled.moves.items() if pair[0] in outer_keys}
        wanted = [c.key for c in carried.values()] + [k for keys in metric_keys for k in keys] + \
            sink_keys + list(persistent.values())
        futures = runner.submit(client, compiled, wanted)
        outer_moves.update(persistent)
        held.update({key: futures[key] for key in persistent.values()})
        # Two windows in flight: this one is queued while the previous one's metrics are read,
        # so the cluster never idles at a window boundary; then the previous one is dropped.
        if in_flight is not None:
            _collect(runner, client, loop, series, *in_flight)
        in_flight = (futures, metric_keys, sink_keys, min(loop.steps, start + loop.window))
        carried_futures = {c.key: futures[c.key] for c in carried.values()}
    if in_flight is not None:
        _collect(runner, client, loop, series, *in_flight)
        in_flight = None
    held.update(carried_futures)

    for var in loop.state:
        runner.not_run[var.placeholder] = f"state of loop '{loop.name}': the carried value, read where it lives"
        known[f"{loop.name}.{var.name}"] = carried[var.name]
        runner.not_run[f"{loop.name}.{var.name}"] = f"final state of loop '{loop.name}'"
    for name, _ in loop.metrics:
        export = f"{loop.name}.{name}"
        values_array = np.stack(series[name]) if series[name] else np.zeros((0,))
        client_values[export] = values_array
        device = plan.placement(export).device
        workers = [device.to_string()] if device.device_index != "*" else None
        future = client.scatter(values_array, workers=workers, broadcast=False)
        held[future.key] = future
        known[export] = Located(future.key, device)
        runner.not_run[export] = f"metric series of loop '{loop.name}', gathered by the client"


def _collect(runner: "Runner", client: Any, loop: Loop, series: dict[str, list[Any]], futures: dict[str, Any],
             metric_keys: list[list[str]], sink_keys: list[str], last_step: int) -> None:
    """Wait for one window: read its metrics (one scalar per step) and surface any error."""
    flat = runner.gather_outputs(client, {k: k for keys in metric_keys for k in keys}, futures, sink_keys)
    if not loop.metrics:  # nothing to read: wait for the window's carried state instead
        runner.gather_outputs(client, {}, futures, list(futures))
    for keys in metric_keys:
        for (name, _), key in zip(loop.metrics, keys):
            series[name].append(np.asarray(flat[key]))
    if runner.settings.on_loop_progress is not None:
        runner.settings.on_loop_progress(loop.name, last_step, loop.steps)


def _lookup(known: dict[str, Located], ref: OpRef, builder: GraphBuilder | None = None) -> Located:
    text = str(ref)
    if text in known:
        return known[text]
    if builder is None or ref.op not in known:
        raise RunError(f"value '{text}' is not available to the loop")
    return builder.item(known[ref.op], ref)


def _outputs(runner: "Runner", client: Any, known: dict[str, Located], held: dict[str, Any],
             client_values: dict[str, Any], sinks: list[Any]) -> dict[str, Any]:
    spec = runner.spec
    wanted: dict[str, str] = {}
    from_cluster: dict[str, Located] = {}
    for out in spec.outputs:
        text = str(out.ref)
        if text in client_values:
            continue
        from_cluster[text] = _lookup(known, out.ref)
    if from_cluster and (runner.backend == "cupy" or any(v.index is not None for v in from_cluster.values())):
        # a last small graph: outputs of tuples cut out, device arrays copied to the host
        builder = GraphBuilder(runner.plan, runner.token, runner.base_dir, suffix=f"-{runner.token}-out",
                               task_names=runner.task_names)
        for text, located in from_cluster.items():
            ref = OpRef.parse(text)
            wanted[text] = builder.to_host(located, ref) if runner.backend == "cupy" \
                else builder.materialize(located, ref).key
        compiled = builder.build({}, wanted)
        futures = {**held, **runner.submit(client, compiled, list(wanted.values()))}
    else:
        wanted = {text: located.key for text, located in from_cluster.items()}
        futures = held
    missing = [k for k in wanted.values() if k not in futures]
    if missing:
        raise RunError(f"internal: outputs {missing} were not kept on the cluster")
    values = runner.gather_outputs(client, wanted, futures, [])
    from distributed import wait

    wait(sinks)
    for future in sinks:
        if future.status == "error":
            try:
                future.result()
            except Exception as exc:
                raise runner.translate(exc) from None
    values.update({k: v for k, v in client_values.items() if k in {str(o.ref) for o in spec.outputs}})
    return values
