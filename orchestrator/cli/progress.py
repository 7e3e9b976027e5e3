"""The loops' progress on a terminal, drawn by rich: a line per loop, and per copy of a sweep's loop.

Policy. ``orchestrate run`` draws this view only when its standard output is
a terminal (and ``--no-progress`` is not given). Each loop that reports a
window gets its own line, kept in place and redrawn as its windows are
read: its name (a sweep's copy's loop is named for its copy, ``hp/3/train``),
a bar, ``step done/steps``, steps per second, and its latest metrics or why
it stopped. A loop's line stays when it ends, so the last picture shows where
each copy stopped. Elsewhere (a pipe, a file, CI, the tests) nothing of this
is drawn: the run prints what it always has, the plain line of
:mod:`orchestrator.execute.progress` (with ``--progress``) or nothing.

The view starts at the first loop's first window, not before: a run without
loops shows Dask's own progress bar, which a live display would garble. While
it is live, the run's own lines (``echo``) are printed above it, through
rich's console, and so is what is written to standard error when that is the
terminal too (else it goes to its file or pipe, as ever). It stops (leaving its last picture) when the run ends, fails
or is interrupted; the CLI then says what it says after any run (a Ctrl-C:
one line, ``interrupted``, on standard error).

State: rich's :class:`~rich.progress.Progress` and the task of each loop's
line, by loop name, in the order the loops first reported.
"""

from __future__ import annotations

import sys
import threading
import types
from typing import TextIO

from rich.console import Console
from rich.progress import BarColumn, Progress, ProgressColumn, Task, TaskID, TextColumn
from rich.table import Column
from rich.text import Text


class _Rate(ProgressColumn):
    """Steps per second, once a loop has read a second window (rich's estimate over its recent windows)."""

    def render(self, task: Task) -> Text:
        return Text(f"{task.speed:.0f} steps/s" if task.speed else "")


class TerminalProgress:
    """Draws each loop's progress on its own line (the ``progress_view`` of :class:`~orchestrator.api.RunSettings`)."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.console = Console(file=out)
        # every column on one line: a long note is cut short, never wrapped onto a second one; names and notes
        # are shown as they are (markup=False: a "[" in them is no style of rich's)
        self.progress = Progress(TextColumn("{task.description}", markup=False, table_column=Column(no_wrap=True)),
                                 BarColumn(bar_width=24),
                                 TextColumn("step {task.completed:.0f}/{task.total:.0f}",
                                            table_column=Column(no_wrap=True)),
                                 _Rate(table_column=Column(no_wrap=True)),
                                 TextColumn("{task.fields[note]}", markup=False,
                                            table_column=Column(no_wrap=True, overflow="ellipsis")),
                                 console=self.console, refresh_per_second=8,
                                 # what is written to standard error while live is printed above the lines, when
                                 # it is the terminal too; else it goes where it was sent (a file, a pipe)
                                 redirect_stderr=sys.stderr.isatty())
        self.lines: dict[str, TaskID] = {}
        self.live = False
        self.lock = threading.Lock()  # the run's lines come from Dask's threads too (a worker's log events)

    def show(self, loop: str, done: int, steps: int, note: str) -> None:
        with self.lock:
            if not self.live:
                self.progress.start()
                self.live = True
            line = self.lines.get(loop)
            if line is None:
                self.lines[loop] = self.progress.add_task(loop, total=steps, completed=done, note=note)
            else:
                self.progress.update(line, total=steps, completed=done, note=note)

    def echo(self, text: str) -> None:
        """One of the run's lines: above the live view while there is one, else straight to the output."""
        with self.lock:
            if self.live:
                self.console.print(text, markup=False, highlight=False, emoji=False, soft_wrap=True)
            else:
                self.out.write(text + "\n")
                self.out.flush()

    def close(self) -> None:
        with self.lock:
            if self.live:
                self.progress.stop()  # drawn a last time, and left on the screen; the cursor shown again
                self.live = False

    def __enter__(self) -> TerminalProgress:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: types.TracebackType | None) -> None:
        self.close()

