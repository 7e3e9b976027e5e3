"""``orchestrate`` leaves without tearing the interpreter down (orchestrator/entry.py ``_leave``), yet as Python
would: threads that are not daemons finish, idle thread pools do not hold it up, exit hooks run, output is
flushed, and the exit code is the command's."""

from __future__ import annotations

import subprocess
import sys
import textwrap

PROGRAM = textwrap.dedent("""\
    import atexit, sys, threading, time
    from concurrent.futures import ThreadPoolExecutor

    pool = ThreadPoolExecutor(1)
    pool.submit(print, "pool ran").result()  # its thread now idles, and is not a daemon
    threading.Thread(target=lambda: (time.sleep(0.5), print("thread finished"))).start()
    atexit.register(print, "exit hook ran")
    sys.stdout.write("buffered, unflushed")
    from orchestrator.entry import _leave
    _leave(3)
    """)


def test_leave_exits_as_python_would_but_for_the_teardown() -> None:
    done = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=60)
    assert done.returncode == 3, done.stderr
    for said in ("pool ran", "buffered, unflushed", "thread finished", "exit hook ran"):
        assert said in done.stdout, done.stdout
    assert done.stdout.index("thread finished") < done.stdout.index("exit hook ran")  # Python's order
    assert done.stderr == ""
