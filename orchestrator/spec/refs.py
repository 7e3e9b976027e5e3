"""A reference to an op's value: what every record that names a value holds."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class OpRef:
    """A reference to an op's value: ``name`` or ``name:i`` for output i."""

    op: str
    output: int | None = None

    @classmethod
    def parse(cls, text: str) -> OpRef:
        """``name`` or ``name:i`` (output i of a multi-output op)."""
        name, sep, index = text.rpartition(":")
        if sep and index.isdigit() and name:
            return cls(name, int(index))
        return cls(text)

    def __str__(self) -> str:
        return self.op if self.output is None else f"{self.op}:{self.output}"
