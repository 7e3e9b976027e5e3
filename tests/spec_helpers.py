"""Small helpers shared by the plan tests: write a spec, plan it through the CLI as JSON."""

from __future__ import annotations

import io
import json
import textwrap
from pathlib import Path
from typing import Any

from orchestrator.cli import run_cli


def write(tmp_path: Path, text: str, name: str = "spec.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def plan_json(path: Path) -> dict[str, Any]:
    out = io.StringIO()
    assert run_cli(["plan", str(path), "--format", "json"], out=out) == 0
    return json.loads(out.getvalue())


EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
# the polyfit example's jobs, each in processes: host as the example says
POLYFIT_JOBS = ("    ps: {tasks: 1, processes: host}\n",
                "    worker: {tasks: 1, gpus: 2, gpu_memory: {limit: 64MiB}, processes: host}\n")


def polyfit_in(folder: Path, layout: str = "host") -> Path:
    """The polyfit example in ``folder`` (made), its functions beside it, every job in ``processes: <layout>``
    (``host`` as written; ``device``: a worker process per device, the default layout)."""
    text = (EXAMPLES / "polyfit.yaml").read_text(encoding="utf-8")
    for line in POLYFIT_JOBS:
        assert line in text, f"examples/polyfit.yaml no longer has {line.strip()!r}"
        text = text.replace(line, line.replace("processes: host", f"processes: {layout}"))
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "polyfit_fns.py").write_text((EXAMPLES / "polyfit_fns.py").read_text(encoding="utf-8"), encoding="utf-8")
    spec = folder / "polyfit.yaml"
    spec.write_text(text, encoding="utf-8")
    return spec
