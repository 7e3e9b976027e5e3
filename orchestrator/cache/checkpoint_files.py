"""The checkpoint folders as a user sees them: every file, its loop, revision, step and age; removing some.

Policy. ``orchestrate checkpoints list`` and ``clear`` work on the files a
run writes (``checkpoints``): ``<root>/<loop>/<revision16>-<step>.npz``, and
the temporaries of writes that never finished. Only names of that pattern
are ever read or removed, so a checkpoint folder inside a user's results
folder loses nothing else. Headers are read without the arrays (a listing
of large checkpoints reads kilobytes); a file whose header cannot be read
is listed as unreadable, by its name.

State: none; every call reads the folders again.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .checkpoints import NAME, TEMPORARY, header_of, stale_temporaries
from .keys import Key


@dataclass(frozen=True)
class Entry:
    """One checkpoint file."""

    path: str
    loop: str
    revision: str  # the first 16 hex digits of the loop's revision key
    step: int
    bytes: int
    created: float | None = None
    parts: Mapping[str, str] = field(default_factory=dict)  # what the revision was made of
    params: Mapping[str, Any] = field(default_factory=dict)  # the spec's parameters of the run that wrote it
    steps: int | None = None  # the steps of the loop that wrote it
    readable: bool = True


@dataclass(frozen=True)
class Listing:
    """The checkpoints of some folders, and the revisions the spec makes now (when a spec was given)."""

    roots: tuple[str, ...]
    entries: tuple[Entry, ...]
    stale: tuple[tuple[str, int], ...]  # temporaries of writes that never finished: (path, bytes)
    current: Mapping[str, Key] = field(default_factory=dict)  # loop -> its revision now

    def is_current(self, entry: Entry) -> bool:
        key = self.current.get(entry.loop)
        return key is not None and key.key[:16] == entry.revision


def scan(roots: Sequence[str], current: Mapping[str, Key] | None = None) -> Listing:
    """Every checkpoint in each root's loop folders (``<root>/<loop>/``; a loop folder given as a root is
    read too), oldest revision first within a folder, by step."""
    entries: list[Entry] = []
    stale: list[tuple[str, int]] = []
    seen: set[str] = set()
    for root in roots:
        folders = [root] + ([os.path.join(root, name) for name in sorted(os.listdir(root))]
                            if os.path.isdir(root) else [])
        for folder in folders:
            real = os.path.realpath(folder)
            if real in seen or not os.path.isdir(folder):
                continue
            seen.add(real)
            entries.extend(_entries(folder))
            for path in stale_temporaries(folder):
                stale.append((path, _size(path)))
    return Listing(tuple(roots), tuple(entries), tuple(stale), dict(current or {}))


def _entries(folder: str) -> list[Entry]:
    found = []
    for name in sorted(os.listdir(folder)):
        match = NAME.fullmatch(name)
        if match is None:
            continue
        path = os.path.join(folder, name)
        header = header_of(path)
        parts, params, steps = header.get("parts"), header.get("params"), header.get("steps")
        created = header.get("created")
        found.append(Entry(path, str(header.get("loop") or os.path.basename(folder)), match.group(1),
                           int(match.group(2)), _size(path), float(created) if isinstance(created, (int, float))
                           else None, dict(parts) if isinstance(parts, dict) else {},
                           dict(params) if isinstance(params, dict) else {},
                           int(steps) if isinstance(steps, int) else None, bool(header)))
    return found


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def remove(paths: Sequence[str]) -> tuple[int, int]:
    """Remove checkpoint files and stale temporaries (only names of our patterns); (files, bytes) removed."""
    count = total = 0
    for path in paths:
        name = os.path.basename(path)
        if NAME.fullmatch(name) is None and TEMPORARY.fullmatch(name) is None:
            continue  # never anything else, whatever a caller passes
        size = _size(path)
        try:
            os.unlink(path)
        except FileNotFoundError:
            continue  # removed meanwhile
        count, total = count + 1, total + size
    return count, total
