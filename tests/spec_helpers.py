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
