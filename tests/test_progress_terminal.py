"""On a terminal, ``orchestrate run`` draws a line per loop, one per copy of a sweep's loop (cli/progress.py).

The run's standard output is a real terminal here (a pseudo-terminal this
test reads), as a user's would be; elsewhere (pipes, the other tests) the
output is the plain line it always was (tests/test_training.py checks it).
"""

from __future__ import annotations

import fcntl
import os
import re
import signal
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest
from test_halving import LRS, STEPS, numpy_descent, numpy_halving, spec_text

pytestmark = [pytest.mark.cluster, pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a Linux pty")]
BIN = Path(sys.executable).parent
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
ERASE_LINE = "\x1b[2K"  # what rich's live display sends before it redraws a line
COPY = re.compile(r"hp/(\d+)/train")


def on_a_terminal(args: list[str], cwd: Path, stop_when: str = "") -> tuple[int, str, str]:
    """Run ``args`` with its standard output on a pseudo-terminal of 160 columns; its code, output and errors.

    With ``stop_when``: once that text is on the screen, Ctrl-C (SIGINT to the process group, as a terminal)."""
    leader, follower = os.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 160, 0, 0))
    env = {**os.environ, "TERM": "xterm-256color", "PYTHONUNBUFFERED": "1", "COLUMNS": "160", "LINES": "50"}
    proc = subprocess.Popen(args, stdout=follower, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, cwd=str(cwd),
                            env=env, start_new_session=True)
    os.close(follower)
    seen, sent = b"", False
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: every holder of the terminal has closed it
            break
        if not chunk:
            break
        seen += chunk
        if stop_when and not sent and stop_when in ANSI.sub("", seen.decode(errors="replace")):
            os.killpg(proc.pid, signal.SIGINT)
            sent = True
    os.close(leader)
    assert proc.stderr is not None
    err = proc.stderr.read().decode(errors="replace")
    return proc.wait(timeout=60), seen.decode(errors="replace"), err


def test_each_copys_loop_has_its_own_line_with_its_steps(tmp_path: Path) -> None:
    (tmp_path / "spec.yaml").write_text(spec_text(), encoding="utf-8")
    code, raw, err = on_a_terminal([str(BIN / "orchestrate"), "run", "spec.yaml", "--no-cache"], tmp_path)
    assert code == 0, err + raw
    assert ERASE_LINE in raw, "no live display was drawn: " + raw
    # the last picture the display drew: after its last redraw, a line per copy, then what the run printed after
    last = ANSI.sub("", raw.rsplit(ERASE_LINE, 1)[1]).replace("\r\n", "\n").split("\n")
    rows = last[:len(LRS)]
    assert all(len(COPY.findall(row)) == 1 for row in rows), rows  # one copy's loop a line
    ends = {int(COPY.search(row).group(1)): row for row in rows}  # type: ignore[union-attr]
    assert sorted(ends) == list(range(len(LRS))), rows
    stopped_at = numpy_halving(numpy_descent()[0])
    for index, row in ends.items():
        assert f"step {stopped_at[index]}/{STEPS}" in row, row
        assert ("stopped (halving: rung" in row) == (stopped_at[index] < STEPS), row
    # the finished copy shows its last loss, as the plain line does
    best = max(ends, key=lambda i: stopped_at[i])
    assert f"loss {numpy_descent()[0][best, STEPS - 1]:.4g}" in ends[best], ends[best]
    # the run's own lines are whole lines of their own, not drawn into a loop's
    said = ANSI.sub("", raw).replace("\r", "\n").split("\n")
    assert any(line.startswith("sweep 'hp': rung 1 at step 5: 4 of 8 copies go on") for line in said), said
    assert "placement summary:" in last


@pytest.mark.faults
def test_ctrl_c_with_the_display_live_prints_one_line(tmp_path: Path) -> None:
    (tmp_path / "spec.yaml").write_text(spec_text("").replace("steps: 40", "steps: 100000"), encoding="utf-8")
    code, raw, err = on_a_terminal([str(BIN / "orchestrate"), "run", "spec.yaml", "--no-cache"], tmp_path,
                                   stop_when="hp/0/train")
    assert code == 130, err + raw
    assert err == "interrupted\n", err
    assert "Traceback" not in raw and "KeyboardInterrupt" not in raw
    assert "\x1b[?25h" in raw  # the cursor the display hid is shown again
