"""Where an op stands in the tree the constructs made: its loop, its role there, its sweep's copy.

The constructs decide it as they make each op (the expander's scope, narrowed
by each loop, replicate copy and sweep copy it enters), and every later stage
reads it here; none of them reads it back out of an op's name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Role = Literal["plain", "step", "state", "evaluation", "export"]
"""What an op is to the loop around it (``loop``):

* ``plain``: outside loops (at the top, or in a sweep copy's body outside its loops);
* ``step``: a body op, run at every step (a minibatch included);
* ``state``: a carried state, the value a step reads (``LOOP/w``);
* ``evaluation``: an op of the evaluation body, run by the loop's driver between windows;
* ``export``: ``LOOP.NAME``, the final state or a metric's series, resolved by the driver after the loop.
"""

Part = Literal["body", "value", "gathering"]
"""What an op is to the sweep around it (``sweep``): an op of a copy's ``body``, a copy's number (``value``:
a scalar op of the copy), or the sweep's ``gathering`` op (select, pick, gather, combine, table) reading every
copy."""


@dataclass(frozen=True)
class Scope:
    loop: str | None = None  # the innermost loop running it (its step, evaluation or export), None at the top
    role: Role = "plain"
    sweep: str | None = None  # the innermost sweep whose copy made it, or whose gathering op it is
    copy: int | None = None  # that copy's index (None for a gathering op)
    part: Part | None = None  # what it is to that sweep (None outside sweeps)
    indices: tuple[int, ...] = ()  # the copy index of every replicate and sweep around it, outermost first
    copies: tuple[tuple[str, int], ...] = ()  # (sweep, copy index) of every sweep copy around it, outermost first

    def copy_in(self, sweep: str) -> int | None:
        """The index of the copy of ``sweep`` that made this op (at any depth), or None."""
        return next((index for name, index in self.copies if name == sweep), None)


TOP = Scope()
