"""One benchmark on two builds, alternated in one run: is a figure worse than the table, or was the table lucky?

A figure that moves between two ``make bench`` runs may be the build or the
machine: the small benchmarks (B1, B9) vary by ±0.1 from run to run on a
2-core machine. This runs one benchmark script in two checkouts (each with its
own ``.venv``, as ``make .venv/.installed`` makes it), old, new, old, new…, and
prints the figures side by side with their medians, so that both builds see
the same machine. Each checkout's results file is restored afterwards (the
benchmark writes it; the table's figures stay those of ``make bench``).

    python benchmarks/compare_builds.py OLD_CHECKOUT NEW_CHECKOUT --bench bench_search.py \\
        --figure variants.latency.packed_over_one_at_a_time --results search.json [--pairs 3] [-- ARGS...]

Make the old checkout with ``git worktree add /tmp/old COMMIT`` and ``make .venv/.installed`` there.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import json
from pathlib import Path
from typing import Any


def figure_at(data: Any, dotted: str) -> float:
    for part in dotted.split("."):
        data = data[part]
    return float(data)


def run_once(checkout: Path, bench: str, results: str, figures: list[str], extra: list[str]) -> list[float]:
    """Run the benchmark in ``checkout`` and read its figures; its results file is put back as it was."""
    path = checkout / "benchmarks" / "results" / results
    before = path.read_bytes() if path.exists() else None
    try:
        subprocess.run([str(checkout / ".venv" / "bin" / "python"), str(checkout / "benchmarks" / bench), *extra],
                       cwd=checkout, check=True, stdout=subprocess.DEVNULL)
        data = json.loads(path.read_text(encoding="utf-8"))
        return [figure_at(data, f) for f in figures]
    finally:
        if before is not None:
            path.write_bytes(before)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old", type=Path)
    parser.add_argument("new", type=Path)
    parser.add_argument("--bench", required=True, help="the script in benchmarks/, e.g. bench_search.py")
    parser.add_argument("--results", required=True, help="its file in benchmarks/results/, e.g. search.json")
    parser.add_argument("--figure", action="append", required=True, help="a dotted path into the results")
    parser.add_argument("--pairs", type=int, default=3)
    argv = sys.argv[1:] if argv is None else argv
    cut = argv.index("--") if "--" in argv else len(argv)
    args, extra = parser.parse_args(argv[:cut]), argv[cut + 1:]  # after "--": the benchmark's own arguments
    seen: dict[str, list[list[float]]] = {"old": [], "new": []}
    for pair in range(args.pairs):
        for side, checkout in (("old", args.old), ("new", args.new)):
            values = run_once(checkout.resolve(), args.bench, args.results, args.figure, extra)
            seen[side].append(values)
            print(f"pair {pair + 1} {side}: " + ", ".join(f"{f} {v:.3f}" for f, v in zip(args.figure, values)),
                  flush=True)
    for i, name in enumerate(args.figure):
        old = statistics.median(v[i] for v in seen["old"])
        new = statistics.median(v[i] for v in seen["new"])
        print(f"{name}: old median {old:.3f}, new median {new:.3f}, new ÷ old {new / old:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
