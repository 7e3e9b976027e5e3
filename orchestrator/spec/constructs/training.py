"""The parts of ``iterate`` that make a training loop: checkpoints, evaluation, stopping, minibatches.

Each reads its block of the ``iterate`` mapping into a record the loop
carries (``spec.records``). Evaluation bodies are expanded like any body,
under ``LOOP/eval/``, reading the loop's states through the state
placeholders (the driver gives them the states of the step evaluated) and
anything outside the loop; minibatches are body ops of kind ``minibatch``,
one per data name, under ``LOOP/<name>``, so the body reads them as its own
values. Checks that need shapes (rows, batch sizes) come later, in
``validate.training``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping

from ...errors import YamlPath
from ..records import Batches, Checkpoint, Evaluation, Op, OpRef, Stopping
from .base import Chain, Expander, Resolver


def checkpoint_of(spec: Mapping[str, Any]) -> Checkpoint | None:
    block = spec.get("checkpoint")
    if block is None:
        return None
    path, early = block.get("path"), spec.get("early_stop") or {}
    monitor = block.get("monitor", early.get("metric") if block.get("best_only") else None)
    mode = block.get("mode", early.get("mode", "min") if monitor is not None and monitor == early.get("metric")
                     else "min")
    every, epochs = every_of(block)
    return Checkpoint(every, int(block.get("keep", 2)), None if path is None else str(path),
                      bool(block.get("best_only", False)), None if monitor is None else str(monitor), str(mode),
                      epochs)


def every_of(block: Mapping[str, Any]) -> tuple[int, int | None]:
    """(steps, epochs) of ``every: N`` or ``every: {epochs: N}`` (steps 0 until an epoch's steps are known)."""
    every = block["every"]
    return (0, int(every["epochs"])) if isinstance(every, dict) else (int(every), None)


def stopping_of(spec: Mapping[str, Any]) -> tuple[Stopping, ...]:
    rules = []
    early = spec.get("early_stop")
    if early is not None:
        baseline = early.get("baseline")
        rules.append(Stopping(str(early["metric"]), str(early.get("mode", "min")), int(early.get("patience", 0)),
                              float(early.get("min_delta", 0.0)), None if baseline is None else float(baseline),
                              int(early.get("start_from", 0)), bool(early.get("restore_best", False))))
    when = spec.get("stop_when")
    if when is not None:
        below, above = when.get("below"), when.get("above")
        rules.append(Stopping(str(when["metric"]), below=None if below is None else float(below),
                              above=None if above is None else float(above)))
    return tuple(rules)


def expand_batches(ex: Expander, spec: Mapping[str, Any], ipath: YamlPath, step_prefix: str, chain: Chain,
                   resolve: Resolver, group: str) -> Batches | None:
    """One ``minibatch`` body op per data name: this step's rows of the outer value."""
    block = spec.get("batches")
    if block is None:
        return None
    shuffle = block.get("shuffle", True)
    params: dict[str, Any] = {"size": int(block["size"]), "shuffle": shuffle if shuffle == "once" else bool(shuffle),
                              "seed": int(block.get("seed", 0)), "drop_last": block.get("last", "keep") == "drop"}
    if block.get("across_epochs"):  # the stream of epochs is cut whole: its end is where the epochs end
        params.update(across_epochs=True, epochs=None if block.get("epochs") is None else int(block["epochs"]))
    data = []
    for local, source in dict(block["data"]).items():
        ref = resolve(str(source))
        name = step_prefix + str(local)
        ex.ops.append(Op(name, "minibatch", (ref,), dict(params), (*ipath, "batches", "data", local),
                         device_chain=chain, group=group, scope=ex.scope))
        data.append((name, ref))
    epochs = block.get("epochs")
    return Batches(tuple(data), params["size"], None if epochs is None else int(epochs), params["shuffle"],
                   params["seed"], params["drop_last"], bool(block.get("across_epochs", False)))


def expand_evaluation(ex: Expander, spec: Mapping[str, Any], ipath: YamlPath, name: str, chain: Chain,
                      subs: Mapping[str, OpRef], resolve: Resolver, steps: int) -> Evaluation | None:
    """The evaluation body under ``LOOP/eval/``: it reads the states (``subs``) and outer values only."""
    block = spec.get("evaluate")
    if block is None:
        return None
    prefix = f"{name}/eval/"
    first = len(ex.ops)
    body = block["body"]
    inner = ex.scoped(prefix, ex.local_names(body), subs, resolve)
    with ex.within(loop=name, role="evaluation"):
        ex.items(body, (*ipath, "evaluate", "body"), prefix, chain, inner, f"{name}/eval")
    export = replace(ex.scope, loop=name, role="export")
    metrics = tuple((str(metric), inner(str(target))) for metric, target in dict(block["metrics"]).items())
    every, epochs = every_of(block)
    for metric, ref in metrics:
        ex.ops.append(Op(f"{name}.{metric}", "evaluations", (ref,), {"every": every, "steps": steps},
                         (*ipath, "evaluate", "metrics", metric), colocate_with=ref, group=name, scope=export))
    names = tuple(op.name for op in ex.ops[first:] if op.name.startswith(prefix))
    return Evaluation(every, names, metrics, epochs)
