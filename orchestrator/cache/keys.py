"""Cache keys: what made a value (an op's, a whole loop's), hashed; and a loop's revision, for its checkpoints.

Policy. A value's key is a hash of everything that decides it: the op's kind
and parameters, the source of its ``fn`` module (``call``), the file it reads
(``load``: its size and modification time, or its bytes with
``files="hash"``), its copy's random stream and loop step, and the keys of its
inputs — so a change anywhere upstream changes every key downstream, and a
value computed on GPU:0 serves GPU:1. A loop is one unit: its key covers its
body, its steps (and those of the loops inside it), its states, evaluation,
stopping rules and what it reads. What cannot be keyed is not cached, and
says why: a random op without a ``seed``, a ``call`` whose module file cannot
be found without importing it.

A loop's *revision* is its key without its step count: everything that
decides the state at step s, which the number of steps a run goes on to does
not (the minibatch order is a function of the seed and the step's epoch; the
counts that validation writes into the minibatch and weighting ops only wrap
steps past the last). Its checkpoints are kept by revision, so a run with
more steps (or epochs) continues from the checkpoints of a shorter one. A
parameter of the user's own ops that follows the steps (a schedule over
``${params.steps}``) stays in the revision, as it changes the math.

State: none; keys are computed on the client from the plan and files alone:
no user code is imported, nothing runs on the cluster.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..plan.records import Plan
from ..spec.records import Loop, Op
from ..ops import lookup

# Keys that say where or how an op runs, not what it computes: never part of a key.
_NOT_CONTENT = frozenset({"device", "retries", "timeout", "tags", "description", "after", "cache", "kernels"})


@dataclass(frozen=True)
class Key:
    """An op's (or a loop's) cache key and the parts it was made of (to say what changed)."""

    key: str
    parts: Mapping[str, str]


@dataclass(frozen=True)
class Keys:
    """The keys of a plan: per op and per loop; what could not be keyed, and why."""

    ops: Mapping[str, Key]
    loops: Mapping[str, Key]
    unkeyed: Mapping[str, str] = field(default_factory=dict)  # op or loop -> why it cannot be cached
    revisions: Mapping[str, Key] = field(default_factory=dict)  # loop -> its key without its steps (checkpoints)


def _hash(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=repr).encode()).hexdigest()


def _file_digest(path: str, files: str) -> str | None:
    try:
        if files == "hash":
            digest = hashlib.sha256()
            with open(path, "rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(block)
            return "sha256:" + digest.hexdigest()
        stat = os.stat(path)
        return f"stat:{stat.st_size}:{stat.st_mtime_ns}"
    except OSError:
        return None


def module_file(module: str, base_dir: str) -> str | None:
    """Where ``package.module`` lives, found like an import would but without importing anything."""
    relative = module.replace(".", os.sep)
    for directory in [base_dir, *sys.path]:
        for candidate in (os.path.join(directory, relative + ".py"),
                          os.path.join(directory, relative, "__init__.py")):
            if os.path.isfile(candidate):
                return candidate
    return None


def compute_keys(plan: Plan, base_dir: str, files: str = "stat") -> Keys:
    """Keys of every op outside loops and of every loop, in the plan's order (inputs before readers)."""
    spec = plan.spec
    outermost = [lp for lp in spec.loops if lp.parent is None]
    loop_of = {name: loop for loop in outermost for name in loop.body + _evaluated(loop)}
    export_of = {name: loop for loop in outermost for name in loop.exports}
    ops: dict[str, Key] = {}
    loops: dict[str, Key] = {}
    revisions: dict[str, Key] = {}
    unkeyed: dict[str, str] = {}
    for p in plan.placements:  # topological: a loop's outer inputs come before its body, its exports after
        loop = loop_of.get(p.op) or export_of.get(p.op)
        if loop is not None:
            if loop.name not in loops and loop.name not in unkeyed:
                keyed = _loop_key(plan, loop, ops, base_dir, files, unkeyed)
                if keyed is not None:
                    loops[loop.name], revisions[loop.name] = keyed
            if p.op in export_of and loop.name in loops:
                ops[p.op] = Key(_hash([loops[loop.name].key, p.op]), {"loop": loops[loop.name].key})
            elif p.op in export_of:
                unkeyed[p.op] = f"loop '{loop.name}' cannot be cached: {unkeyed[loop.name]}"
            continue
        key = _op_key(plan, p.op, ops, base_dir, files, unkeyed, step=None)
        if key is not None:
            ops[p.op] = key
    return Keys(ops, loops, unkeyed, revisions)


def _op_key(plan: Plan, name: str, known: Mapping[str, Key], base_dir: str, files: str,
            unkeyed: dict[str, str], step: int | None) -> Key | None:
    spec = plan.spec
    op = spec.op(name)
    if op.scope.part == "gathering":
        # what a sweep makes of all its copies: cheap, and a copy may have failed (its entry then never is)
        unkeyed[name] = f"sweep '{op.scope.sweep}' gathers it from its copies' values (each copy's are cached)"
        return None
    inputs: list[str] = []
    for ref in op.inputs:
        source = known.get(ref.op)
        if source is None:
            unkeyed[name] = f"its input '{ref}' cannot be cached" if ref.op not in unkeyed else unkeyed[ref.op]
            return None
        inputs.append(_hash([source.key, ref.output]))
    params = {k: v for k, v in op.params.items() if k not in _NOT_CONTENT}
    parts: dict[str, str] = {"kind": op.kind, "outputs": str(op.outputs)}
    parts.update({f"param:{k}": _hash(v) for k, v in params.items()})
    parts.update({f"input:{ref}": source for ref, source in zip(op.inputs, inputs)})
    module, digest = _user_code(op, base_dir)
    if module:
        if digest is None:
            unkeyed[name] = f"the source of module '{module}' was not found without importing it"
            return None
        parts["fn"] = digest
    for param in _reads(op):
        if param in op.params:
            digest = _file_digest(os.path.join(base_dir, str(op.params[param])), files)
            if digest is None:
                unkeyed[name] = f"the file '{op.params[param]}' cannot be read"
                return None
            parts[f"file:{param}"] = digest
    if op.kind.startswith("random."):
        if "seed" not in op.params:
            unkeyed[name] = "a random op is cached only with a fixed seed"
            return None
        parts["stream"] = _hash(list(op.scope.indices))  # the copy of each construct around it
        if step is not None:
            parts["step"] = str(step)
    return Key(_hash(parts), parts)


def _loop_key(plan: Plan, loop: Loop, known: Mapping[str, Key], base_dir: str, files: str,
              unkeyed: dict[str, str]) -> tuple[Key, Key] | None:
    """A loop as one unit: its body (as written, names relative to it), steps, states and outer inputs; and
    its revision (the same without its steps)."""
    spec = plan.spec
    if loop.rungs:  # where it stops depends on the other copies at each rung, which its key cannot say
        unkeyed[loop.name] = "a halving (or median) sweep decides its copies' loops together, at its decision steps"
        return None
    parts: dict[str, str] = {"steps": str(loop.steps)}
    if loop.evaluation is not None:  # what it evaluates decides when a loop stops, and its tables
        parts["evaluate"] = _hash([loop.evaluation.every, [[n, str(r)] for n, r in loop.evaluation.metrics]])
    if loop.stopping:
        parts["stopping"] = _hash([repr(rule) for rule in loop.stopping])
    for var in loop.state:
        source = known.get(var.init.op)
        if source is None:
            unkeyed[loop.name] = f"the initial value '{var.init}' of state '{var.name}' cannot be cached"
            return None
        parts[f"state:{var.name}"] = _hash([source.key, var.init.output, str(var.update)])
    parts["metrics"] = _hash([[n, str(r)] for n, r in loop.metrics])
    body = set(loop.body + _evaluated(loop))  # with any loop inside it: the outermost loop is the unit
    for inner in spec.loops:  # how often an inner loop runs its body is written in no op of it
        if inner is not loop and inner.body and set(inner.body) <= body:
            parts[f"loop:{inner.name[len(loop.name) + 1:]}"] = str(inner.steps)
    revision = dict(parts)
    for name in loop.body + _evaluated(loop):
        rows = _body_rows(plan, loop, name, body, known, base_dir, files, unkeyed)
        if rows is None:
            return None
        local = name[len(loop.name) + 1:]
        parts[f"op:{local}"], revision[f"op:{local}"] = _hash(rows[0]), _hash(rows[1])
    del revision["steps"]
    return Key(_hash(parts), parts), Key(_hash(revision), revision)


def _body_rows(plan: Plan, loop: Loop, name: str, body: set[str], known: Mapping[str, Key], base_dir: str,
               files: str, unkeyed: dict[str, str]) -> tuple[list[Any], list[Any]] | None:
    """What a body op is, for the loop's key and for its revision (which leaves out the loop's step count
    that validation writes into minibatches and their weights); None when it cannot be keyed (said why)."""
    op = plan.spec.op(name)
    params = {k: v for k, v in op.params.items() if k not in _NOT_CONTENT}
    row: list[Any] = [op.kind, params, op.outputs]
    for ref in op.inputs:
        if ref.op in body:
            row.append(["local", ref.op[len(loop.name) + 1:], ref.output])
        elif ref.op in known:
            row.append(["outer", known[ref.op].key, ref.output])
        else:
            unkeyed[loop.name] = f"op '{name}' reads '{ref}', which cannot be cached"
            return None
    module, digest = _user_code(op, base_dir)
    if module:
        if digest is None:
            unkeyed[loop.name] = f"the source of module '{module}' (op '{name}') was not found without importing it"
            return None
        row.append(digest)
    for param in _reads(op):
        digest = _file_digest(os.path.join(base_dir, str(op.params.get(param, ""))), files)
        if digest is None:
            unkeyed[loop.name] = f"op '{name}' reads a file that cannot be read"
            return None
        row.append(digest)
    if op.kind.startswith("random.") and "seed" not in op.params:
        unkeyed[loop.name] = f"op '{name}' is a random op without a fixed seed"
        return None
    return row, [op.kind, _steps_free(op.kind, params), *row[2:]]


def _steps_free(kind: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """``params`` without the step counts validation wrote (``validate.training``, ``validate.combine``): they
    only wrap a step past the last one, so the state at a step does not depend on them."""
    free = dict(params)
    if kind == "minibatch":
        free.pop("steps", None)
    batches = free.get("batches")
    if kind == "mean_n" and isinstance(batches, Mapping):
        free["batches"] = {k: v for k, v in batches.items() if k != "steps"}
    return free


def _evaluated(loop: Loop) -> tuple[str, ...]:
    return loop.evaluation.body if loop.evaluation is not None else ()


def _reads(op: Op) -> tuple[str, ...]:
    """The parameters of ``op`` that name files it reads."""
    definition = lookup(op.kind)
    return definition.reads if definition is not None else ()


def _user_code(op: Op, base_dir: str) -> tuple[str, str | None]:
    """For an op running user code: its module and the hash of the module's source (None: not found
    without importing it); ``("", None)`` for any other op."""
    definition = lookup(op.kind)
    if definition is None or not definition.user_code:
        return "", None
    module = str(op.params.get("fn", "")).partition(":")[0]
    path = module_file(module, base_dir)
    return module, _file_digest(path, "hash") if path else None


def why_again(previous: Mapping[str, str] | None, current: Mapping[str, str], had_entry: bool) -> str:
    """Why a value is computed again: what changed since the last key recorded for it, or no entry."""
    if previous is None:
        return "no entry (never computed with the cache on)"
    changed = [name for name in sorted(set(previous) | set(current)) if previous.get(name) != current.get(name)]
    if not changed:
        return "no entry (it was cleared, or never finished)" if not had_entry else "its entry could not be used"
    words = []
    for name in changed:
        kind, _, what = name.partition(":")
        words.append({"param": f"parameter '{what}' changed", "input": f"input '{what}' changed",
                      "file": f"file of '{what}' changed", "fn": "fn source changed", "op": f"body op '{what}' changed",
                      "state": f"state '{what}' changed", "steps": "steps changed", "kind": "op type changed",
                      "stream": "random stream changed", "step": "loop step changed",
                      "outputs": "outputs changed", "metrics": "metrics changed",
                      "loop": f"steps of inner loop '{what}' changed"}.get(kind, f"{name} changed"))
    return "; ".join(words)


