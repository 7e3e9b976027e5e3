"""The cache: values of ops, and of whole loops, kept on disk, keyed by what made them — never by where.

Policy. A value's key is a hash of everything that decides it: the op's kind
and parameters, the source of its ``fn`` module (``call``), the file it reads
(``load``: its size and modification time, or its bytes with
``files="hash"``), its copy's random stream and loop step, and the keys of its
inputs — so a change anywhere upstream changes every key downstream, and a
value computed on GPU:0 serves GPU:1. A loop is one unit: its key covers its
body, its steps and what it reads; its entry holds its final states and its
metric series. What cannot be keyed is not cached, and says why: a random op
without a ``seed``, a ``call`` whose module file cannot be found without
importing it.

Entries. One file per key under ``entries/``: a NumPy ``.npz`` (no pickle)
holding the values and a header (the key, what made it, a SHA-256 of the
values' bytes). Written atomically; read back only if the header's key is the
file's and the checksum holds — a corrupted or foreign entry is ignored with a
warning and never loaded. ``index/<spec>.json`` keeps, per op, the parts of
its last key, so that a value computed again can say why: which parameter,
input, ``fn`` source or file changed, or that there was no entry.

State. A :class:`Cache` is a directory; this module keeps nothing in memory
between calls. Keys are computed on the client from the plan and files alone:
no user code is imported, nothing runs on the cluster.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..atomic import write_bytes, write_text
from ..plan.records import Plan
from ..spec.records import Loop, Op, OpRef
from ..ops import lookup

FORMAT = 1


def default_directory(spec_dir: str) -> str:
    """A spec's cache directory when none is given: ``.orchestrate/cache`` beside it."""
    return os.path.join(spec_dir, ".orchestrate", "cache")


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
    outermost = [lp for lp in spec.loops if not any(lp.name.startswith(o.name + "/") for o in spec.loops)]
    loop_of = {name: loop for loop in outermost for name in loop.body + _evaluated(loop)}
    export_of = {o.name: loop for loop in outermost for o in spec.ops if o.name.startswith(loop.name + ".")}
    ops: dict[str, Key] = {}
    loops: dict[str, Key] = {}
    unkeyed: dict[str, str] = {}
    for p in plan.placements:  # topological: a loop's outer inputs come before its body, its exports after
        loop = loop_of.get(p.op) or export_of.get(p.op)
        if loop is not None:
            if loop.name not in loops and loop.name not in unkeyed:
                key = _loop_key(plan, loop, ops, base_dir, files, unkeyed)
                if key is not None:
                    loops[loop.name] = key
            if p.op in export_of and loop.name in loops:
                ops[p.op] = Key(_hash([loops[loop.name].key, p.op]), {"loop": loops[loop.name].key})
            elif p.op in export_of:
                unkeyed[p.op] = f"loop '{loop.name}' cannot be cached: {unkeyed[loop.name]}"
            continue
        key = _op_key(plan, p.op, ops, base_dir, files, unkeyed, step=None)
        if key is not None:
            ops[p.op] = key
    return Keys(ops, loops, unkeyed)


def _op_key(plan: Plan, name: str, known: Mapping[str, Key], base_dir: str, files: str,
            unkeyed: dict[str, str], step: int | None) -> Key | None:
    spec = plan.spec
    op = spec.op(name)
    if op.group is not None and name.startswith(op.group + ".") and any(s.name == op.group for s in spec.sweeps):
        # what a sweep makes of all its copies: cheap, and a copy may have failed (its entry then never is)
        unkeyed[name] = f"sweep '{op.group}' gathers it from its copies' values (each copy's are cached)"
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
        parts["stream"] = _hash([int(part) for part in name.split("/") if part.isdigit()])
        if step is not None:
            parts["step"] = str(step)
    return Key(_hash(parts), parts)


def _loop_key(plan: Plan, loop: Loop, known: Mapping[str, Key], base_dir: str, files: str,
              unkeyed: dict[str, str]) -> Key | None:
    """A loop as one unit: its body (as written, names relative to it), steps, states and outer inputs."""
    spec = plan.spec
    if loop.rungs:  # where it stops depends on the other copies at each rung, which its key cannot say
        unkeyed[loop.name] = "a halving sweep decides its copies' loops together, rung by rung"
        return None
    body = set(loop.body + _evaluated(loop))  # with any loop inside it: the outermost loop is the unit
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
    for name in loop.body + _evaluated(loop):
        op = spec.op(name)
        local = name[len(loop.name) + 1:]
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
        parts[f"op:{local}"] = _hash(row)
    return Key(_hash(parts), parts)


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
                      "outputs": "outputs changed", "metrics": "metrics changed"}.get(kind, f"{name} changed"))
    return "; ".join(words)


class Cache:
    """A cache directory: ``entries/<key>.npz`` and ``index/<spec name>.json``."""

    def __init__(self, directory: str):
        self.directory = directory
        self.warnings: list[str] = []

    def _entry(self, key: str) -> str:
        return os.path.join(self.directory, "entries", key[:2], f"{key}.npz")

    def has(self, key: str) -> bool:
        return os.path.isfile(self._entry(key))

    def load(self, key: str, what: str) -> tuple[np.ndarray, ...] | None:
        """The values stored under ``key``, or None (a missing, corrupted or foreign entry: warned, not loaded)."""
        path = self._entry(key)
        if not os.path.isfile(path):
            return None
        try:
            header, arrays, intact = read_checked(path)
            values = tuple(arrays[f"v{i}"] for i in range(int(header["values"])))
        except Exception as exc:  # any unreadable file: it is not loaded, whatever went wrong
            self.warnings.append(f"cache entry for {what} is unreadable and was ignored ({type(exc).__name__}: "
                                 f"{exc}): {path}")
            return None
        if header.get("format") != FORMAT or header.get("key") != key:
            self.warnings.append(f"cache entry for {what} belongs to another key or format and was ignored: {path}")
            return None
        if not intact:
            self.warnings.append(f"cache entry for {what} does not match its checksum (corrupted) and was "
                                 f"ignored: {path}")
            return None
        return values

    def store(self, key: str, what: str, values: Sequence[Any]) -> None:
        arrays = {f"v{i}": np.asarray(v) for i, v in enumerate(values)}
        write_checked(self._entry(key), {"format": FORMAT, "key": key, "what": what, "values": len(arrays),
                                         "created": time.time(),
                                         "bytes": int(sum(a.nbytes for a in arrays.values()))}, arrays)

    def previous(self, spec_name: str) -> dict[str, dict[str, str]]:
        """The parts of the last key recorded for each op of this spec (by name)."""
        try:
            with open(os.path.join(self.directory, "index", f"{spec_name}.json"), encoding="utf-8") as handle:
                data = json.load(handle)
            return {str(k): {str(a): str(b) for a, b in v.items()} for k, v in data.items()}
        except (OSError, ValueError, AttributeError):
            return {}

    def remember(self, spec_name: str, parts: Mapping[str, Mapping[str, str]]) -> None:
        index = self.previous(spec_name)
        index.update({k: dict(v) for k, v in parts.items()})
        os.makedirs(os.path.join(self.directory, "index"), exist_ok=True)
        write_text(os.path.join(self.directory, "index", f"{spec_name}.json"), json.dumps(index, indent=1))

    def entries(self) -> Iterator[dict[str, Any]]:
        """Every entry's header (what made it, its size and age); unreadable ones say so."""
        root = os.path.join(self.directory, "entries")
        for folder, _, names in sorted(os.walk(root)):
            for name in sorted(names):
                path = os.path.join(folder, name)
                try:
                    with np.load(path, allow_pickle=False) as archive:
                        header = json.loads(str(archive["header"]))
                except Exception as exc:
                    header = {"key": name.removesuffix(".npz"), "what": f"unreadable ({type(exc).__name__})"}
                yield {**header, "path": path, "file_bytes": os.path.getsize(path)}

    def clear(self) -> int:
        """Remove every entry; the number removed. The index stays: the next run can say what was cleared."""
        removed = 0
        for entry in list(self.entries()):
            os.unlink(entry["path"])
            removed += 1
        return removed


def write_checked(path: str, header: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> None:
    """An npz of named arrays (no pickle) with a JSON header holding a SHA-256 of them, written atomically."""
    checked = {**header, "sha256": _checksum(list(arrays.values()))}
    contents: dict[str, Any] = {"header": np.array(json.dumps(checked)), **arrays}
    buffer = io.BytesIO()
    np.savez(buffer, **contents)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    write_bytes(path, buffer.getvalue())


def read_checked(path: str) -> tuple[dict[str, Any], dict[str, np.ndarray], bool]:
    """What :func:`write_checked` wrote: its header, its arrays, and whether they match the header's SHA-256.

    Raises on a file that cannot be read as such (the caller says so and does not use it)."""
    with np.load(path, allow_pickle=False) as archive:
        header = json.loads(str(archive["header"]))
        arrays = {name: np.array(archive[name]) for name in archive.files if name != "header"}
    if not isinstance(header, dict):
        raise ValueError("its header is not a mapping")
    return header, arrays, header.get("sha256") == _checksum(list(arrays.values()))


def _checksum(values: Sequence[np.ndarray]) -> str:
    digest = hashlib.sha256()
    for value in values:
        digest.update(f"{value.dtype.str}{value.shape}".encode())
        digest.update(np.ascontiguousarray(value).tobytes())
    return digest.hexdigest()


def ref_of(plan: Plan, name: str) -> list[OpRef]:
    """The refs that make up an op's value (one per output)."""
    outputs = plan.spec.op(name).outputs
    return [OpRef(name)] if outputs == 1 else [OpRef(name, i) for i in range(outputs)]
