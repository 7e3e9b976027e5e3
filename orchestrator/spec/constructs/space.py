"""Search spaces: the values of every copy of a ``sweep`` (and a ``replicate``'s per-copy values).

A space is written one of four ways, each giving a list of copies, each copy
a mapping from parameter name to value:

* ``param`` + ``values``: one parameter over a list (the first form, kept);
* ``grid``: every combination of several lists, the first parameter slowest
  (as ``itertools.product``); an axis may be ``{glob: PATTERN}``, the files it
  matches relative to the spec's folder, sorted, one copy per file;
* ``random``: ``samples`` draws from ``uniform``, ``loguniform``, ``randint``
  (upper bound excluded, as Ray Tune's) or ``choice``, seeded: the same
  seed draws the same copies on any machine (Python's Mersenne Twister, whose
  ``random()`` stream Python keeps stable; the choice is made from it here
  rather than by ``random.choice``, whose algorithm is not promised);
* ``copies``: the list itself.

Every copy has a stable id: a hash of its values (the seed of a random space
included), so a copy keeps its id when others are added or removed, and
``--resume`` finds what it made. Files are resolved when the spec is
expanded, which ``validate`` and ``plan`` do: they read the folder, never the
files.
"""

from __future__ import annotations

import glob
import hashlib
import itertools
import json
import math
import os
import random
import re
from collections.abc import Mapping, Sequence
from typing import Any

from ...errors import Diagnostic, YamlPath, did_you_mean
from ..records import Document

Copy = dict[str, Any]
_COPY_USE = re.compile(r"\$\{\s*copy\.([A-Za-z0-9_]*)\s*\}")
DISTRIBUTIONS = ("uniform", "loguniform", "randint", "choice")


def copy_id(values: Mapping[str, Any]) -> str:
    """A copy's stable id: 12 hex digits of the SHA-256 of its values, keys sorted."""
    text = json.dumps(values, sort_keys=True, separators=(",", ":"), default=repr) \
        if all(isinstance(v, (int, float, str, bool)) for v in values.values()) else repr(sorted(values.items(), key=str))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


MAX_COPIES = 20_000
"""The copies a spec's sweeps may make in all. Every copy is planned ahead, op by op (placement, memory,
packing), so validation takes time in proportion; this bound keeps ``validate`` of the largest search a
spec may hold within seconds (benchmarks/bench_validate_copies.py). A space is counted before it is made."""


class SpaceReader:
    """Reads one construct's space; every problem becomes a diagnostic at the value that causes it."""

    def __init__(self, doc: Document, diagnostics: list[Diagnostic], room: int | None = None):
        self.doc = doc
        self.diagnostics = diagnostics
        self.room = room  # the copies this space may make (what MAX_COPIES leaves); None: no bound

    def fits(self, n: int, path: YamlPath, name: str) -> bool:
        """Does a space of ``n`` copies fit the room left (else an error at the space, before it is made)?"""
        if self.room is None or n <= self.room:
            return True
        before = f" ({MAX_COPIES - self.room:,} copies made before it)" if self.room < MAX_COPIES else ""
        self.error("sweep-space", path, f"sweep '{name}' makes {n:,} copies; a spec's sweeps make at most "
                   f"{MAX_COPIES:,} in all{before}, each planned ahead op by op",
                   "search a smaller space per run: draw random: {samples: N} from it, or split it over runs "
                   "with --set on its values", key=True)
        return False

    def error(self, code: str, path: YamlPath, message: str, hint: str, key: bool = False) -> None:
        self.diagnostics.append(self.doc.diagnostic(code, path, message, hint, key=key))

    def copies(self, spec: Mapping[str, Any], path: YamlPath, name: str) -> list[Copy]:
        """The copies of the sweep ``spec`` (at ``path``); [] when the space is unusable (said already).

        ``grid`` with ``random`` crosses them: ``samples`` draws for every point of the grid (Ray Tune's grid
        search beside sampled parameters). ``repeats: N`` makes the whole space N times (Ray's
        ``num_samples`` over a grid), fresh draws each time, each copy told its ``repeat`` (0 .. N-1).
        Order: repeat slowest, then the grid (its first parameter slowest), then the draws.
        """
        forms = [f for f in ("values", "grid", "random", "copies") if f in spec]
        if not forms or (len(forms) > 1 and set(forms) != {"grid", "random"}):
            self.error("sweep-space", path, f"sweep '{name}' " + (f"has {' and '.join(forms)}: one space, please"
                       if forms else "has no space to search"), "write one of param: + values:, grid:, random: "
                       "or copies: (grid: with random: draws random.samples copies at each point of the grid)",
                       key=len(forms) > 1)
            return []
        repeats = int(spec.get("repeats", 1))
        points = self.points(spec, path, name)
        if points is None:
            return []
        samples = int(spec["random"]["samples"]) if "random" in spec else 1
        counted = (*path, "random", "samples") if "random" in spec else (*path, "repeats") \
            if repeats > 1 and "repeats" in spec else (*path, forms[0])
        if not self.fits(len(points) * samples * repeats, counted, name) or not self.repeat_free(spec, path, name):
            return []
        if "random" not in spec and repeats == 1:
            return points
        draws = self.random(spec["random"], (*path, "random"), name, len(points) * samples * repeats) \
            if "random" in spec else [{}] * (len(points) * repeats)
        if "random" in spec and not draws:
            return []
        made = [{**point, **draws[(r * len(points) + i) * samples + j], **({"repeat": r} if repeats > 1 else {})}
                for r in range(repeats) for i, point in enumerate(points) for j in range(samples)]
        return made

    def points(self, spec: Mapping[str, Any], path: YamlPath, name: str) -> list[Copy] | None:
        """The space's fixed points: the grid's, the listed copies or values ([{}] for random alone)."""
        if "grid" in spec:
            grid = self.grid(spec["grid"], (*path, "grid"), name)
            return grid or None
        if "random" in spec:
            return [{}]
        form = "copies" if "copies" in spec else "values"
        if not self.fits(len(spec[form]) * int(spec.get("repeats", 1)), (*path, form), name):
            return None
        if form == "copies":
            return self.listed(spec["copies"], (*path, "copies"), name) or None
        return [{str(spec["param"]): v} for v in spec["values"]]

    def repeat_free(self, spec: Mapping[str, Any], path: YamlPath, name: str) -> bool:
        """With ``repeats``, ``repeat`` is the copy's repeat: no parameter of the space may have that name."""
        if int(spec.get("repeats", 1)) == 1:
            return True
        named = {str(spec.get("param"))} | set(spec.get("grid") or {}) | set((spec.get("random") or {}).get(
            "params") or {}) | {k for c in spec.get("copies") or [] for k in c}
        if "repeat" in named:
            self.error("sweep-space", (*path, "repeats"), f"sweep '{name}' repeats its space and tells each copy "
                       "its repeat as ${copy.repeat}, but the space has a parameter 'repeat' too",
                       "rename the parameter", key=True)
            return False
        return True

    def grid(self, grid: Mapping[str, Any], path: YamlPath, name: str) -> list[Copy]:
        axes: list[list[Any]] = []
        for param, axis in grid.items():
            values = self.axis(axis, (*path, param), name, str(param))
            if not values:
                return []
            axes.append(values)
        if not self.fits(math.prod(len(axis) for axis in axes), path, name):
            return []
        return self.unique([dict(zip(grid, combo)) for combo in itertools.product(*axes)], path, name)

    def axis(self, axis: Any, path: YamlPath, name: str, param: str) -> list[Any]:
        if isinstance(axis, list):
            if not axis:
                self.error("sweep-space", path, f"grid parameter '{param}' of sweep '{name}' has no values",
                           "list at least one value, or drop the parameter", key=True)
            return axis
        return self.files(str(axis["glob"]), (*path, "glob"), f"grid parameter '{param}' of sweep '{name}'")

    def files(self, pattern: str, path: YamlPath, what: str) -> list[str]:
        """The files ``pattern`` matches in the spec's folder, relative to it and sorted."""
        base = os.path.dirname(os.path.abspath(self.doc.file))
        if os.path.isabs(pattern) or ".." in pattern.replace("\\", "/").split("/"):
            self.error("sweep-glob", path, f"{what}: the glob '{pattern}' leaves the spec's folder",
                       "write a pattern relative to the spec's folder, e.g. data/shards/*.npy")
            return []
        found = sorted(os.path.relpath(p, base) for p in glob.glob(os.path.join(base, pattern), recursive=True)
                       if os.path.isfile(p))
        if not found:
            self.error("sweep-glob", path, f"{what}: the glob '{pattern}' matches no file",
                       "the pattern is matched against the spec's folder when the spec is read")
        return found

    def random(self, spec: Mapping[str, Any], path: YamlPath, name: str, count: int) -> list[Copy]:
        """``count`` draws, in order, from the stream ``seed`` starts (``samples`` for each point and repeat)."""
        draws = random.Random(int(spec.get("seed", 0)))
        samplers = []
        for param, dist in spec["params"].items():
            kind, args = next(iter(dist.items()))
            where = (*path, "params", param, kind)
            if kind not in DISTRIBUTIONS:
                self.error("sweep-distribution", (*path, "params", param), f"parameter '{param}' of sweep '{name}' "
                           f"draws from '{kind}', which is not a distribution",
                           did_you_mean(str(kind), DISTRIBUTIONS) or f"use one of {', '.join(DISTRIBUTIONS)}", key=True)
                return []
            if not self.bounds_ok(kind, args, where, param, name):
                return []
            samplers.append((str(param), kind, args))
        copies = []
        for _ in range(count):
            copies.append({param: _draw(draws.random(), kind, args) for param, kind, args in samplers})
        return copies

    def bounds_ok(self, kind: str, args: Sequence[Any], path: YamlPath, param: str, name: str) -> bool:
        if kind == "choice":
            if not args:
                self.error("sweep-space", path, f"parameter '{param}' of sweep '{name}' chooses from nothing",
                           "list the choices: choice: [a, b]")
            return bool(args)
        low, high = args
        bad = low >= high or (kind == "loguniform" and low <= 0) or \
            (kind == "randint" and not all(isinstance(v, int) for v in (low, high)))
        if bad:
            needs = {"uniform": "low < high", "loguniform": "0 < low < high",
                     "randint": "whole numbers, low < high (high is left out)"}[kind]
            self.error("sweep-space", path, f"parameter '{param}' of sweep '{name}': {kind} [{low}, {high}] "
                       "is empty", f"write {kind}: [low, high] with {needs}")
        return not bad

    def listed(self, copies: Sequence[Mapping[str, Any]], path: YamlPath, name: str) -> list[Copy]:
        keys = set(copies[0])
        for i, copy in enumerate(copies):
            if set(copy) != keys:
                self.error("sweep-space", (*path, i), f"copy {i} of sweep '{name}' sets "
                           f"{', '.join(sorted(copy)) or 'nothing'}, copy 0 sets {', '.join(sorted(keys))}",
                           "give every copy the same parameters")
                return []
        return self.unique([dict(c) for c in copies], path, name)

    def unique(self, copies: list[Copy], path: YamlPath, name: str) -> list[Copy]:
        seen: dict[str, int] = {}
        for i, copy in enumerate(copies):
            first = seen.setdefault(copy_id(copy), i)
            if first != i:
                self.error("sweep-space", path, f"copies {first} and {i} of sweep '{name}' have the same values "
                           f"({_shown(copy)})", "each copy must differ: drop the repeated value "
                           "(an ensemble gives each copy its own seed)")
                return []
        return copies


def _draw(u: float, kind: str, args: Sequence[Any]) -> Any:
    if kind == "choice":
        return args[min(int(u * len(args)), len(args) - 1)]
    low, high = args
    if kind == "uniform":
        return low + (high - low) * u
    if kind == "loguniform":
        return float(math.exp(math.log(low) + (math.log(high) - math.log(low)) * u))
    return int(low + min(int(u * (high - low)), high - low - 1))


def _shown(copy: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in copy.items())


def substitute_copy(value: Any, copy: Mapping[str, Any]) -> Any:
    """``value`` with ``${copy.NAME}`` replaced by the copy's value (typed when it is the whole value).

    Names the copy does not have are left as written: an enclosing sweep may
    define them, and what no sweep defines is reported after expansion.
    """
    if isinstance(value, str) and "${" in value:
        whole = _COPY_USE.fullmatch(value.strip())
        if whole and whole.group(1) in copy:
            return copy[whole.group(1)]
        return _COPY_USE.sub(lambda m: str(copy[m.group(1)]) if m.group(1) in copy else m.group(0), value)
    if isinstance(value, dict):
        return {k: substitute_copy(v, copy) for k, v in value.items()}
    if isinstance(value, list):
        return [substitute_copy(v, copy) for v in value]
    return value


def leftover_uses(value: Any, path: YamlPath) -> list[tuple[YamlPath, str]]:
    """Every ``${copy.NAME}`` still in ``value`` after expansion: no sweep around it defines NAME."""
    if isinstance(value, str):
        return [(path, m.group(1)) for m in _COPY_USE.finditer(value)]
    if isinstance(value, dict):
        return [u for k, v in value.items() for u in leftover_uses(v, (*path, k))]
    if isinstance(value, list):
        return [u for i, v in enumerate(value) for u in leftover_uses(v, (*path, i))]
    return []
