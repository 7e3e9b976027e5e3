"""Where an op stands in the tree the constructs made: its loop, its role there, its sweep's copy.

The spec stage decides it once (``spec.validate.scopes``) and every later
stage reads it here; none of them reads it back out of an op's name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Role = Literal["plain", "step", "state", "evaluation", "export", "copy-value", "gathering"]
"""What an op is to the construct around it:

* ``plain``: an op at its level (the top, or a sweep copy's body outside loops);
* ``step``: a loop's body op, run at every step (``loop`` says which);
* ``state``: a loop's carried state, the value a step reads (``LOOP/w``);
* ``evaluation``: an op of a loop's evaluation body, run by its driver between windows;
* ``export``: ``LOOP.NAME``, a loop's final state or metric series, resolved by its driver after it;
* ``copy-value``: a sweep copy's number, a scalar op of the copy;
* ``gathering``: a sweep's ``select``, ``gather``, ``combine`` or best-copy pick, reading every copy.
"""


@dataclass(frozen=True)
class Scope:
    loop: str | None = None  # the innermost loop running it (its step, evaluation or export), None at the top
    role: Role = "plain"
    sweep: str | None = None  # the innermost sweep whose copy made it, or whose gathering op it is
    copy: int | None = None  # that copy's index (None for a gathering op)
    indices: tuple[int, ...] = ()  # the copy index of every replicate and sweep around it, outermost first
    copies: tuple[tuple[str, int], ...] = ()  # (sweep, copy index) of every sweep copy around it, outermost first

    def copy_in(self, sweep: str) -> int | None:
        """The index of the copy of ``sweep`` that made this op (at any depth), or None."""
        return next((index for name, index in self.copies if name == sweep), None)


TOP = Scope()
