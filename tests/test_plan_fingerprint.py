"""What planning and compiling make, held to what they made before: a change meant to make them faster (B2:
ops found by position or by their record rather than by name) must leave every plan and graph as it was.

Per spec and granularity, a digest of the placements, the planned tasks (partitions, loop modes), the memory
plan (per device figures, packing, diagnostics) and the compiled graph's structure (every key with its task's
function, dependencies, resources, retries and owner; values, outputs, sinks, moves, partitions, done). The
tasks' payloads are left out: they are the runtime's records, and tests/test_partition_payload.py holds them.

A change that means to change a plan says so: rewrite the digests with
``.venv/bin/python tests/test_plan_fingerprint.py --write`` and say why in its commit.
"""

from __future__ import annotations

import hashlib
import json
import sys
import textwrap
from pathlib import Path
from typing import Any

from test_loops import NESTED

from orchestrator.api import plan_file
from orchestrator.compile import CompileOptions, compile_plan
from orchestrator.plan.memory import plan_memory

ROOT = Path(__file__).resolve().parent.parent
DIGESTS = Path(__file__).with_name("plan_fingerprints.json")


def _chains() -> str:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from specgen import chain_spec  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    text: str = chain_spec(600, chains=12, replicate_every=3)
    return text


def _specs(tmp: Path) -> dict[str, Path]:
    specs = {f"examples/{p.name}": p for p in sorted((ROOT / "examples").glob("*.yaml"))}
    specs.update({f"valid/{p.name}": p for p in sorted((ROOT / "specs" / "valid").glob("*.yaml"))})
    for name, text in (("chains", _chains()), ("nested", textwrap.dedent(NESTED))):
        path = tmp / f"{name}.yaml"
        path.write_text(text, encoding="utf-8")
        specs[name] = path
    return specs


def _graph(plan: Any, granularity: str, names: str) -> dict[str, Any]:
    c = compile_plan(plan, CompileOptions("tok", base_dir="/base", granularity=granularity, task_names=names))
    tasks = [(key, getattr(getattr(task, "func", None), "__name__", type(task).__name__),
              sorted(map(str, getattr(task, "dependencies", ()))), c.resources.get(key), c.retries.get(key),
              c.key_owner.get(key)) for key, task in sorted(c.tasks.items())]
    return {"tasks": tasks, "values": sorted((k, repr(v)) for k, v in c.values.items()),
            "outputs": sorted(c.output_keys.items()), "sinks": list(c.sink_keys), "moves": sorted(map(repr, c.moves.items())),
            "transfers": c.transfers, "partitions": sorted(map(repr, c.partition_ops.items())),
            "done": sorted(c.done.items()), "steps": sorted(map(repr, c.steps.items()))}


def fingerprints(tmp: Path) -> dict[str, str]:
    out = {}
    for name, path in _specs(tmp).items():
        plan = plan_file(path)
        for granularity in ("partition", "op"):
            planned = plan_memory(plan, granularity)
            made = {"placements": repr(planned.placements), "tasks": repr(planned.tasks),
                    "memory": repr(planned.memory), "packing": repr(planned.packing),
                    "diagnostics": [d.render() for d in planned.diagnostics],
                    **{f"graph-{names}": _graph(planned, granularity, names) for names in ("op", "kind")}}
            text = json.dumps(made, sort_keys=True, default=str).replace(str(tmp), "TMP").replace(str(ROOT), "ROOT")
            out[f"{name} {granularity}"] = hashlib.sha256(text.encode()).hexdigest()
    return out


def test_plans_and_graphs_are_as_they_were(tmp_path: Path) -> None:
    expected = json.loads(DIGESTS.read_text(encoding="utf-8"))
    made = fingerprints(tmp_path)
    assert sorted(made) == sorted(expected), "specs added or gone: rewrite the digests (see the module's docstring)"
    changed = [case for case in made if made[case] != expected[case]]
    assert changed == [], f"planned or compiled differently than before: {changed}"


if __name__ == "__main__":  # --write: rewrite the digests from this build
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: tests/test_plan_fingerprint.py --write")
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        DIGESTS.write_text(json.dumps(fingerprints(Path(tmp)), indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {DIGESTS}")
