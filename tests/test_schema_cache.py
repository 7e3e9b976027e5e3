"""The schema's fast validators are generated once and kept compiled in the user's cache.

Generating and compiling them (3.5 MB of Python) took about 1.1 s of every
``orchestrate validate``, ``plan`` and ``run`` before any spec was checked.
The kept code is keyed by the schema, the fastjsonschema release and the
Python; a kept file that cannot be read, or a cache that cannot be written,
costs time and changes no answer.
"""

from __future__ import annotations

import marshal
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BAD = """\
version: 1
graph:
  - {name: a, op: ones, shape: [1e3]}
"""


def _validate(spec: Path, cache: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "XDG_CACHE_HOME": str(cache)}
    return subprocess.run([sys.executable, "-m", "orchestrator", "validate", str(spec)], capture_output=True,
                          text=True, env=env, timeout=120)


def _kept(cache: Path) -> list[Path]:
    return sorted((cache / "orchestrator").glob("spec-validators-*.marshal"))


def test_the_first_process_keeps_the_validators_and_the_next_reads_them(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    good, bad = ROOT / "examples" / "quickstart.yaml", tmp_path / "bad.yaml"
    bad.write_text(BAD, encoding="utf-8")
    first = [_validate(good, cache), _validate(bad, cache)]
    kept = _kept(cache)
    assert len(kept) == 1 and kept[0].stat().st_size > 100_000
    written = kept[0].stat().st_mtime_ns
    again = [_validate(good, cache), _validate(bad, cache)]
    assert [(r.returncode, r.stdout, r.stderr) for r in again] == [(r.returncode, r.stdout, r.stderr) for r in first]
    assert first[0].returncode == 0 and first[1].returncode == 1 and "write 1000" in first[1].stdout + first[1].stderr
    assert _kept(cache)[0].stat().st_mtime_ns == written  # read, not made again
    assert not list((cache / "orchestrator").glob("*.tmp"))


def test_a_damaged_kept_file_is_made_again_and_an_unwritable_cache_changes_nothing(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    bad = tmp_path / "bad.yaml"
    bad.write_text(BAD, encoding="utf-8")
    expected = _validate(bad, cache)
    kept = _kept(cache)[0]
    for damage in (b"not marshal data", marshal.dumps({"": ("not code", 1)})):  # unreadable; readable, wrong
        kept.write_bytes(damage)
        damaged = _validate(bad, cache)
        assert (damaged.returncode, damaged.stdout, damaged.stderr) == (expected.returncode, expected.stdout,
                                                                      expected.stderr)
        assert kept.stat().st_size > 100_000  # made again and kept
    blocked = tmp_path / "a-file"
    blocked.write_text("", encoding="utf-8")  # XDG_CACHE_HOME names a file: nothing can be written under it
    unwritable = _validate(bad, blocked)
    assert (unwritable.returncode, unwritable.stdout, unwritable.stderr) == (expected.returncode, expected.stdout,
                                                                            expected.stderr)
