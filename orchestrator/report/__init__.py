"""Stage 6, records -> what the user reads: diagnostics, plans, plan diffs and runs, in the formats a registry names.

The last stage: it renders the records of the others and decides nothing.
:mod:`.text` holds the diagnostics (text, json, github; SARIF from
:mod:`.sarif`), the plan (text, json, dot) and the end-of-run summary
(with a line per gang loop of its step's critical path);
:mod:`.sweeps` a sweep's packing and what became of its copies; :mod:`.diff` the plan diff (text, json, github); :mod:`.replan` the plan without some devices (text, json); :mod:`.html` the run report
as a page (bokeh, imported only to draw). ``DIAGNOSTIC_FORMATS``,
``PLAN_FORMATS`` and ``PLAN_DIFF_FORMATS`` are the registries the CLI's
``--format`` choices come from.
"""

from .diff import PLAN_DIFF_FORMATS, PLAN_DIFF_JSON_VERSION, plan_diff_dict, plan_diff_text, summary_line
from .replan import REPLAN_FORMATS, ReplanView
from .sarif import RULES, SARIF_SCHEMA, SARIF_VERSION, diagnostics_sarif, rule_description
from .sweeps import failed_copies
from .text import (
    DIAGNOSTIC_FORMATS,
    PLAN_FORMATS,
    PLAN_JSON_VERSION,
    diagnostics_text,
    github_escape,
    loop_step_lines,
    placement_summary,
    plan_dict,
    plan_dot,
    plan_json,
    plan_text,
)

__all__ = ["DIAGNOSTIC_FORMATS", "PLAN_DIFF_FORMATS", "PLAN_DIFF_JSON_VERSION", "PLAN_FORMATS", "PLAN_JSON_VERSION",
           "REPLAN_FORMATS", "RULES", "ReplanView", "SARIF_SCHEMA", "SARIF_VERSION", "diagnostics_sarif", "diagnostics_text", "failed_copies", "github_escape",
           "loop_step_lines", "placement_summary", "plan_dict", "plan_diff_dict", "plan_diff_text", "plan_dot", "plan_json", "plan_text",
           "rule_description", "summary_line"]
