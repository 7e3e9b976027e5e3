"""`orchestrate run --keep-alive` keeps the cluster and its dashboard up until Ctrl-C."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.cluster
ROOT = Path(__file__).resolve().parent.parent
ORCHESTRATE = str(Path(sys.executable).parent / "orchestrate")


def test_keep_alive_serves_the_dashboard_until_interrupted(tmp_path: Path) -> None:
    process = subprocess.Popen(
        [ORCHESTRATE, "run", str(ROOT / "specs" / "valid" / "matmul.yaml"), "--keep-alive", "--no-progress",
         "--output-dir", str(tmp_path)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path)
    try:
        assert process.stdout is not None
        lines: list[str] = []
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = process.stdout.readline()
            if not line:
                break
            lines.append(line)
            if "cluster kept alive" in line:
                break
        text = "".join(lines)
        assert "cluster kept alive" in text, text
        link = re.search(r"dashboard: (http://127\.0\.0\.1:\d+/status)", text)
        assert link, text
        with urllib.request.urlopen(link.group(1), timeout=30) as response:
            assert response.status == 200  # still serving after the run finished
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
