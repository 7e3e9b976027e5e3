"""``orchestrate checkpoints list|clear``: the checkpoint files of a spec's loops (or of a folder), and removing some.

Policy. A run prunes only the checkpoints of the revision it writes, so the
files of other revisions (another ``--set``, an edited body) stay until the
user removes them here. ``list`` shows every file by folder, loop and
revision, with the revision's parameters, what differs from the current
one, and each step's time. ``clear`` never removes everything silently: it
needs a selection (``--keep-current``, ``--revision``, ``--all``), narrowed
by ``--loop``; ``--dry-run`` lists what it would remove. Temporaries of
writes that never finished go with any clear of their folder.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, TextIO

from .. import api, report
from ..errors import UsageError, did_you_mean, format_bytes
from ..paths import safe_name
from .parser import from_here, params_of

if TYPE_CHECKING:
    from ..cache import Entry, Listing

EXIT_OK, EXIT_INVALID = 0, 1


def cmd_checkpoints(args: argparse.Namespace, out: TextIO) -> int:
    if (args.file is None) == (args.dir is None):
        raise UsageError("orchestrate checkpoints: give a spec FILE or --dir DIR (one of them)")
    if args.dir is not None and args.keep_current:
        raise UsageError("orchestrate checkpoints: --keep-current needs the spec FILE (it says which revision is "
                         "current)")
    spec: api.Plan | None = None
    if args.file is not None:
        checked = api.check_file(args.file, params=params_of(args))
        if checked.errors or checked.plan is None:
            sys.stderr.write(report.diagnostics_text([(checked.file, checked.diagnostics)]))
            return EXIT_INVALID
        spec = checked.plan
    listing = api.checkpoint_listing(spec, args.dir, output_dir=from_here(args.output_dir), cache_dir=args.cache_dir,
                                     cache_files=args.cache_files)
    entries = _of_loops(listing, args.loop)
    if args.action == "list":
        out.write(_json(listing, entries) if args.format == "json" else _text(listing, entries))
        return EXIT_OK
    chosen = _chosen(listing, entries, args)
    temporaries = [(path, size) for path, size in listing.stale
                   if not args.loop or os.path.basename(os.path.dirname(path)) in {safe_name(n) for n in args.loop}]
    kept = [e for e in entries if e not in chosen]
    if args.dry_run:
        for e in chosen:
            out.write(f"would remove {os.path.relpath(e.path)} (loop '{e.loop}', revision {e.revision}, "
                      f"step {e.step})\n")
        for path, _ in temporaries:
            out.write(f"would remove {os.path.relpath(path)} (a write that never finished)\n")
        out.write(f"would remove {_count(chosen, temporaries)}; would keep {_files(len(kept))}\n")
        return EXIT_OK
    api.remove_checkpoints([e.path for e in chosen] + [path for path, _ in temporaries])
    folders = sorted({os.path.relpath(os.path.dirname(e.path)) for e in chosen} |
                     {os.path.relpath(os.path.dirname(p)) for p, _ in temporaries})
    out.write(f"removed {_count(chosen, temporaries)}{' from ' + ', '.join(folders) if folders else ''}; "
              f"kept {_files(len(kept))}\n")
    return EXIT_OK


def _of_loops(listing: Listing, loops: Sequence[str]) -> list[Entry]:
    if not loops:
        return list(listing.entries)
    known = sorted({e.loop for e in listing.entries} | set(listing.current))
    for name in loops:
        if name not in known:
            hint = did_you_mean(name, known) or f"loops with checkpoints: {', '.join(known) or 'none'}"
            raise UsageError(f"orchestrate checkpoints: --loop {name}: no checkpoints of a loop of that name ({hint})")
    return [e for e in listing.entries if e.loop in loops]


def _chosen(listing: Listing, entries: list[Entry], args: argparse.Namespace) -> list[Entry]:
    """The files ``clear`` removes: a selection is required, never everything by default."""
    if sum([bool(args.all), bool(args.keep_current), bool(args.revision)]) != 1:
        raise UsageError("orchestrate checkpoints clear: say what to remove: --keep-current (every revision but "
                         "the spec's current one), --revision KEY, or --all (narrowed by --loop; --dry-run lists "
                         "what would be removed)")
    if args.all:
        return entries
    if args.keep_current:
        return [e for e in entries if not listing.is_current(e)]
    revisions = sorted({e.revision for e in entries})
    for given in args.revision:
        if len(given) < 4 or not any(r.startswith(given) for r in revisions):
            raise UsageError(f"orchestrate checkpoints clear: --revision {given}: no revision starts with it "
                             f"(revisions: {', '.join(revisions) or 'none'}; give 4 digits or more)")
    return [e for e in entries if any(e.revision.startswith(given) for given in args.revision)]


def _files(n: int) -> str:
    return f"{n} checkpoint{'s' if n != 1 else ''}"


def _count(chosen: Sequence[Entry], temporaries: Sequence[tuple[str, int]]) -> str:
    revisions = len({(os.path.dirname(e.path), e.revision) for e in chosen})
    size = sum(e.bytes for e in chosen) + sum(n for _, n in temporaries)
    text = f"{_files(len(chosen))} of {revisions} revision{'s' if revisions != 1 else ''}"
    if temporaries:
        text += f" and {len(temporaries)} temporary file{'s' if len(temporaries) != 1 else ''}"
    return f"{text} ({format_bytes(size)})"


def _text(listing: Listing, entries: list[Entry]) -> str:
    from ..cache import why_again

    lines: list[str] = []
    for folder in dict.fromkeys(os.path.dirname(e.path) for e in entries):
        mine = [e for e in entries if os.path.dirname(e.path) == folder]
        lines.append(f"{os.path.relpath(folder)} (loop '{mine[0].loop}')")
        newest = {e.revision: max(x.created or 0.0 for x in mine if x.revision == e.revision) for e in mine}
        for revision in sorted(newest, key=lambda r: (not listing.is_current(_first(mine, r)), -newest[r])):
            files = sorted((e for e in mine if e.revision == revision), key=lambda e: e.step)
            last = max(files, key=lambda e: e.created or 0.0)
            key = listing.current.get(last.loop)
            state = "current" if listing.is_current(last) else \
                "another revision" + (f": {why_again(last.parts, key.parts, True)}" if key and last.parts else "")
            made = ", ".join(f"{k}={v}" for k, v in sorted(last.params.items()))
            lines.append(f"  revision {revision} ({state}){', last written with ' + made if made else ''}")
            for e in files:
                when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(e.created)) if e.created else "unreadable"
                steps = f"  (a run of {e.steps} steps)" if e.steps is not None else ""
                lines.append(f"    step {e.step:>8}  {when}  {format_bytes(e.bytes):>10}{steps}")
    revisions = len({(os.path.dirname(e.path), e.revision) for e in entries})
    where = ", ".join(os.path.relpath(root) for root in listing.roots)
    lines.append(f"{_files(len(entries))} of {revisions} revision{'s' if revisions != 1 else ''}, "
                 f"{format_bytes(sum(e.bytes for e in entries))}, in {where}")
    if listing.stale:
        size = format_bytes(sum(n for _, n in listing.stale))
        lines.append(f"{len(listing.stale)} temporary file(s) of writes that never finished ({size}): "
                     f"{', '.join(os.path.relpath(p) for p, _ in listing.stale[:3])} (clear removes them)")
    return "\n".join(lines) + "\n"


def _first(entries: Sequence[Entry], revision: str) -> Entry:
    return next(e for e in entries if e.revision == revision)


def _json(listing: Listing, entries: list[Entry]) -> str:
    rows = [{"path": e.path, "loop": e.loop, "revision": e.revision, "step": e.step, "bytes": e.bytes,
             "created": e.created, "current": listing.is_current(e), "params": dict(e.params), "steps": e.steps,
             "parts": dict(e.parts), "readable": e.readable} for e in entries]
    return json.dumps({"roots": list(listing.roots), "checkpoints": rows,
                       "temporaries": [{"path": p, "bytes": n} for p, n in listing.stale]}, indent=2) + "\n"
