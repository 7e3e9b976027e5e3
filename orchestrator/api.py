"""The public Python API: compose the stages, nothing else.

    load -> validate -> place -> memory      (check_file, plan_file)

``check_file`` never raises for a bad spec: it returns every diagnostic.
``plan_file`` raises :class:`~orchestrator.errors.SpecError` when the spec
has errors. Neither imports user code nor starts a cluster.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from .errors import Diagnostic, SpecError
from .load import load_file
from .memory import plan_memory
from .model import Plan, Spec
from .perf import paused_gc
from .place import place
from .validate import validate

if TYPE_CHECKING:
    from .execute.run import RunResult, RunSettings


@dataclass(frozen=True)
class Checked:
    """The outcome of checking one file: all diagnostics, and the spec and plan when they could be made."""

    file: str
    diagnostics: tuple[Diagnostic, ...]
    spec: Spec | None = None
    plan: Plan | None = None

    @property
    def errors(self) -> tuple[Diagnostic, ...]:
        return tuple(d for d in self.diagnostics if d.is_error)

    @property
    def warnings(self) -> tuple[Diagnostic, ...]:
        return tuple(d for d in self.diagnostics if not d.is_error)

    def ok(self, strict: bool = False) -> bool:
        return not self.errors and not (strict and self.warnings)


def check_file(path: str | os.PathLike[str], display_name: str | None = None) -> Checked:
    """Load, validate, place and plan memory; collect every diagnostic on the way."""
    name = display_name or os.fspath(path)
    with paused_gc():
        try:
            doc = load_file(path, name)
        except SpecError as exc:
            return Checked(name, exc.diagnostics)
        spec, diagnostics = validate(doc)
        if spec is None:
            return Checked(name, tuple(diagnostics))
        plan = place(spec)
        if not any(d.is_error for d in plan.diagnostics):
            plan = plan_memory(plan)
    all_diags = tuple(sorted([*diagnostics, *plan.diagnostics], key=lambda d: (not d.is_error, d.line, d.column)))
    return Checked(name, all_diags, spec, plan)


validate_file = check_file


def plan_file(path: str | os.PathLike[str], display_name: str | None = None) -> Plan:
    """The plan of a valid spec; raises :class:`SpecError` with every error otherwise."""
    checked = check_file(path, display_name)
    if checked.errors or checked.plan is None:
        raise SpecError(checked.errors or checked.diagnostics)
    return checked.plan


def run_file(path: str | os.PathLike[str], settings: "RunSettings | None" = None, *,
             echo: "Callable[[str], None] | None" = None, **overrides: object) -> "RunResult":
    """Check, plan and run a spec; return its values and run report.

    ``overrides`` are fields of :class:`~orchestrator.execute.run.RunSettings`
    (``scheduler``, ``output_dir``, ``report_path``, ``keep_alive``, ...).
    """
    from dataclasses import replace as _replace

    from .execute.run import RunSettings, run_plan

    plan = plan_file(path)
    chosen = _replace(settings or RunSettings(), **overrides)  # type: ignore[arg-type]
    return run_plan(plan, chosen, echo)
