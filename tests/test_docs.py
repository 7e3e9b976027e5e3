"""The docs stay true to the code: every op, construct and command is documented."""

from __future__ import annotations

import json
import re
from pathlib import Path

from orchestrator.ops import CATALOG, user_op_names
from orchestrator.spec.validate import schema

ROOT = Path(__file__).resolve().parent.parent


def test_every_op_is_in_the_reference_table_with_its_kernels() -> None:
    text = (ROOT / "docs" / "spec-language.md").read_text()
    for name in user_op_names():
        row = re.search(rf"^\| `{re.escape(name)}` \| (\w+) \| ([^|]+) \|", text, re.M)
        assert row, f"op {name} missing from docs/spec-language.md"
        assert row.group(1) == CATALOG[name].tf_name
        if name != "call":
            assert set(row.group(2).replace(" ", "").split(",")) == set(CATALOG[name].kernels)


def test_readme_starts_with_the_two_setup_commands_and_shows_each_construct() -> None:
    text = (ROOT / "README.md").read_text()
    first_block = text.split("```sh", 1)[1].split("```", 1)[0]
    assert [line.split()[0:2] for line in first_block.strip().splitlines()] == [["make", "run"], ["make", "test"]]
    for construct in ("scope:", "replicate:", "sweep:", "iterate:", "op: call", "op: load", "op: save"):
        assert construct in text, construct


def test_every_schema_key_has_a_description() -> None:
    missing: list[str] = []

    def walk(node: object, where: str) -> None:
        if isinstance(node, dict):
            for key, value in (node.get("properties") or {}).items():
                if isinstance(value, dict) and "description" not in value and "$ref" not in value:
                    missing.append(f"{where}.{key}")
            for key, value in node.items():
                walk(value, f"{where}.{key}")
        elif isinstance(node, list):
            for i, value in enumerate(node):
                walk(value, f"{where}[{i}]")

    walk(schema(), "schema")
    assert not missing, missing


def test_schema_file_is_the_one_the_package_serves() -> None:
    on_disk = json.loads((ROOT / "schemas" / "spec.schema.json").read_text())
    assert on_disk == schema()
    assert on_disk["$schema"] == "https://json-schema.org/draft/2020-12/schema"


def test_every_relative_link_in_the_docs_leads_to_a_file() -> None:
    import re

    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "benchmarks" / "README.md"]
    broken = []
    for page in pages:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" not in target and not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert not broken, broken
