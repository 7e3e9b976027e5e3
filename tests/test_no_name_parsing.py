"""No stage after the spec reads structure back out of op names (issue 27).

Which loop holds an op, its role there, the sweep copy that made it, a loop's
parent, children and exports: the spec stage decides each once and keeps it on
the records (``Op.scope``, ``Loop.parent``/``children``, ``Spec.loop_exports``,
``Spec.outermost_loop``, ``Search.gathering``, ``Plan.packing_of``). Code after
it that split names on ``/`` or ``.`` once disagreed with the spec's own
reading in corner cases (a loop named like another's prefix, a sweep inside a
copy) and had to be kept in step with every new construct.
"""

from __future__ import annotations

import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "orchestrator"
# the spec stage makes the names and decides the tree; devices.py parses device strings (its value object)
ALLOWED = ("spec/", "devices.py")
PARSING = re.compile(
    r'split\("/"|rsplit\("/"|partition\("/"\)|rsplit\("\."|rpartition\("\."\)|split\("\."\)'
    r'|startswith\(\(?[A-Za-z_.\[\]]+ \+ "[/.]"|copy_of\(|def _parent\b|startswith\("halving')


def name_parsing(root: Path) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root).as_posix()
        if relative.startswith(ALLOWED):
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if PARSING.search(line.split("#", 1)[0]):
                found.append(f"orchestrator/{relative}:{number}: {line.strip()}")
    return found


def test_no_stage_after_the_spec_parses_op_names() -> None:
    assert name_parsing(PACKAGE) == []


def test_the_check_sees_name_parsing(tmp_path: Path) -> None:
    """The pattern would catch what the stages once did (so the test above can fail)."""
    sample = tmp_path / "execute" / "old.py"
    sample.parent.mkdir()
    sample.write_text('def _parent(loop, loops):\n'
                      '    return [o for o in loops if loop.name.startswith(o.name + "/")]\n'
                      'exports = {o.name for o in ops if o.name.startswith(lp.name + ".")}\n'
                      'copy = search.copy_of(record.name)\n'
                      'loop = name.rsplit("/", 1)[0]\n', encoding="utf-8")
    assert len(name_parsing(tmp_path)) == 5
