"""One vocabulary: docs/architecture.md's glossary defines the words, and the docs keep to it.

The glossary picks ``sweep`` as the word for the construct (the code's record of one is a
``Search``) and keeps "search" in prose only for the search space and the common names of
the field. A word with two meanings in two places is what this guards against; the
glossary's other entries (copy, task, slot, report, stage) are checked to be there.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# "search" as the glossary lets it stand; "searches and ensembles" is the heading of what sweeps are for
ALLOWED = re.compile(r"search space|grid search|hyperparameter search|searches and ensembles", re.I)


def _prose(text: str) -> str:
    """The page without fenced blocks (what commands print, as printed), inline code and link targets."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    text = re.sub(r"`[^`]*`", "", text)
    return re.sub(r"\]\([^)]*\)", "]", text)


def test_the_glossary_defines_each_word_with_two_meanings() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    glossary = text.split("\n## Glossary\n", 1)[1].split("\n## ", 1)[0]
    terms = re.findall(r"^- \*\*(\w+)\*\*", glossary, re.M)
    assert {"Stage", "Sweep", "Copy", "Task", "Slot", "Report", "Loop"} <= set(terms)
    for word in ("Dask task", "TensorFlow task", "transfer", "run report", "HTML report", "thread slot"):
        assert word in glossary, word
    # the six modules named loops.py, each named in the glossary
    for path in sorted((ROOT / "orchestrator").rglob("loops.py")):
        module = ".".join(path.relative_to(ROOT / "orchestrator").with_suffix("").parts)
        assert f"`{module}`" in glossary, module


def test_the_docs_say_sweep_not_search() -> None:
    found = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        text = re.sub(r"\n## Glossary\n.*?(?=\n## |\Z)", "\n", text, flags=re.S)  # it names the old words
        for line in _prose(text).splitlines():
            if re.search(r"\bsearch", ALLOWED.sub("", line), re.I):
                found.append(f"{page.relative_to(ROOT)}: {line.strip()}")
    assert found == []
